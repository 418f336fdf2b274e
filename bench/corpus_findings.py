#!/usr/bin/env python3
"""Run devicelint over a real-code corpus and count findings per rule per project.

Corpus layout: one folder per project under --corpus (default: $DEVICELINT_CORPUS, else
./corpus). The corpus is other people's code and never lives in this repository: unpack wheels
(`pip download --no-deps timm accelerate lightning diffusers torchmetrics transformers`) and
clone training repositories (nanoGPT, minGPT, pytorch/examples, yolov5, ...) into it.

Measure:
    corpus_findings.py --exe /path/to/devicelint --out result.json [--select ALL] [--only a,b]
Compare two measurements (keyed by (path, line, code)):
    corpus_findings.py --diff BEFORE.json AFTER.json [--code DL301] [--limit N]

Each folder is linted with
    <exe> check --isolated --no-cache --output-format json --exit-zero [--select X] <folder>
run from the corpus root, so paths look like `<project>/<file inside it>`.

Crashes are reported separately: an exit code other than 0/1, an `internal error` line on
stderr, unparseable JSON output, or a DL000 finding whose message says the linter itself
failed (internal error / parser crashed / not analysed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

DEFAULT_CORPUS = os.environ.get("DEVICELINT_CORPUS", "corpus")
# Same folder names devicelint skips by default (devicelint/files.py DEFAULT_EXCLUDES), so the
# file count matches what it walks. Globs: only "*.egg-info".
SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    "build",
    "dist",
    "__pycache__",
    "site-packages",
    "node_modules",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".devicelint_cache",
    ".ipynb_checkpoints",
}
SUFFIXES = (".py", ".pyi", ".ipynb")
CRASH_MARKERS = ("internal error", "parser crashed", "crashed", "not analysed")


def count_files(folder: Path) -> int:
    n = 0
    for _root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        n += sum(1 for f in files if f.endswith(SUFFIXES))
    return n


_line_cache: dict[str, list[str]] = {}


def source_line(corpus_root: Path, path: str, line: int) -> str:
    if path not in _line_cache:
        try:
            text = (corpus_root / path).read_bytes().decode("utf-8", errors="replace")
            _line_cache[path] = text.splitlines()
        except OSError:
            _line_cache[path] = []
    lines = _line_cache[path]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def is_crash_finding(f: dict) -> bool:
    return f["code"] == "DL000" and any(m in f["message"].lower() for m in CRASH_MARKERS)


def measure(args: argparse.Namespace) -> int:
    corpus_root = Path(args.corpus).resolve()
    exe = str(Path(args.exe).resolve()) if os.sep in args.exe else args.exe
    projects = sorted(p.name for p in corpus_root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if args.only:
        wanted = set(args.only.split(","))
        projects = [p for p in projects if p in wanted]
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()

    findings: list[dict] = []
    crashes: list[dict] = []
    runs: dict[str, dict] = {}
    t_all = time.perf_counter()
    for project in projects:
        cmd = [exe, "check", "--isolated", "--no-cache", "--output-format", "json", "--exit-zero"]
        if args.select:
            cmd += ["--select", args.select]
        if args.jobs:
            cmd += ["--jobs", str(args.jobs)]
        cmd.append(project)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=corpus_root, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        nfiles = count_files(corpus_root / project)
        runs[project] = {
            "files": nfiles,
            "rc": proc.returncode,
            "wall_s": round(wall, 2),
            "stderr": proc.stderr[-4000:],
        }
        if proc.returncode not in (0, 1):
            crashes.append(
                {
                    "corpus": project,
                    "kind": "exit-code",
                    "detail": f"rc={proc.returncode}",
                    "stderr": proc.stderr[-2000:],
                }
            )
        for line in proc.stderr.splitlines():
            if "internal error" in line.lower():
                crashes.append({"corpus": project, "kind": "internal-error", "detail": line.strip()})
        try:
            items = json.loads(proc.stdout) if proc.stdout.strip() else []
        except json.JSONDecodeError as err:
            crashes.append({"corpus": project, "kind": "bad-json", "detail": str(err), "stderr": proc.stderr[-2000:]})
            items = []
        for item in items:
            rec = {
                "corpus": project,
                "path": item["path"],
                "line": item["line"],
                "column": item.get("column"),
                "code": item["code"],
                "message": item["message"],
                "source": source_line(corpus_root, item["path"], item["line"]),
            }
            findings.append(rec)
            if is_crash_finding(rec):
                crashes.append(
                    {
                        "corpus": project,
                        "kind": "DL000-crash",
                        "detail": f"{rec['path']}:{rec['line']}: {rec['message']}",
                    }
                )
        print(
            f"  {project:<20} files={nfiles:<5} findings={len(items):<5} rc={proc.returncode} {wall:6.1f}s",
            file=sys.stderr,
        )
    wall_all = time.perf_counter() - t_all

    result = {
        "exe": exe,
        "version": version,
        "select": args.select or "(default)",
        "corpus_root": str(corpus_root),
        "wall_s": round(wall_all, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
        "crashes": crashes,
        "findings": findings,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print_table(result)
    print(f"\nwall time: {wall_all:.1f}s   written: {args.out}")
    return 0


def print_table(result: dict) -> None:
    """Rows: projects; columns: rule codes (plus total findings and files)."""
    runs = result["runs"]
    projects = list(runs)
    per: dict[str, Counter] = defaultdict(Counter)
    for f in result["findings"]:
        per[f["corpus"]][f["code"]] += 1
    codes = sorted({f["code"] for f in result["findings"]})
    name_w = max([7] + [len(p) for p in projects])
    print(f"\n{result['exe']}  ({result['version']})  select={result['select']}")
    print(f"{'project':<{name_w}}" + "".join(f"{c:>7}" for c in codes) + f"{'TOTAL':>7}{'files':>7}")
    for p in projects:
        row = per[p]
        print(
            f"{p:<{name_w}}"
            + "".join(f"{row.get(c, 0) or '.':>7}" for c in codes)
            + f"{sum(row.values()):>7}{runs[p]['files']:>7}"
        )
    col = Counter(f["code"] for f in result["findings"])
    print(
        f"{'TOTAL':<{name_w}}"
        + "".join(f"{col[c]:>7}" for c in codes)
        + f"{len(result['findings']):>7}{sum(r['files'] for r in runs.values()):>7}"
    )
    crashes = result["crashes"]
    print(f"\ncrashes: {len(crashes)}")
    for c in crashes:
        print(f"  [{c['corpus']}] {c['kind']}: {c['detail']}")


def _key(f: dict) -> tuple:
    return (f["path"], f["line"], f["code"])


def diff(args: argparse.Namespace) -> int:
    before = json.loads(Path(args.diff[0]).read_text())
    after = json.loads(Path(args.diff[1]).read_text())
    codes = set(args.code.split(",")) if args.code else None

    def group(result: dict) -> dict[tuple, list[dict]]:
        out: dict[tuple, list[dict]] = defaultdict(list)
        for f in result["findings"]:
            if codes is None or f["code"] in codes:
                out[_key(f)].append(f)
        return out

    b, a = group(before), group(after)
    new = [fs[len(b.get(k, [])) :] for k, fs in a.items() if len(fs) > len(b.get(k, []))]
    gone = [fs[len(a.get(k, [])) :] for k, fs in b.items() if len(fs) > len(a.get(k, []))]
    new = sorted((f for fs in new for f in fs), key=_key)
    gone = sorted((f for fs in gone for f in fs), key=_key)

    def show(title: str, items: list[dict]) -> None:
        print(
            f"\n=== {title}: {len(items)}  "
            + " ".join(f"{c}={n}" for c, n in sorted(Counter(f["code"] for f in items).items()))
        )
        for f in items[: args.limit]:
            print(f"{f['path']}:{f['line']}: {f['code']} {f['message'][: args.width]}")
            if f.get("source"):
                print(f"    | {f['source'][:160]}")
        if len(items) > args.limit:
            print(f"... {len(items) - args.limit} more (raise --limit)")

    print(
        f"BEFORE {args.diff[0]}: {before['exe']} ({before['version']}) select={before['select']} "
        f"findings={len(before['findings'])} crashes={len(before['crashes'])}"
    )
    print(
        f"AFTER  {args.diff[1]}: {after['exe']} ({after['version']}) select={after['select']} "
        f"findings={len(after['findings'])} crashes={len(after['crashes'])}"
    )
    show("NEW (only in AFTER)", new)
    show("GONE (only in BEFORE)", gone)
    bc = {(c["corpus"], c["kind"], c["detail"]) for c in before["crashes"]}
    ac = {(c["corpus"], c["kind"], c["detail"]) for c in after["crashes"]}
    if ac - bc or bc - ac:
        print("\n=== crash changes")
        for c in sorted(ac - bc):
            print(f"  NEW  [{c[0]}] {c[1]}: {c[2]}")
        for c in sorted(bc - ac):
            print(f"  GONE [{c[0]}] {c[1]}: {c[2]}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exe", help="path to the devicelint executable")
    p.add_argument("--out", help="JSON file to write")
    p.add_argument("--select", help="passed to --select (default: devicelint's default selection)")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help=f"corpus root (default {DEFAULT_CORPUS})")
    p.add_argument("--only", help="comma-separated project folders to run (default: all)")
    p.add_argument("--jobs", type=int, help="passed to --jobs")
    p.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two result files")
    p.add_argument("--code", help="with --diff: only these codes (comma-separated)")
    p.add_argument("--limit", type=int, default=200, help="with --diff: findings shown per section")
    p.add_argument("--width", type=int, default=200, help="with --diff: message characters shown")
    p.add_argument("--table", metavar="RESULT", help="reprint the table of a saved result file")
    args = p.parse_args()
    if args.diff:
        return diff(args)
    if args.table:
        print_table(json.loads(Path(args.table).read_text()))
        return 0
    if not args.exe or not args.out:
        p.error("--exe and --out are required (or use --diff / --table)")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
