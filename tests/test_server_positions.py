"""Positions between devicelint (1-based, code points) and LSP (0-based, UTF-16 by default), and
the `devicelint server` command without pygls."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devicelint.server.positions import UTF8, UTF16, UTF32, LineIndex, code_units

# "é" is one UTF-16 unit and two UTF-8 bytes; "🍮" is two UTF-16 units (a surrogate pair),
# four UTF-8 bytes, one code point.
LINE = 'x = "é🍮"; y = torch.load(p)'
LOAD_COLUMN = LINE.index("torch") + 1  # devicelint's 1-based code-point column: 15


@pytest.mark.parametrize(("encoding", "character"), [(UTF16, 15), (UTF8, 18), (UTF32, 14)])
def test_columns_after_non_ascii_text_count_the_encodings_units(encoding: str, character: int) -> None:
    index = LineIndex(f"import torch\n{LINE}\n", encoding)
    assert index.lsp_position(2, LOAD_COLUMN) == (1, character)
    assert index.offset(1, character) == len("import torch\n") + LOAD_COLUMN - 1
    assert index.position_of_offset(len("import torch\n") + LOAD_COLUMN - 1) == (1, character)


def test_code_units() -> None:
    assert [code_units("a🍮é", e) for e in (UTF8, UTF16, UTF32)] == [7, 4, 3]


def test_line_breaks_are_lsps_and_positions_past_the_end_are_clamped() -> None:
    # "\r\n", "\r" and "\n" break lines; a form feed does not (str.splitlines would split there).
    index = LineIndex("a\r\nb\rc\x0cd\ne")
    assert index.starts == [0, 3, 5, 9]
    assert index.lsp_position(3, 3) == (2, 2)
    assert index.lsp_position(3, 99) == (2, 3)  # clamped to the line, its break excluded
    assert index.lsp_position(9, 1) == index.end() == (3, 1)
    assert index.offset(1, 5) == 4  # past the end of "b": just before its "\r"
    assert index.offset(7, 0) == len(index.text)


def test_an_lsp_position_inside_a_surrogate_pair_moves_past_it() -> None:
    assert LineIndex("🍮x").offset(0, 1) == 1


def test_replacement_covers_only_what_changed_and_never_splits_a_crlf() -> None:
    pytest.importorskip("lsprotocol")
    from devicelint.server.conversions import replacement

    before = "import torch\r\nx = torch.zeros(3)  # 🍮\r\n"
    after = "import torch\r\nx = torch.zeros(3, device=d)  # 🍮\r\n"
    edit = replacement(LineIndex(before), after)
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.line, edit.range.end.character) == (
        1,
        17,
        1,
        17,
    )
    assert edit.new_text == ", device=d"
    assert replacement(LineIndex(before), before) is None
    # Line ends changed from CRLF to LF: the edit starts before the "\r", not between "\r" and "\n".
    edit = replacement(LineIndex("a\r\nb"), "a\nb")
    assert (edit.range.start.line, edit.range.start.character, edit.range.end.line, edit.range.end.character) == (
        0,
        1,
        1,
        0,
    )
    assert edit.new_text == "\n"


def test_diagnostic_from_a_finding() -> None:
    lsprotocol = pytest.importorskip("lsprotocol")
    from devicelint.finding import Finding
    from devicelint.server.conversions import diagnostic

    finding = Finding(
        "t.py",
        2,
        LOAD_COLUMN,
        2,
        LOAD_COLUMN + 13,
        "DL501",
        "torch-load-without-map-location",
        "no map_location",
        "warning",
        url="https://example.org/DL501.md",
    )
    result = diagnostic(finding, LineIndex(f"import torch\n{LINE}\n"))
    assert (result.range.start.line, result.range.start.character, result.range.end.character) == (1, 15, 28)
    assert (result.code, result.source, result.code_description.href) == (
        "DL501",
        "devicelint",
        "https://example.org/DL501.md",
    )
    assert result.severity == lsprotocol.types.DiagnosticSeverity.Warning


def test_server_without_pygls_says_what_to_install_and_exits_2() -> None:
    # `None` in sys.modules makes the import fail, as if pygls were not installed.
    program = "import sys; sys.modules['pygls'] = None; from devicelint.cli import main; sys.argv = ['devicelint', 'server']; main()"
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "install devicelint[server]" in result.stderr
    assert result.stdout == ""
