"""The operators, alone and in deterministic pairs, applied to each case."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import libcst as cst

from . import op_device, op_extract, op_loops, op_naming
from .cases import Case
from .cst_tools import Analysis, NotApplicable
from .tags import strip_tags


@dataclass(frozen=True)
class Operator:
    name: str
    family: str  # the brief's operator number and name
    apply: Callable[..., cst.Module]  # (analysis) or (analysis, tag)
    targeted: bool


OPERATORS: tuple[Operator, ...] = (
    Operator("rename_locals", "1 rename", op_naming.rename_locals, False),
    Operator("alias_imports", "1 rename", op_naming.alias_imports, False),
    Operator("from_import_factories", "1 rename", op_naming.from_import_factories, False),
    Operator("extract_function", "2 extract function", op_extract.extract_function, True),
    Operator("extract_method", "3 extract method", partial(op_extract.extract_method, kind="method"), True),
    Operator("extract_staticmethod", "3 extract method", partial(op_extract.extract_method, kind="staticmethod"), True),
    Operator("extract_classmethod", "3 extract method", partial(op_extract.extract_method, kind="classmethod"), True),
    Operator("self_attribute", "4 self attribute", op_extract.self_attribute, True),
    Operator("device_param_default", "5 device elsewhere", op_device.device_param_default, False),
    Operator("device_config_dataclass", "5 device elsewhere", op_device.device_config_dataclass, False),
    Operator("device_argparse", "5 device elsewhere", op_device.device_argparse, False),
    Operator("device_self_attr", "5 device elsewhere", op_device.device_self_attr, False),
    Operator("device_from_parameters", "5 device elsewhere", op_device.device_from_parameters, False),
    Operator("container_tuple", "6 container", partial(op_extract.container, kind="tuple"), True),
    Operator("container_list", "6 container", partial(op_extract.container, kind="list"), True),
    Operator("container_dict", "6 container", partial(op_extract.container, kind="dict"), True),
    Operator("container_dataclass", "6 container", partial(op_extract.container, kind="dataclass"), True),
    Operator("wrap_trainer_method", "7 wrap loop", op_loops.wrap_trainer_method, False),
    Operator("loop_enumerate_tqdm", "8 loop form", op_loops.loop_enumerate_tqdm, False),
    Operator("loop_while_next", "8 loop form", op_loops.loop_while_next, False),
    Operator("loop_nested_epochs", "8 loop form", op_loops.loop_nested_epochs, False),
)
BY_NAME = {op.name: op for op in OPERATORS}

# Pairs: a whole-file rewrite first, then a targeted one (or a second whole-file one).
PAIRS: tuple[tuple[str, str], ...] = tuple(
    (first, second)
    for first in ("rename_locals", "alias_imports", "loop_while_next", "device_config_dataclass")
    for second in ("extract_function", "extract_method", "self_attribute", "container_dict")
) + (
    ("rename_locals", "loop_enumerate_tqdm"),
    ("rename_locals", "wrap_trainer_method"),
    ("alias_imports", "from_import_factories"),
    ("device_self_attr", "extract_method"),
    ("loop_nested_epochs", "wrap_trainer_method"),
    ("extract_function", "rename_locals"),
)


@dataclass
class Variant:
    """One rewritten case. `lines[tag]` are the tag's lines in `text`; `error` is set when the
    rewrite does not apply (`not applicable: ...`) or broke the code (`generator error: ...`)."""

    id: str
    case: Case
    ops: tuple[str, ...]
    target: int | None
    text: str = ""
    lines: dict[int, set[int]] | None = None
    error: str = ""

    @property
    def applicable(self) -> bool:
        return not self.error


_ANALYSES: dict[str, Analysis] = {}


def _analysis(text: str) -> Analysis:
    """Rewrites never change a tree in place, so one parse of a case serves all its first rewrites."""
    if text not in _ANALYSES:
        if len(_ANALYSES) > 8:
            _ANALYSES.clear()
        _ANALYSES[text] = Analysis(text)
    return _ANALYSES[text]


def _apply(text: str, op: Operator, target: int | None) -> str:
    analysis = _analysis(text)
    module = op.apply(analysis, target) if op.targeted else op.apply(analysis)
    return module.code


def build(case: Case, ops: tuple[str, ...], target: int | None) -> Variant:
    suffix = f"@L{case.origin[target]}" if target is not None else ""
    variant = Variant(f"{case.name}::{'+'.join(ops)}{suffix}", case, ops, target)
    text = case.text
    if target is not None and _silenced(case, target):
        # moving code off a line with a noqa comment changes what the comment silences: the rewrite
        # does not keep the linter's meaning of the file
        variant.error = "not applicable: the target line carries a noqa comment"
        return variant
    try:
        for name in ops:
            op = BY_NAME[name]
            text = _apply(text, op, target if op.targeted else None)
    except NotApplicable as why:
        variant.error = f"not applicable: {why}"
        return variant
    except (cst.ParserSyntaxError, Exception) as crash:  # noqa: BLE001 - a crash is a generator bug, reported per variant
        variant.error = f"generator error: {type(crash).__name__}: {str(crash).splitlines()[0] if str(crash) else ''}"
        return variant
    clean, lines = strip_tags(text)
    try:
        compile(clean, variant.id, "exec")
    except SyntaxError as bad:
        variant.error = f"generator error: does not compile: {bad.msg} at line {bad.lineno}"
        return variant
    variant.text, variant.lines = clean, lines
    return variant


def _silenced(case: Case, target: int) -> bool:
    lines = strip_tags(case.text)[0].splitlines()
    number = case.origin.get(target, 0)
    return 0 < number <= len(lines) and "# noqa" in lines[number - 1]


def chains() -> list[tuple[str, ...]]:
    return [(op.name,) for op in OPERATORS] + [pair for pair in PAIRS]


# Targets per case: single rewrites aim at up to this many expected lines, pairs at the first.
SINGLE_TARGETS = 3
PAIR_TARGETS = 1


def _spread(items: list[int], n: int) -> list[int]:
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else items[:1]


def specs(case: Case, only: set[tuple[str, ...]] | None = None) -> Iterator[tuple[tuple[str, ...], int | None]]:
    """(chain, target) of every variant of a case, in a fixed order; cheap (nothing is built)."""
    for chain in chains():
        if only is not None and chain not in only:
            continue
        if any(BY_NAME[n].targeted for n in chain):
            if not case.targets:
                yield chain, None
            for target in _spread(case.targets, SINGLE_TARGETS if len(chain) == 1 else PAIR_TARGETS):
                yield chain, target
        else:
            yield chain, None


def build_spec(case: Case, chain: tuple[str, ...], target: int | None) -> Variant:
    if target is None and any(BY_NAME[n].targeted for n in chain):
        return Variant(
            f"{case.name}::{'+'.join(chain)}", case, chain, None, error="not applicable: no target line in the case"
        )
    return build(case, chain, target)


def generate(case: Case, only: set[tuple[str, ...]] | None = None) -> Iterator[Variant]:
    for chain, target in specs(case, only):
        yield build_spec(case, chain, target)


def identity(case: Case) -> Variant:
    clean, lines = strip_tags(case.text)
    return Variant(f"{case.name}::original", case, ("original",), None, clean, lines)
