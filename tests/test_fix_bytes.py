"""`--fix` and `--diff` byte for byte: encodings, BOMs, line ends, form feeds, stdin.

`--diff` must print exactly what `--fix` writes: `patch` applied to the untouched file gives
the `--fix` result. Fixed files keep their encoding, BOM and line ends.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest
from conftest import FIXTURES

# DL502 (safe fix) on line 7, DL501 (unsafe fix) on line 6; `café` tests the encoding.
SOURCE = (
    "# -*- coding: {coding} -*-\n"
    "import torch\n"
    "NAME = 'café'\n"
    "\n"
    "def restore(p, x):\n"
    "    state = torch.load(p)\n"
    '    if x.device == torch.device("cuda"):\n'
    "        return state\n"
    "    return None\n"
)
VARIANTS = {
    "utf8-lf": ("utf-8", b"", "\n"),
    "utf8-crlf": ("utf-8", b"", "\r\n"),
    "utf8-cr-only": ("utf-8", b"", "\r"),
    "utf8-bom": ("utf-8", b"\xef\xbb\xbf", "\n"),
    "latin1": ("latin-1", b"", "\n"),
    "latin1-crlf": ("latin-1", b"", "\r\n"),
}
COMMAND = [sys.executable, "-m", "devicelint", "check", "--isolated", "--no-cache", "--unsafe-fixes"]


def _variant(name: str, final_newline: bool = True, form_feed: bool = False) -> bytes:
    coding, bom, newline = VARIANTS[name]
    text = SOURCE.format(coding=coding)
    if form_feed:
        text = text.replace("\ndef restore", "\n\x0c\ndef restore")
    if not final_newline:
        text = text.rstrip("\n")
    return bom + text.replace("\n", newline).encode(coding)


def _run(args: list[str], cwd: Path, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run([*COMMAND, *args], cwd=cwd, input=data, capture_output=True, timeout=120)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return done


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs `patch`")
@pytest.mark.parametrize("final_newline", [True, False], ids=["final-newline", "no-final-newline"])
@pytest.mark.parametrize("name", [*VARIANTS, "form-feed"])
def test_diff_applied_with_patch_equals_fix(tmp_path: Path, name: str, final_newline: bool) -> None:
    original = _variant("utf8-lf" if name == "form-feed" else name, final_newline, form_feed=name == "form-feed")
    for folder in ("fixed", "patched"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.py").write_bytes(original)
    diff = _run(["--diff", "train.py"], tmp_path / "patched")
    assert diff.stdout.startswith(b"--- a/train.py\n+++ b/train.py\n")
    assert b"DL50" not in diff.stdout and b"DL501" in diff.stderr  # findings never mix into the diff
    _run(["--fix", "train.py"], tmp_path / "fixed")
    subprocess.run(["patch", "-s", "-p1"], cwd=tmp_path / "patched", input=diff.stdout, check=True, timeout=60)
    fixed = (tmp_path / "fixed" / "train.py").read_bytes()
    assert (tmp_path / "patched" / "train.py").read_bytes() == fixed
    assert fixed != original
    coding, bom, newline = VARIANTS["utf8-lf" if name == "form-feed" else name]
    assert fixed.startswith(bom + b"#") and "café".encode(coding) in fixed
    assert fixed.count(newline.encode()) == original.count(newline.encode())
    assert b"map_location" in fixed and b'x.device.type == "cuda"' in fixed


@pytest.mark.parametrize("name", VARIANTS)
def test_stdin_fix_writes_the_input_encoding_back(tmp_path: Path, name: str) -> None:
    original = _variant(name)
    done = _run(["--fix", "-"], tmp_path, data=original)
    coding, bom, newline = VARIANTS[name]
    assert done.stdout.startswith(bom + b"#")
    assert done.stdout.decode(coding.replace("utf-8", "utf-8-sig")).replace(newline, "\n") == (
        SOURCE.format(coding=coding)
        .replace('x.device == torch.device("cuda")', 'x.device.type == "cuda"')
        .replace("torch.load(p)", 'torch.load(p, map_location="cpu")')
    )
    assert b"DL50" not in done.stderr  # both fixed: nothing remains


def test_every_fix_over_the_fixtures_compiles_and_settles(tmp_path: Path) -> None:
    # `--fix --unsafe-fixes --select ALL` over every fixture file: each result parses and
    # compiles, and a second run changes nothing.
    work = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, work, ignore=shutil.ignore_patterns("notebooks", "*.ipynb"))
    args = ["--fix", "--select", "ALL", "--exit-zero", "-q", "."]
    _run(args, work)
    first = {p: p.read_bytes() for p in sorted(work.rglob("*.py"))}
    changed = [p for p in first if p.read_bytes() != (FIXTURES / p.relative_to(work)).read_bytes()]
    assert len(changed) >= 20
    for path in changed:
        text = path.read_text(encoding="utf-8")
        cst.parse_module(text)
        compile(text, str(path), "exec")
    _run(args, work)
    assert {p: p.read_bytes() for p in sorted(work.rglob("*.py"))} == first
