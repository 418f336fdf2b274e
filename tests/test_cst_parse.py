"""The parse without LibCST's per-node checks: the same trees, and the checks back afterwards."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from devicelint.cst_parse import parse_module

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _sources() -> list[Path]:
    return sorted(FIXTURES.rglob("*.py"))[::7]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_same_tree_as_libcst(path: Path) -> None:
    data = path.read_bytes()
    try:
        theirs = cst.parse_module(data)
    except (cst.ParserSyntaxError, UnicodeDecodeError) as err:
        with pytest.raises(type(err)):
            parse_module(data)
        return
    ours = parse_module(data)
    assert ours.bytes == data
    assert ours.deep_equals(theirs)


def test_nodes_built_by_hand_are_still_checked_after_a_parse() -> None:
    parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not an identifier")


def test_checks_come_back_after_a_syntax_error() -> None:
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def broken(:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("1x")


def test_the_package_parses_through_this_module_only() -> None:
    package = Path(__file__).resolve().parent.parent / "devicelint"
    direct = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.name != "cst_parse.py" and "cst.parse_module(" in path.read_text(encoding="utf-8")
    ]
    assert direct == []
