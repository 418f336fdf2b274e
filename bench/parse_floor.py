"""The floor devicelint is measured against: read and `libcst.parse_module` every file, nothing else.

Usage: python bench/parse_floor.py FILE_LIST JOBS   (FILE_LIST: one path per line)
Runs in the same kind of pool as devicelint (forkserver, one task per file, large files
first) and in the same big-stack thread, so the comparison is like for like.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import libcst as cst

from devicelint.runner import in_big_stack


def parse_one(path: str) -> int:
    data = Path(path).read_bytes()
    try:
        in_big_stack(cst.parse_module, data)
    except (cst.ParserSyntaxError, RecursionError, UnicodeDecodeError):
        return 0
    return 1


def main() -> None:
    paths = Path(sys.argv[1]).read_text().split("\n")
    paths = sorted((p for p in paths if p), key=lambda p: -Path(p).stat().st_size)
    jobs = int(sys.argv[2])
    if jobs <= 1:
        parsed = sum(parse_one(p) for p in paths)
    else:
        with ProcessPoolExecutor(jobs, mp_context=get_context("forkserver")) as pool:
            parsed = sum(pool.map(parse_one, paths, chunksize=1))
    print(f"parsed {parsed} of {len(paths)}", file=sys.stderr)


if __name__ == "__main__":
    main()
