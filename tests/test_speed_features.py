"""Notebooks, the pre-filter, the cache, and determinism across job counts and cache states."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner
from conftest import FIXTURES

from devicelint.cache import RESULTS_FOLDER, Cache, _decode, entry_key
from devicelint.cli import cli
from devicelint.engine import EngineOptions, lint_source, wanted_rules
from devicelint.finding import FileResult
from devicelint.notebook import virtual_source
from devicelint.registry import all_rules
from devicelint.runner import Task, TaskOptions

ALL_RULES = tuple(all_rules())


def _json(args: list[str], cwd: Path | None = None) -> list[dict]:
    runner = CliRunner()
    if cwd is not None:
        old = Path.cwd()
        os.chdir(cwd)
    try:
        result = runner.invoke(cli, ["check", "--output-format", "json", *args])
    finally:
        if cwd is not None:
            os.chdir(old)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_notebook_findings_name_cell_and_line() -> None:
    rows = _json(["--no-cache", str(FIXTURES / "notebooks")])
    located = [(Path(r["path"]).name, r["cell"], r["line"], r["column"], r["code"]) for r in rows]
    assert located == [
        ("bad_resume.ipynb", 4, 1, 9, "DL501"),
        ("bad_resume.ipynb", 5, 2, 4, "DL502"),
    ]


def test_notebook_text_output_shows_cell_location_and_cell_source() -> None:
    result = CliRunner().invoke(cli, ["check", "--no-cache", str(FIXTURES / "notebooks" / "bad_resume.ipynb")])
    assert result.exit_code == 1
    assert "bad_resume.ipynb:cell 4:1:9: DL501" in result.output
    assert '  1 | state = torch.load("ckpt.pt")' in result.output


def test_notebook_magics_and_shell_lines_become_pass_keeping_line_numbers() -> None:
    notebook = {
        "cells": [
            {"cell_type": "code", "source": ["%time x = 1\n", "!ls\n", "y = 2\n"]},
            {"cell_type": "code", "source": ["%%bash\n", "echo hi\n"]},
        ]
    }
    source, origin = virtual_source(json.dumps(notebook).encode())
    assert source.splitlines()[:3] == ["pass", "pass", "y = 2"]
    assert (origin[2].cell, origin[2].line) == (1, 3)
    assert "echo" not in source


def test_backslash_continued_shell_lines_are_part_of_the_shell_line() -> None:
    # `!cmd && \` continues onto the next line in IPython; the continuation is not Python
    # (a false DL000 "unexpected indent" on tutorial notebooks).
    cell = ["!apt-get install -y a && \\\n", "    b \\\n", "  --flag\n", "%env A=1 \\\n", "  B\n", "y = 2\n"]
    source, origin = virtual_source(json.dumps({"cells": [{"cell_type": "code", "source": cell}]}).encode())
    assert source.splitlines()[:6] == ["pass", "", "", "pass", "", "y = 2"]
    assert (origin[5].cell, origin[5].line) == (1, 6)


def test_a_percent_or_bang_inside_an_open_bracket_or_string_is_python_not_a_magic() -> None:
    # IPython reads a magic only at the start of a logical line: `% (n, t)` continuing a call
    # is the string-format operator (a false DL000 that hid a whole tutorial notebook).
    cell = [
        "msg = (\n",
        '    "%d rows in %.1f s"\n',
        "    % (n, t)\n",
        ")\n",
        'doc = """\n',
        "!not a shell line\n",
        '"""\n',
        "total = a + \\\n",
        "    %s\n",
        "%time y = 2\n",
    ]
    source, _ = virtual_source(json.dumps({"cells": [{"cell_type": "code", "source": cell}]}).encode())
    assert source.splitlines()[:10] == [
        "msg = (",
        '    "%d rows in %.1f s"',
        "    % (n, t)",
        ")",
        'doc = """',
        "!not a shell line",
        '"""',
        "total = a + \\",
        "    %s",
        "pass",
    ]


def test_an_automagic_install_line_is_a_magic_and_a_python_line_spelled_alike_is_not() -> None:
    # IPython's automagic runs `pip install ...` without its `%`; `pip = 3` is Python.
    cell = ["pip install -r requirements.txt\n", "conda install -y faiss\n", "pip = 3\n", "pip -x\n"]
    source, _ = virtual_source(json.dumps({"cells": [{"cell_type": "code", "source": cell}]}).encode())
    assert source.splitlines()[:4] == ["pass", "pass", "pip = 3", "pip -x"]


def test_assignments_from_magics_keep_their_target_and_the_notebook_linted(tmp_path: Path) -> None:
    # `out = !cmd` and `t = %magic` are IPython assignments (a false DL000 on tutorial
    # notebooks that hid every other finding); the target stays bound, its value unknown.
    cells = [
        [
            "import torch\n",
            "if True:\n",
            "    pkgs = !pip list | grep torch\n",
            "first, rest = %sx echo a \\\n",
            "    b\n",
            "self_cfg.tag = !git rev-parse HEAD\n",
        ],
        ["ratio = 3 % 2\n", "state = torch.load('w.pt')\n"],
    ]
    notebook = {
        "cells": [{"cell_type": "code", "source": c} for c in cells],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    source, _ = virtual_source(json.dumps(notebook).encode())
    assert source.splitlines()[:6] == [
        "import torch",
        "if True:",
        "    pkgs = None",
        "first, rest = None",
        "",
        "self_cfg.tag = None",
    ]
    (tmp_path / "setup.ipynb").write_text(json.dumps(notebook))
    rows = _json(["--no-cache", str(tmp_path)])
    assert [(r["code"], r["cell"], r["line"]) for r in rows] == [("DL501", 2, 2)]


def test_a_cell_pasted_with_a_leading_indent_is_dedented_as_ipython_does(tmp_path: Path) -> None:
    # IPython strips the first line's indent from every line of the cell; the cell is valid.
    cells = [["import torch\n"], ["    def load(path):\n", "        return torch.load(path)\n"]]
    notebook = {
        "cells": [{"cell_type": "code", "source": c} for c in cells],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "indented.ipynb").write_text(json.dumps(notebook))
    rows = _json(["--no-cache", str(tmp_path)])
    assert [(r["code"], r["cell"], r["line"], r["column"]) for r in rows] == [("DL501", 2, 2, 16)]


def test_a_block_of_magics_only_keeps_the_notebook_linted(tmp_path: Path) -> None:
    # Blanked to nothing, `if ...:` with only magics inside was a false DL000 that hid every
    # other finding of the notebook (yolov5's tutorial notebooks).
    cells = [
        [
            "import torch\n",
            "if torch.cuda.is_available():\n",
            "    %env CUDA_LAUNCH_BLOCKING=1\n",
            "elif False:\n",
            "    !nvidia-smi\n",
        ],
        ["state = torch.load('w.pt')\n"],
    ]
    notebook = {
        "cells": [{"cell_type": "code", "source": c} for c in cells],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "tutorial.ipynb").write_text(json.dumps(notebook))
    rows = _json(["--no-cache", str(tmp_path)])
    assert [(r["code"], r["cell"], r["line"]) for r in rows] == [("DL501", 2, 1)]


def test_notebooks_can_be_switched_off_in_config(tmp_path: Path) -> None:
    (tmp_path / "devicelint.toml").write_text("notebooks = false\n")
    (tmp_path / "nb.ipynb").write_bytes((FIXTURES / "notebooks" / "bad_resume.ipynb").read_bytes())
    assert _json(["--no-cache", "."], cwd=tmp_path) == []


def test_broken_notebook_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_text("{not json")
    rows = _json(["--no-cache", str(tmp_path)])
    assert [(r["code"], r["message"].split(":")[0]) for r in rows] == [("DL000", "not a readable Jupyter notebook")]


def test_prefilter_never_hides_a_finding() -> None:
    """Every fixture the pre-filter would skip for a rule yields nothing from that rule unfiltered."""
    checked = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_bytes().decode("utf-8", errors="replace")
        skipped = [rule for rule in ALL_RULES if rule not in wanted_rules(text, ALL_RULES)]
        if not skipped:
            continue
        unfiltered = lint_source(path.read_bytes(), str(path), EngineOptions(rules=tuple(skipped), prefilter=False))
        assert [f for f in unfiltered.findings if f.code != "DL000"] == [], path
        checked += 1
    assert checked > 0


def test_findings_identical_across_jobs_and_cache_states(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    args = ["--select", "ALL", str(FIXTURES)]
    one = _json(["--no-cache", "-j", "1", *args])
    two = _json(["--no-cache", "-j", "2", *args])
    cold = _json(["--cache-dir", str(cache), "-j", "2", *args])
    warm = _json(["--cache-dir", str(cache), "-j", "2", *args])
    assert one and one == two == cold == warm
    assert (cache / ".gitignore").read_text().strip().endswith("*")


def test_cache_key_changes_with_content_settings_and_rules() -> None:
    task = Task("a.py", "a.py", ("DL501",))
    options = TaskOptions(torch_version=None, fix_mode="none")
    base = entry_key(b"x = 1\n", task, options)
    assert base == entry_key(b"x = 1\n", task, options)
    assert base != entry_key(b"x = 2\n", task, options)
    assert base != entry_key(b"x = 1\n", Task("a.py", "a.py", ("DL501", "DL502")), options)
    assert base != entry_key(b"x = 1\n", task, TaskOptions(torch_version="2.3", fix_mode="none"))


def test_corrupt_cache_entry_is_ignored_and_rewritten(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    assert cache.prepare()
    cache.put("ab" + "0" * 62, FileResult("a.py", ()))
    entry = next((tmp_path / RESULTS_FOLDER).rglob("*.json"))
    entry.write_text("{garbage")
    assert cache.get("ab" + "0" * 62, "a.py") is None
    entry.write_text('[{"pickle": "no"}]')
    assert cache.get("ab" + "0" * 62, "a.py") is None


def test_hostile_cache_entries_are_misses_and_never_change_the_run(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("import torch\nstate = torch.load('a.pt')\n")
    cache = tmp_path / ".cache"
    good = _json(["--cache-dir", str(cache), str(source)])
    entry = next((cache / RESULTS_FOLDER).rglob("*.json"))
    row = json.loads(entry.read_text())["findings"][0]

    def entry_of(rows: object, analysed: object = True) -> str:
        return json.dumps({"analysed": analysed, "findings": rows})

    hostile = [
        "[" * 100_000 + "]" * 100_000,  # RecursionError in json.loads
        entry_of([{**row, "line": "2"}]),  # right keys, wrong types: crashed the text reporter
        entry_of([{**row, "line": True}]),
        entry_of([{**row, "message": None}]),
        entry_of([{**row, "severity": "fatal"}]),
        entry_of([{**row, "fix": {"description": "x", "safe": "yes", "edits": []}}]),
        entry_of([{**row, "fix": {"description": "x", "safe": True, "edits": [{"line": 1}]}}]),
        json.dumps({"not": "a list"}),
        entry_of({"not": "a list"}),
        entry_of([{**row, "extra": 1}]),
        entry_of([row], analysed="yes"),
        json.dumps([row]),  # the first format's entry: a bare list
    ]
    for text in hostile:
        entry.write_text(text)
        for output_format in ("text", "github", "json"):
            result = CliRunner().invoke(
                cli,
                ["check", "--cache-dir", str(cache), "--output-format", output_format, str(source)],
                catch_exceptions=False,
            )
            assert result.exit_code == 1, (text[:80], result.output)
            assert "DL501" in result.stdout
        assert _decode(entry.read_text(), "train.py") is not None  # the bad entry was rewritten
    assert _json(["--cache-dir", str(cache), str(source)]) == good


def test_warm_run_uses_cache_and_sees_edits(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("import torch\nstate = torch.load('a.pt')\n")
    cache = tmp_path / ".cache"
    first = _json(["--cache-dir", str(cache), str(source)])
    assert [r["code"] for r in first] == ["DL501"]
    assert list((cache / RESULTS_FOLDER).rglob("*.json"))
    source.write_text("import torch\nstate = torch.load('a.pt', map_location='cpu')\n")
    assert _json(["--cache-dir", str(cache), str(source)]) == []


def test_node_ranges_match_libcst_position_provider() -> None:
    """The engine's cheap positions are exactly PositionProvider's, for every node of every fixture."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from devicelint.analysis.index import NodeIndex
    from devicelint.positions import node_ranges

    compared = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            module = cst.parse_module(path.read_bytes())
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue  # the DL000 fixtures
        nodes = list(NodeIndex(module).walk(module))
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        ranges = node_ranges(module, nodes)
        assert {n: ranges[n] for n in nodes} == {n: expected[n] for n in nodes}, path
        first = nodes[1] if len(nodes) > 1 else nodes[0]
        assert node_ranges(module, [first]) == {first: expected[first]}  # early stop keeps it right
        compared += len(nodes)
    assert compared > 1000


def test_a_fully_cached_run_imports_neither_libcst_nor_the_rules(tmp_path: Path) -> None:
    # Most of a warm run's time was importing LibCST and the rule modules it never used.
    import subprocess
    import sys

    for i in range(3):
        (tmp_path / f"m{i}.py").write_text("import torch\nstate = torch.load('a.pt')\n")
    probe = (
        "import sys\n"
        "from devicelint.cli import cli\n"
        "try:\n"
        "    cli.main(['check', '-q', '--cache-dir', '.c', '.'])\n"
        "except SystemExit as done:\n"
        "    print(done.code, 'libcst' in sys.modules, 'devicelint.checks' in sys.modules, file=sys.stderr)\n"
    )
    cold = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert cold.stderr.split() == ["1", "True", "True"]
    warm = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert warm.stderr.split() == ["1", "False", "False"]
    assert warm.stdout == cold.stdout and warm.stdout.count("DL501") == 3


def test_a_linted_file_leaves_no_reference_cycle_holding_its_tree() -> None:
    # Shared analyses point back at the file's context, and a recursive closure is a cycle: the
    # whole tree would then wait for the cyclic collector, which walks every node (13% of the
    # lint time on timm). Every rule, on the bad fixtures of every family.
    import gc

    import libcst as cst

    sources = [next(iter(sorted(folder.glob("bad_*.py")))).read_text() for folder in sorted(FIXTURES.glob("DL[1-5]*"))]
    options = EngineOptions(rules=ALL_RULES)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for source in sources:
            lint_source(source, "x.py", options)
        gc.collect()
        held = [o for o in gc.garbage if isinstance(o, cst.CSTNode)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert len(sources) > 30 and held == []
