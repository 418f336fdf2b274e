#!/usr/bin/env python3
"""Apply every fix to a copy of real code and check what came out.

    fix_corpus.py SOURCE_DIR WORK_DIR [--exe devicelint] [--select ALL] [--out report.json]

SOURCE_DIR is copied to WORK_DIR (which must not exist) and
`devicelint check --isolated --no-cache --fix --unsafe-fixes --show-fixes --select ...` runs
over the copy. Then, for every file that changed:
  - it must still compile (`compile(..., "exec")`),
  - a second identical run must change no file at all,
and a unified diff per changed file is written under WORK_DIR.diffs/ for reviewers. The
report counts fixes per rule (from `--show-fixes`), changed files, compile failures and files
the second run changed. SOURCE_DIR is never written.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

_LISTED = re.compile(r"^\s+(\d+) × (DL\d{3}) ")
_FILE = re.compile(r"^- (.+):$")


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha1(path.read_bytes()).hexdigest()
        for path in root.rglob("*.py")
        if path.is_file()
    }


def _run(exe: str, select: str, root: Path) -> tuple[Counter, dict[str, Counter], str]:
    command = [
        exe,
        "check",
        "--isolated",
        "--no-cache",
        "--fix",
        "--unsafe-fixes",
        "--show-fixes",
        "--exit-zero",
        "-q",
        "--select",
        select,
        ".",
    ]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True)
    per_rule: Counter = Counter()
    per_file: dict[str, Counter] = {}
    current = None
    for line in done.stdout.splitlines():
        if match := _FILE.match(line):
            current = per_file.setdefault(match.group(1), Counter())
        elif (match := _LISTED.match(line)) and current is not None:
            current[match.group(2)] += int(match.group(1))
            per_rule[match.group(2)] += int(match.group(1))
    return per_rule, per_file, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--exe", default="devicelint")
    parser.add_argument("--select", default="ALL")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.work.exists():
        parser.error(f"{args.work} exists; give a fresh folder")
    shutil.copytree(args.source, args.work, symlinks=True)
    before = _hashes(args.work)
    per_rule, per_file, stderr = _run(args.exe, args.select, args.work)
    after = _hashes(args.work)
    changed = sorted(p for p, digest in after.items() if before.get(p) != digest)

    diffs = args.work.with_name(args.work.name + ".diffs")
    diffs.mkdir()
    not_compiling = []
    for relative in changed:
        old = (args.source / relative).read_text(encoding="utf-8", errors="replace")
        new = (args.work / relative).read_text(encoding="utf-8", errors="replace")
        try:
            compile(new, relative, "exec")
        except SyntaxError as err:
            not_compiling.append(f"{relative}: {err}")
        patch = "".join(
            difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{relative}", f"b/{relative}")
        )
        (diffs / (relative.replace("/", "__") + ".diff")).write_text(patch, encoding="utf-8")

    second_rule, _, _ = _run(args.exe, args.select, args.work)
    changed_again = sorted(p for p, digest in _hashes(args.work).items() if after.get(p) != digest)
    report = {
        "fixes_per_rule": dict(sorted(per_rule.items())),
        "fixes": sum(per_rule.values()),
        "files_changed": len(changed),
        "not_compiling": not_compiling,
        "second_run_fixes": dict(second_rule),
        "second_run_changed_files": changed_again,
        "errors": [line for line in stderr.splitlines() if "error" in line.lower()][:20],
        "diffs": str(diffs),
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0 if not not_compiling and not changed_again and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
