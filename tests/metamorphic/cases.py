"""The bug cases: every fixture `bad*.py`/`good*.py` and every shared re-created real-bug pair."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from .tags import add_tags

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
RECREATED = FIXTURES / "recreated"
_PLACES = (ROOT.parent / "shared" / "realbugs", Path("/work/shared/realbugs"))
REALBUGS = next((p for p in _PLACES if p.is_dir()), _PLACES[0])
_MARKER = re.compile(r"#\s*expect:\s*(?P<body>[^#@]*)")
_CODE = re.compile(r"DL\d{3}")
# Not device bugs (syntax errors, unused noqa) or checked only at run time.
SKIPPED_FOLDERS = {"DL000": "syntax errors are not a device bug", "DL001": "unused noqa is not a device bug"}
# Good files get at most this many targets for the targeted rewrites.
GOOD_TARGETS = 6


@dataclass
class Case:
    """One file to rewrite. `expected[tag]` is the code a bad case must report at the tag's lines
    (`NEW:...` means any code); a good case must stay clean. `targets` are the tags the targeted
    rewrites aim at; `origin[tag]` is the original line, used in variant ids."""

    name: str  # fixtures: DL101/bad_x.py; real bugs: realbugs/a01_x_bad.py
    rule: str  # the rule the case is about (enabled on top of the defaults); "" for NEW cases
    bad: bool
    text: str  # tagged source
    expected: dict[int, str] = field(default_factory=dict)
    targets: list[int] = field(default_factory=list)
    origin: dict[int, int] = field(default_factory=dict)
    # Realbug cases are one row over all their lines (hit at any line); fixtures one row per marker.
    grouped: bool = False
    refused: dict[int, str] = field(default_factory=dict)


def _markers(text: str) -> dict[int, str]:
    found = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _MARKER.search(line)
        if match and (codes := _CODE.findall(match.group("body"))):
            found[number] = codes[0]
    return found


def _statement_lines(text: str) -> list[int]:
    """First lines of statements inside functions that contain a call: targets for good files."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return []
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(cst.metadata.PositionProvider)
    lines: list[int] = []

    class Finder(cst.CSTVisitor):
        depth = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.depth += 1

        def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.depth -= 1

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            small = node.body[0]
            if self.depth and isinstance(small, (cst.Assign, cst.AugAssign, cst.Expr, cst.Return)):
                if any(isinstance(n, cst.Call) for n in _walk(small)):
                    lines.append(positions[node].start.line)

    wrapper.module.visit(Finder())
    return lines


def _walk(node: cst.CSTNode):  # type: ignore[no-untyped-def]
    yield node
    for child in node.children:
        yield from _walk(child)


def _spread(items: list[int], n: int) -> list[int]:
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _case(name: str, rule: str, bad: bool, text: str, lines: dict[int, str], targets: list[int], grouped: bool) -> Case:
    wanted = {line: i for i, line in enumerate(sorted(set(lines) | set(targets)), start=1)}
    tagged, refused = add_tags(text, wanted)
    return Case(
        name=name,
        rule=rule,
        bad=bad,
        text=tagged,
        expected={wanted[line]: code for line, code in lines.items()},
        targets=[wanted[line] for line in sorted(set(targets)) if wanted[line] not in refused],
        origin={tag: line for line, tag in wanted.items()},
        grouped=grouped,
        refused=refused,
    )


def fixture_cases() -> list[Case]:
    cases = []
    for path in sorted(FIXTURES.glob("DL*/*.py")):
        folder = path.parent.name
        if folder in SKIPPED_FOLDERS or not path.name.startswith(("bad", "good")):
            continue
        text = path.read_text(encoding="utf-8")
        name = f"{folder}/{path.name}"
        if path.name.startswith("bad"):
            marks = _markers(text)
            cases.append(_case(name, folder, True, text, marks, list(marks), grouped=False))
        else:
            targets = _spread(_statement_lines(text), GOOD_TARGETS)
            cases.append(_case(name, folder, False, text, {}, targets, grouped=False))
    return cases


def _header(text: str) -> tuple[str, list[int]]:
    line = text.splitlines()[1]
    body = line.split(":", 1)[1]
    code = body.split(";")[0].strip()
    lines = [int(x) for x in re.search(r"lines=([0-9,\s]+)", body).group(1).replace(" ", "").split(",") if x]  # type: ignore[union-attr]
    return code, lines


def _twin_lines(bad: str, good: str, lines: list[int]) -> dict[int, int]:
    """Each bad line's line in the fixed twin (a changed line maps to its counterpart)."""
    matcher = difflib.SequenceMatcher(a=bad.splitlines(), b=good.splitlines(), autojunk=False)
    mapped = {}
    for line in lines:
        i = line - 1
        for tag, a0, a1, b0, b1 in matcher.get_opcodes():
            if a0 <= i < a1:
                if tag == "equal":
                    mapped[line] = b0 + (i - a0) + 1
                elif b1 > b0:
                    mapped[line] = min(b0 + (i - a0), b1 - 1) + 1
                break
    return mapped


def _stems_listed(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    stems = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {stem for stem in stems if stem}


def pair_cases(folder: Path, label: str, skip: set[str] | None = None) -> list[Case]:
    """Each `*_bad.py` with its `*_good.py` twin (header `# expect: CODE; lines=...`), except stems in `skip`."""
    cases = []
    if not folder.is_dir():
        return cases
    for bad_path in sorted(folder.glob("*_bad.py")):
        stem = bad_path.name[: -len("_bad.py")]
        if skip and stem in skip:
            continue
        good_path = bad_path.with_name(bad_path.name.replace("_bad.py", "_good.py"))
        bad = bad_path.read_text(encoding="utf-8")
        code, lines = _header(bad)
        rule = "" if code.startswith("NEW:") else code
        cases.append(
            _case(f"{label}/{bad_path.name}", rule, True, bad, dict.fromkeys(lines, code), lines, grouped=True)
        )
        if good_path.exists():
            good = good_path.read_text(encoding="utf-8")
            mapped = _twin_lines(bad, good, lines)
            case = _case(f"{label}/{good_path.name}", rule, False, good, {}, sorted(set(mapped.values())), grouped=True)
            # Name a twin's targets after the bad file's lines, so both share variant ids.
            back = {g: b for b, g in mapped.items()}
            case.origin = {tag: back.get(line, line) for tag, line in case.origin.items()}
            cases.append(case)
    return cases


def realbug_cases() -> list[Case]:
    return pair_cases(REALBUGS, "realbugs")


def recreated_cases() -> list[Case]:
    """The re-created pairs the rules find today (known misses and known false-alarm twins are
    left out: a variant of a case that already fails measures nothing)."""
    skip = _stems_listed(RECREATED / "known_misses.txt") | _stems_listed(RECREATED / "known_false_alarms.txt")
    return pair_cases(RECREATED, "recreated", skip)


def all_cases(source: str = "fixtures") -> list[Case]:
    """`fixtures`: the rule fixtures and the shared real bugs (what CI's sample runs);
    `recreated`: the re-created pairs of `fixtures/recreated`."""
    if source == "recreated":
        return recreated_cases()
    return fixture_cases() + realbug_cases()
