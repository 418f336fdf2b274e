"""Benchmark devicelint against the LibCST parse-only floor on a corpus (not a test).

    python bench/bench.py CORPUS [--jobs 2] [--runs 3] [--torchfix "torchfix --select ALL"]

In one go, on a private copy of CORPUS's .py files (so touching a file changes nothing of
yours), it measures: (a) the parse-only floor, (b) `devicelint check` cold (no cache, every
rule on), (c) warm (cache filled, nothing changed), (d) warm after one file changed, and
optionally (e) another command such as TorchFix, and (f) start-up (`--version`). It prints medians of wall and CPU seconds,
files/s and peak RSS of the slowest process, then the ratios b/a, c/b, d/b (and e/b).
Ratios taken in one run on one machine are what to compare: these machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass
class Sample:
    wall: float
    cpu: float
    peak_mib: float


def become_subreaper() -> None:
    """Adopt orphaned descendants (the pool's forkserver and its workers) so their CPU and
    peak memory reach our RUSAGE_CHILDREN when we reap them."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        print("warning: cannot become a subreaper; CPU and RSS of pool workers are undercounted", file=sys.stderr)


def reap_orphans(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)


def _measure_here(command: list[str], allowed: tuple[int, ...]) -> None:
    """Child side of `measure`: a fresh process, so RUSAGE_CHILDREN covers this command alone."""
    become_subreaper()
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    reap_orphans()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode not in allowed:
        sys.exit(f"{shlex.join(command)} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    # ru_maxrss: the largest single descendant (KiB on Linux), i.e. the peak of the busiest worker.
    print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024]))


def measure(command: list[str], cwd: Path, allowed: tuple[int, ...] = (0,)) -> Sample:
    """Run a command to completion; wall time, CPU of it and all its descendants, and peak RSS.

    `cwd` must not be the corpus itself: `python -m` would import the corpus's own modules
    (torch's `random.py`) in place of the standard library's.
    """
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--measure", ",".join(map(str, allowed)), "--", *command],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0:
        sys.exit(completed.stderr or completed.stdout)
    wall, cpu, peak = json.loads(completed.stdout.strip().splitlines()[-1])
    return Sample(wall, cpu, peak)


def copy_corpus(corpus: Path, into: Path) -> list[Path]:
    files = []
    for source in sorted(corpus.rglob("*.py")):
        if not source.is_file():
            continue
        target = into / source.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        files.append(target)
    return files


def median(samples: list[Sample]) -> Sample:
    return Sample(
        statistics.median(s.wall for s in samples),
        statistics.median(s.cpu for s in samples),
        max(s.peak_mib for s in samples),
    )


def main() -> None:
    if len(sys.argv) > 3 and sys.argv[1] == "--measure":
        _measure_here(sys.argv[4:], tuple(int(code) for code in sys.argv[2].split(",")))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--select", default="ALL", help="rules for devicelint (default: ALL)")
    parser.add_argument("--torchfix", help="optional command to time on the same copy, e.g. 'torchfix --select ALL'")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="devicelint-bench-"))
    try:
        tree = work / "corpus"
        files = copy_corpus(args.corpus, tree)
        megabytes = sum(f.stat().st_size for f in files) / 1e6
        file_list = work / "files.txt"
        file_list.write_text("\n".join(str(f) for f in files))
        cache = work / "cache"
        lint = [
            sys.executable,
            "-m",
            "devicelint",
            "check",
            "--select",
            args.select,
            "--exit-zero",
            "-q",
            "--output-format",
            "json",
            "-j",
            str(args.jobs),
            "--isolated",
            str(tree),
        ]
        floor = [sys.executable, str(HERE / "parse_floor.py"), str(file_list), str(args.jobs)]
        rows: dict[str, list[Sample]] = {"a floor": [], "b cold": [], "c warm": [], "d touched": [], "f version": []}
        if args.torchfix:
            rows["e other"] = []
        touched = files[len(files) // 2]
        for run in range(args.runs):
            rows["a floor"].append(measure(floor, work))
            rows["b cold"].append(measure([*lint[:4], "--no-cache", *lint[4:]], work))
            shutil.rmtree(cache, ignore_errors=True)
            measure([*lint[:4], "--cache-dir", str(cache), *lint[4:]], work)  # fill
            rows["c warm"].append(measure([*lint[:4], "--cache-dir", str(cache), *lint[4:]], work))
            with touched.open("a") as handle:
                handle.write(f"\n# touched {run}\n")
            rows["d touched"].append(measure([*lint[:4], "--cache-dir", str(cache), *lint[4:]], work))
            rows["f version"].append(measure([sys.executable, "-m", "devicelint", "--version"], work))
            if args.torchfix:
                rows["e other"].append(measure([*shlex.split(args.torchfix), str(tree)], work, allowed=(0, 1)))
        medians = {name: median(samples) for name, samples in rows.items()}
        print(
            f"corpus: {args.corpus} ({len(files)} files, {megabytes:.2f} MB); jobs={args.jobs}; "
            f"medians of {args.runs} runs; rules: {args.select}"
        )
        print(f"{'step':<10} {'wall s':>8} {'cpu s':>8} {'files/s':>9} {'peak MiB':>9}")
        for name, m in medians.items():
            print(f"{name:<10} {m.wall:>8.2f} {m.cpu:>8.2f} {len(files) / m.wall:>9.0f} {m.peak_mib:>9.0f}")
        b = medians["b cold"].wall
        print(f"b/a (cold / parse floor)   = {b / medians['a floor'].wall:.2f}")
        print(f"c/b (warm / cold)          = {medians['c warm'].wall / b:.3f}")
        print(f"d/b (one touched / cold)   = {medians['d touched'].wall / b:.3f}")
        if args.torchfix:
            print(f"e/b (other / cold)         = {medians['e other'].wall / b:.2f}")
        print(f"start-up (--version)       = {medians['f version'].wall:.3f} s; warm = {medians['c warm'].wall:.3f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
