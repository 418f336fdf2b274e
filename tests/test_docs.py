"""Generated rule pages are current, and the CLI on `fixtures/` reports exactly the markers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from conftest import FIXTURES, ROOT
from fixture_markers import expected_findings, matches

from devicelint.docs import expected_pages, rule_page, stale_pages, write_pages
from devicelint.registry import all_rules


def test_rule_pages_are_current() -> None:
    stale = stale_pages()
    assert stale == [], f"rules/ is stale ({', '.join(stale)}); run `python -m devicelint.docs`"


def test_stale_pages_notices_every_kind_of_drift(tmp_path: Path) -> None:
    write_pages(tmp_path)
    assert stale_pages(tmp_path) == []
    (tmp_path / "DL501.md").write_text("edited by hand\n")
    (tmp_path / "DL502.md").unlink()
    (tmp_path / "DL998.md").write_text("# a removed rule\n")
    assert stale_pages(tmp_path) == ["DL501.md", "DL502.md", "DL998.md"]
    write_pages(tmp_path)
    assert stale_pages(tmp_path) == []
    assert sorted(p.name for p in tmp_path.glob("*.md")) == sorted(expected_pages())


def test_docs_check_command_exit_status() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devicelint.docs", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_index_lists_every_rule() -> None:
    index = (ROOT / "rules" / "README.md").read_text(encoding="utf-8")
    for rule in all_rules():
        assert f"| [{rule.code}]({rule.code}.md) | {rule.name} |" in index


def test_rule_page_has_every_section() -> None:
    for rule in all_rules():
        page = rule_page(rule)
        assert page.startswith(f"# {rule.code} {rule.name}\n\n{rule.summary}\n")
        for section in (
            "What it does",
            "Why it is a bug on a GPU",
            "Example",
            "Use instead",
            "Fix safety",
            "Known limits",
        ):
            assert f"\n## {section}\n\n" in page, (rule.code, section)


def test_cli_on_fixtures_reports_exactly_the_markers() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicelint",
            "--no-cache",
            "--isolated",
            "--select",
            "ALL",
            "--output-format",
            "json",
            "fixtures/",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    by_path: dict[str, list[SimpleNamespace]] = {}
    for row in json.loads(done.stdout):
        by_path.setdefault(row["path"], []).append(SimpleNamespace(**row))
    files = sorted(FIXTURES.glob("DL*/*.py"))
    assert files
    problems = []
    for path in files:
        display = path.relative_to(ROOT).as_posix()
        findings = by_path.pop(display, [])
        if path.name.endswith(".in.py"):
            if not findings:
                problems.append(f"{display}: a fix input yields no finding")
        elif path.name.endswith(".out.py"):
            # A fixed output is a fixed point: nothing left to fix, no other rule's finding. A case
            # its rule reports but cannot fix may stay (test_fixtures pins the exact text).
            left = [(f.line, f.code) for f in findings if f.fix is not None or f.code != path.parent.name]
            if left:
                problems.append(f"{display}: a fixed output still yields {left}")
        else:
            missing, unexpected = matches(expected_findings(path), findings)
            if missing or unexpected:
                problems.append(f"{display}: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    # Other folders under fixtures/ (notebooks, runtime examples) have their own tests.
    strays = sorted(p for p in by_path if p.startswith("fixtures/DL"))
    assert not strays, f"findings outside the fixture files: {strays}"
    assert not problems, "\n".join(problems)


def test_readme_pre_commit_rev_and_the_github_action_are_real() -> None:
    import yaml

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rev = re.search(r"^\s+rev: ([0-9a-f]{40})\b", readme, re.M)
    assert rev is not None, "the pre-commit snippet pins a commit"
    if (ROOT / ".git").exists():
        shown = subprocess.run(
            ["git", "show", f"{rev.group(1)}:.pre-commit-hooks.yaml"], cwd=ROOT, capture_output=True, text=True
        )
        assert shown.returncode == 0 and "id: devicelint" in shown.stdout, "the pinned commit has the hook"
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    assert any("github.action_path" in step.get("run", "") for step in steps)
    assert any(
        step.get("uses", "").startswith("actions/cache@") and step["with"]["path"] == ".devicelint_cache"
        for step in steps
    )
    assert any(step.get("uses", "").startswith("github/codeql-action/upload-sarif@") for step in steps)
    assert "upload-sarif" in action["inputs"]
    for page in _pages():
        assert "pip install devicelint\n" not in page.read_text(encoding="utf-8"), page  # not on a package index


README_MAX_LINES = 250


def _pages() -> list[Path]:
    """The README and the reference pages it links to."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _fenced_block_after(text: str, heading: str, marker: str) -> list[str]:
    """The lines of the first fenced code block opened by `marker` in the section under `heading`."""
    lines = text.splitlines()
    start = lines.index(marker, lines.index(heading))
    end = lines.index("```", start)
    return lines[start + 1 : end]


def test_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}); move reference text into docs/"
    )


def _anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.+)", line)):
            found.add(_anchor(heading.group(1)))
    return found


def test_relative_links_in_the_readme_and_docs_resolve() -> None:
    link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
    broken = []
    for page in _pages():
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)  # no code blocks
        text = re.sub(r"`[^`\n]*`", "", text)  # no inline code
        for target in link.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_readme_set_up_commands_are_the_ones_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = [line for line in _fenced_block_after(readme, "## Set-up", "```bash") if line and not line.startswith("#")]
    assert setup == [
        "pip install -e . && devicelint fixtures/dp_model_parallel_example/",
        "pip install torch==2.13.0 -e '.[test,runtime]' && python -m pytest -q",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -q torch==2.13.0 -e '.[test,runtime]'\n" in ci  # the README's, quieter
    assert "\npython -m pytest -q\n" in ci
    assert (ROOT / "fixtures" / "dp_model_parallel_example").is_dir()
    extras = re.search(
        r"\[project\.optional-dependencies\](.*?)\n\[", (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.S
    )
    assert extras is not None and "\ntest = [" in extras.group(1) and "\nruntime = [" in extras.group(1)


def test_readme_sample_output_is_what_the_first_command_prints() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sample = _fenced_block_after(readme, "## What it prints", "```console")
    assert sample[0] == "$ devicelint fixtures/dp_model_parallel_example/"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicelint",
            "--no-cache",
            "--color",
            "never",
            "-j",
            "1",
            "fixtures/dp_model_parallel_example/",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == sample[1:], (
        "README.md's sample output is stale: paste what `devicelint fixtures/dp_model_parallel_example/` prints"
    )
