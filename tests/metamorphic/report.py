"""Rates of the metamorphic variants per operator and per rule, and the failing variant ids.

python -m tests.metamorphic.report [-j 2] [--only OP[+OP]] [--show ID] [--cases recreated] [--write-known-failures]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import zlib
from collections import Counter, defaultdict
from multiprocessing import Pool
from pathlib import Path

from .cases import all_cases
from .scoring import score
from .variants import BY_NAME, build_spec, specs

KNOWN_FAILURES = Path(__file__).with_name("known_failures.txt")


def read_known_failures() -> set[str]:
    if not KNOWN_FAILURES.exists():
        return set()
    return {ln.strip() for ln in KNOWN_FAILURES.read_text().splitlines() if ln.strip() and not ln.startswith("#")}


def sampled(vid: str, sample: int) -> bool:
    """The deterministic sample the CI test runs: one variant id in `sample`, by hash."""
    return sample <= 1 or zlib.crc32(vid.encode()) % sample == 0


def variant_id(case, chain: tuple[str, ...], target: int | None) -> str:  # type: ignore[no-untyped-def]
    suffix = f"@L{case.origin[target]}" if target is not None else ""
    return f"{case.name}::{'+'.join(chain)}{suffix}"


def _run_case(
    args: tuple[int, set | None, int, str],
) -> tuple[list[tuple[str, str, str, bool, str, str, str]], list[tuple[str, str, str]]]:
    index, only, sample, source = args
    case = all_cases_cached(source)[index]
    rows, skipped = [], []
    for chain, target in specs(case, only):
        if not sampled(variant_id(case, chain, target), sample):
            continue
        variant = build_spec(case, chain, target)
        if variant.error:
            skipped.append(("+".join(chain), variant.id, variant.error))
            continue
        for row in score(variant):
            rows.append(
                ("+".join(chain), row.id, row.rule, row.passed, row.reason, "bug" if case.bad else "twin", case.name)
            )
    return rows, skipped


_CASES: dict[str, list] = {}


def all_cases_cached(source: str = "fixtures"):  # type: ignore[no-untyped-def]
    if source not in _CASES:
        _CASES[source] = all_cases(source)
    return _CASES[source]


def _shape(reason: str) -> str:
    return re.sub(r"(?<!DL)\b\d+", "N", reason.split(";")[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", type=int, default=1)
    ap.add_argument("--only", action="append", help="an operator chain (`a+b`); repeatable")
    ap.add_argument("--show", help="print one variant's text (its id, without a ::L suffix)")
    ap.add_argument("--write-known-failures", action="store_true")
    ap.add_argument("--sample", type=int, default=1, help="run one variant in N (the CI test's sample: 128)")
    ap.add_argument("--shapes", type=int, default=30, help="how many failure shapes to list")
    ap.add_argument(
        "--cases",
        choices=("fixtures", "recreated"),
        default="fixtures",
        help="rewrite the rule fixtures and shared real bugs (default, what CI samples) or the re-created pairs",
    )
    args = ap.parse_args(argv)
    only = {tuple(c.split("+")) for c in args.only} if args.only else None
    cases = all_cases_cached(args.cases)
    if args.show:
        name, rest = args.show.split("::", 1)
        chain, _, line = rest.partition("@L")
        case = next(c for c in cases if c.name == name)
        target = next((t for t, o in case.origin.items() if str(o) == line), None) if line else None
        variant = build_spec(case, tuple(chain.split("+")), target)
        print(variant.error or variant.text)
        print("lines:", variant.lines)
        return 0
    start = time.time()
    jobs = [(i, only, args.sample, args.cases) for i in range(len(cases))]
    if args.j > 1:
        with Pool(args.j) as pool:
            results = pool.map(_run_case, jobs, chunksize=1)
    else:
        results = [_run_case(job) for job in jobs]
    rows = [r for res in results for r in res[0]]
    skipped = [s for res in results for s in res[1]]
    per_op: dict[str, list[int]] = defaultdict(
        lambda: [0, 0, 0, 0, 0, 0]
    )  # bug ok, bug n, twin alarms, twin n, n/a, errors
    per_rule: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for chain, _, rule, passed, _, kind, _ in rows:
        t = per_op[chain]
        r = per_rule[rule]
        if kind == "bug":
            t[0] += passed
            t[1] += 1
            r[0] += passed
            r[1] += 1
        else:
            t[2] += not passed
            t[3] += 1
            r[2] += not passed
            r[3] += 1
    for chain, _, why in skipped:
        per_op[chain][5 if why.startswith("generator") else 4] += 1
    print(f"{'operator':48} {'bugs found':>14} {'twin alarms':>12} {'n/a':>5} {'gen.err':>7}")
    order = [op for op in BY_NAME] + sorted(k for k in per_op if "+" in k)
    for chain in order:
        if chain not in per_op:
            continue
        t = per_op[chain]
        rate = f"{t[0]}/{t[1]} ({100 * t[0] / t[1]:.0f}%)" if t[1] else "-"
        print(f"{chain:48} {rate:>14} {f'{t[2]}/{t[3]}':>12} {t[4]:>5} {t[5]:>7}")
    print(f"\n{'rule':8} {'bugs found':>16} {'twin alarms':>12}")
    for rule, r in sorted(per_rule.items()):
        rate = f"{r[0]}/{r[1]} ({100 * r[0] / r[1]:.0f}%)" if r[1] else "-"
        print(f"{rule:8} {rate:>16} {f'{r[2]}/{r[3]}':>12}")
    bug = [r for r in rows if r[5] == "bug"]
    twin = [r for r in rows if r[5] == "twin"]
    print(
        f"\nall: bugs found {sum(r[3] for r in bug)}/{len(bug)}, twin variants with findings "
        f"{sum(not r[3] for r in twin)}/{len(twin)}, not applicable {sum(1 for s in skipped if not s[2].startswith('generator'))}, "
        f"generator errors {sum(1 for s in skipped if s[2].startswith('generator'))}; {time.time() - start:.0f}s"
    )
    shapes: Counter = Counter()
    examples: dict[tuple, list[str]] = defaultdict(list)
    for chain, rid, rule, passed, reason, kind, _ in rows:
        if not passed:
            key = (chain, rule, kind, _shape(reason))
            shapes[key] += 1
            examples[key].append(rid)
    print("\nmost common failure shapes (operator, rule, kind, reason):")
    for key, n in shapes.most_common(args.shapes):
        print(f"  {n:4}  {' | '.join(key)}   e.g. {', '.join(examples[key][:2])}")
    print("\nnot applicable, by reason:")
    for (chain, why), n in Counter((c, w) for c, _, w in skipped).most_common():
        print(f"  {n:4}  {chain}: {why}")
    print("\nfailing variants:")
    for _chain, rid, _rule, passed, reason, _kind, _ in sorted(rows, key=lambda r: r[1]):
        if not passed:
            print(f"  {rid}  {reason}")
    if args.write_known_failures and args.cases != "fixtures":
        print("--write-known-failures keeps the list of the fixture cases only (what CI samples)")
    elif args.write_known_failures:
        failing = sorted(r[1] for r in rows if not r[3])
        if args.sample > 1 or only:  # keep what this run did not measure
            measured = {r[1] for r in rows}
            failing = sorted(set(failing) | {k for k in read_known_failures() if k not in measured})
        KNOWN_FAILURES.write_text(
            "# Metamorphic variants that fail today (regenerate: python -m tests.metamorphic.report --write-known-failures).\n"
            + "".join(f"{rid}\n" for rid in failing)
        )
        print(f"wrote {len(failing)} ids to {KNOWN_FAILURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
