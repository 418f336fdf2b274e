"""Fixes that add lines: indentation, line breaks and one-line suites."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.context import FileContext
from devicelint.engine import EngineOptions, lint_source
from devicelint.fix_text import adding_lines, line_after, line_before, own_line_statement
from devicelint.registry import Rule, Violation


class _AroundStep(Rule):
    """Test rule: `sync()` above and `update()` below every `step()` call."""

    code = "DL999"
    name = "around-step"
    summary = "test"
    message = "step"
    tokens = ("step",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for call in ctx.index.of_type(cst.Call):
            if isinstance(call.func, cst.Name) and call.func.value == "step":
                statement = own_line_statement(ctx, call)
                fix = None
                if statement is not None:
                    fix = adding_lines(
                        "wrap", True, line_before(ctx, statement, "sync()"), line_after(ctx, statement, "update()")
                    )
                yield self.violation(call, fix=fix)


def _fixed(source: str) -> str | None:
    # One round: this test rule would fire again on its own output.
    return lint_source(source, "t.py", EngineOptions(rules=(_AroundStep,), fix_mode="safe"), rounds_left=1).fixed_source


def test_lines_take_the_statement_indent_and_keep_its_comment() -> None:
    source = "for x in y:\n\tif x:\n\t\tstep()  # go\n\tdone()\n"
    assert _fixed(source) == "for x in y:\n\tif x:\n\t\tsync()\n\t\tstep()  # go\n\t\tupdate()\n\tdone()\n"


def test_windows_line_breaks_and_missing_final_line_break() -> None:
    assert _fixed("if a:\r\n    step()") == "if a:\r\n    sync()\r\n    step()\r\n    update()\r\n"


def test_one_line_suites_and_shared_lines_get_no_fix() -> None:
    assert _fixed("if a: step()\n") is None
    assert _fixed("x = 1; step()\n") is None


def _with_device(call_text: str) -> str | None:
    from devicelint.fix_text import keyword_argument, with_argument

    module = cst.parse_module(f"x = {call_text}\n")
    call = module.body[0].body[0].value
    new = with_argument(call, keyword_argument("device", "d"))
    return None if new is None else module.code_for_node(new)


def test_an_added_argument_keeps_the_call_layout() -> None:
    assert _with_device("f()") == "f(device=d)"
    assert _with_device("f(a, b)") == "f(a, b, device=d)"
    assert _with_device("f(a,b,)") == "f(a,b,device=d,)"
    # One argument per line, trailing comma, comments stay on their own lines.
    assert (
        _with_device("f(\n    a,  # first\n    b,  # second\n)")
        == "f(\n    a,  # first\n    b,  # second\n    device=d,\n)"
    )
    # The closing bracket on a line of its own stays there.
    assert _with_device("f(\n    a, b\n)") == "f(\n    a, b, device=d\n)"
    assert _with_device("f(a,\n  b)") == "f(a,\n  b,\n  device=d)"
    # A comment between the last argument and the bracket: no edit keeps it readable.
    assert _with_device("f(a  # why\n)") is None
