"""Generate the rule reference pages in `rules/` and `devicelint/rule_index.py` from the rule classes.

`python -m devicelint.docs` rewrites them; `python -m devicelint.docs --check` exits 1 when
they are stale (a test runs the check).
"""

from __future__ import annotations

import sys
from pathlib import Path

from devicelint.registry import DOC_SECTIONS, Rule, all_rules, info_of

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"


def rule_page(rule: type[Rule]) -> str:
    sections = rule.doc_sections()
    fix = {"none": "no fix", "safe": "safe fix", "unsafe": "unsafe fix", "sometimes": "safe or unsafe fix, by case"}[
        rule.fix_availability
    ]
    lines = [
        f"# {rule.code} {rule.name}",
        "",
        f"{rule.summary}",
        "",
        f"- Default: {'on' if rule.default_enabled else 'off'}",
        f"- Severity: {rule.severity}",
        f"- Fix: {fix}",
    ]
    if rule.torch_versions:
        lines.append(f"- Applies to torch {rule.torch_versions}")
    lines.append("")
    for name in DOC_SECTIONS:
        lines += [f"## {name}", "", sections[name].strip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def page_of(code_or_name: str) -> str | None:
    """The reference page of the rule with this code or name, or None if there is none."""
    from devicelint.registry import find_rule

    rule = find_rule(code_or_name)
    return rule_page(rule) if rule is not None else None


def index_page(rules: list[type[Rule]]) -> str:
    lines = [
        "# devicelint rules",
        "",
        "Generated from the rule classes by `python -m devicelint.docs`; do not edit by hand.",
        "",
        "| Code | Name | Default | Severity | Fix | Summary |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for rule in rules:
        summary = rule.summary.replace("|", "\\|")
        lines.append(
            f"| [{rule.code}]({rule.code}.md) | {rule.name} | {'on' if rule.default_enabled else 'off'} "
            f"| {rule.severity} | {rule.fix_availability} | {summary} |"
        )
    return "\n".join(lines) + "\n"


RULE_INDEX = Path(__file__).resolve().parent / "rule_index.py"


def rule_index_module(rules: list[type[Rule]]) -> str:
    """`devicelint/rule_index.py`: the rules' metadata as plain data (see `registry.rule_infos`)."""
    lines = [
        '"""Rule metadata as plain data, so a fully cached run imports neither the rules nor LibCST.',
        "",
        "Generated from the rule classes by `python -m devicelint.docs`; do not edit by hand.",
        '"""',
        "",
        "from devicelint.rule_base import RuleInfo",
        "",
        "RULES = (",
    ]
    for rule in rules:
        lines.append(f"    RuleInfo{tuple(info_of(rule))!r},")
    lines.append(")")
    return "\n".join(lines) + "\n"


def expected_pages() -> dict[str, str]:
    rules = all_rules()
    pages = {f"{rule.code}.md": rule_page(rule) for rule in rules}
    pages["README.md"] = index_page(rules)
    return pages


def stale_pages(folder: Path = RULES_DIR) -> list[str]:
    """Pages that are missing, different, or left over from a removed rule."""
    expected = expected_pages()
    stale = [
        name
        for name, text in expected.items()
        if not (folder / name).exists() or (folder / name).read_text(encoding="utf-8") != text
    ]
    stale += [p.name for p in folder.glob("*.md") if p.name not in expected]
    if not RULE_INDEX.exists() or RULE_INDEX.read_text(encoding="utf-8") != rule_index_module(all_rules()):
        stale.append("devicelint/rule_index.py")
    return sorted(stale)


def write_pages(folder: Path = RULES_DIR) -> None:
    folder.mkdir(exist_ok=True)
    expected = expected_pages()
    for name, text in expected.items():
        (folder / name).write_text(text, encoding="utf-8")
    for page in folder.glob("*.md"):
        if page.name not in expected:
            page.unlink()
    RULE_INDEX.write_text(rule_index_module(all_rules()), encoding="utf-8")


def main(argv: list[str]) -> int:
    if argv and argv != ["--check"]:
        print(
            "usage: python -m devicelint.docs [--check]\n"
            "  rewrite rules/ from the rule classes, or with --check exit 1 if it is stale",
            file=sys.stderr,
        )
        return 0 if argv in (["-h"], ["--help"]) else 2
    if "--check" in argv:
        stale = stale_pages()
        if stale:
            print(f"rules/ is stale ({', '.join(stale)}); run `python -m devicelint.docs`", file=sys.stderr)
            return 1
        return 0
    write_pages()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
