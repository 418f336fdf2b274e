"""DL119 on code written apart from the re-created bug (ra41): a script parses a GPU index,
only reports it, and allocates with index-less `.cuda()`; the twin that passes the index, and
scripts that hand the option on, are clean."""

from __future__ import annotations

import textwrap

from devicelint.engine import EngineOptions, lint_source
from devicelint.registry import all_rules

DEFAULT = EngineOptions(rules=tuple(rule for rule in all_rules() if rule.default_enabled))


def _found(source: str) -> list[tuple[int, str]]:
    result = lint_source(textwrap.dedent(source), "tools/stress.py", DEFAULT)
    return [(f.line, f.code) for f in result.findings]


STRESS = """
    import argparse

    import torch


    def _chunk(megabytes):
        return torch.zeros(megabytes * 262144).to("cuda")


    def run():
        cli = argparse.ArgumentParser()
        cli.add_argument("--device", dest="card", default=0)
        cli.add_argument("--chunks", type=int, default=8)
        settings = cli.parse_args()
        kept = [_chunk(64) for _ in range(settings.chunks)]
        print("peak", torch.cuda.max_memory_allocated(settings.card), "on", settings.card)
        return kept


    if __name__ == "__main__":
        run()
"""


def test_index_reported_but_not_used_is_found() -> None:
    assert _found(STRESS) == [(8, "DL119")]


def test_index_passed_to_the_move_is_clean() -> None:
    fixed = STRESS.replace(
        'def _chunk(megabytes):\n        return torch.zeros(megabytes * 262144).to("cuda")',
        'def _chunk(megabytes, card):\n        return torch.zeros(megabytes * 262144).to(f"cuda:{card}")',
    )
    fixed = fixed.replace("_chunk(64)", "_chunk(64, settings.card)")
    assert _found(fixed) == []


def test_option_handed_to_a_helper_is_trusted() -> None:
    handed = STRESS.replace("kept = [", "device = pick(settings.card)\n        kept = [")
    assert _found(handed) == []
