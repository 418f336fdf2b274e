"""The analysis API that checks ask: where does this value live, and where do CPU and device
values meet?

Every answer comes from one engine, the placement interpreter (`placement.py`, with calls in
`placement_calls.py`, values in `placement_facts.py`/`placement_values.py` and the module
class model in `placement_classes.py`). Checks read `file_facts(ctx)` instead of re-deriving
placement from names or re-recognising moves, so two rules cannot disagree about one value.
Heuristics that trade recall for precision stay in the rules that want them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.devices import DeviceId, indexed, int_value, literal_device
from devicelint.analysis.host_modules import HostModuleCall
from devicelint.analysis.names import is_staticmethod
from devicelint.analysis.placement import Crossing, FilePlacement, Meeting, ScopePlacement, file_placement
from devicelint.analysis.placement_classes import ClassFacts, class_facts
from devicelint.analysis.placement_facts import (
    ACCELERATOR,
    CPU,
    DEVICE,
    DEVICE_VALUE,
    FOLLOWS,
    MODULE,
    UNKNOWN_FACT,
    Fact,
)
from devicelint.analysis.placement_values import on_a_host_path
from devicelint.context import FileContext

__all__ = ["Place", "FileFacts", "file_facts", "Meeting", "Crossing", "Fact", "DeviceId"]


class Place(enum.Enum):
    """Where a tensor lives, as far as the file shows."""

    HOST = "host"  # made or moved to the CPU
    DEVICE = "device"  # made on or moved to an accelerator
    FOLLOWS = "follows"  # wherever the module's parameters or the function's inputs are
    UNKNOWN = "unknown"  # nothing proven: never a finding on its own


@dataclass(frozen=True)
class FileFacts:
    ctx: FileContext
    placement: FilePlacement

    def value(self, expr: cst.CSTNode) -> Fact:
        """The engine's fact for one expression, where its scope evaluated it; where that says
        nothing certain (a helper's parameter), what every caller's arguments make of it, if
        they agree."""
        scope: cst.CSTNode = self.ctx.index.enclosing_function(expr) or self.ctx.module
        found = self.placement.scopes.get(id(scope))
        own = found.expr_facts.get(id(expr), UNKNOWN_FACT) if found is not None else UNKNOWN_FACT
        if own != UNKNOWN_FACT and own.where != FOLLOWS and not (_guessed_device(own) and type(expr) is cst.Attribute):
            return own
        # Where the own run says "wherever the module is", a run on an instance of no known place
        # cannot answer: there the module's own tensors are nowhere known, so its inputs' place
        # would be weighed against the own run's place of those tensors.
        runs = [
            run for run in self.placement.followed.get(id(scope), ()) if not (run.unplaced and own.where == FOLLOWS)
        ]
        callers = _agreed(run.expr_facts.get(id(expr), UNKNOWN_FACT) for run in runs)
        return callers if callers != UNKNOWN_FACT else own

    def place_of(self, expr: cst.CSTNode) -> Place:
        fact = self.value(expr)
        if fact.kind == CPU:
            return Place.HOST
        if fact.kind == DEVICE:
            return (
                Place.DEVICE if fact.where == ACCELERATOR else Place.FOLLOWS if fact.where == FOLLOWS else Place.UNKNOWN
            )
        return Place.UNKNOWN

    def is_device_tensor(self, expr: cst.CSTNode, certain: bool = False) -> bool:
        """On the device: certainly (moved or made there) or, unless `certain`, also where the
        module's parameters or the inputs are."""
        place = self.place_of(expr)
        if certain:
            # (the branch a device test takes without an accelerator: `x.numpy() if not use_gpu
            # else x.cpu().numpy()`, where `x` comes from a model moved under `if use_gpu:`)
            return place is Place.DEVICE and not on_a_host_path(self.ctx, expr)
        return place is Place.DEVICE or place is Place.FOLLOWS

    def is_module(self, expr: cst.CSTNode) -> bool:
        return self.value(expr).kind == MODULE

    def device_of(self, expr: cst.BaseExpression) -> DeviceId:
        """Which device an expression names or a value is on: the engine's `DeviceId` where the
        code states it (through names, `self.<attr>` set in `__init__`, module constants,
        defaults, moves), else the expression's own text, which no other device is judged equal
        to or different from."""
        found = self.value(expr).device
        if found is not None:
            return found
        number = int_value(expr)
        if number is not None:
            return indexed("cuda", number)
        return literal_device(self.ctx, expr) or DeviceId(self.ctx.code_for(expr), False)

    @property
    def crossings(self) -> list[Crossing]:
        """Every place where values on two different stated accelerators (`cuda:0`, `cuda:1`) meet."""
        return self.placement.crossings

    @property
    def meetings(self) -> list[Meeting]:
        """Every place where a CPU tensor meets a device tensor or a module on the device. A plain
        function's own run meets "wherever my inputs are"; where every caller in the file hands it
        inputs that make that side a CPU tensor (`theta = uniform(n)` drawn on the CPU, then
        `rotate(axis, theta)` with `torch.eye(3) * torch.cos(theta)`), nothing meets there."""
        return self.ctx.shared(
            "facts.meetings", lambda c: [m for m in self.placement.meetings if not self._host_by_callers(m)]
        )

    def _host_by_callers(self, meeting: Meeting) -> bool:
        """The meeting is a module-level function's own run meeting its inputs, and the runs of
        every call of it in the file put that side on the CPU. (A method is left alone: its module
        may be moved after a caller in the file tried it on the CPU; a static method, which reads
        no instance, counts as a function.)"""
        scope = meeting.scope
        if (
            meeting.device.where != FOLLOWS
            or meeting.device_node is None
            or type(scope) is not cst.FunctionDef
            or (self.ctx.index.enclosing_class(scope) is not None and not is_staticmethod(scope))
        ):
            return False
        runs = self.placement.followed.get(id(scope), ())
        facts = [run.expr_facts.get(id(meeting.device_node), UNKNOWN_FACT) for run in runs]
        return bool(facts) and all(fact.kind == CPU for fact in facts)

    @property
    def host_module_calls(self) -> list[HostModuleCall]:
        """Every call of a module certainly on the CPU (built here, never moved, never handed
        to anything that may move it) with an input certainly on the accelerator."""
        return self.placement.host_calls

    def scope(self, node: cst.CSTNode) -> ScopePlacement:
        """The facts of one function (or of the module's top-level code)."""
        return self.placement.scopes[id(node)]

    def placed_submodules(self, cls: ClassFacts) -> dict[str, DeviceId]:
        """`self.<attr>` submodules whose device the class's `__init__` states (`self.dec =
        Dec().to("cuda:1")`), as the engine leaves them at the end of `__init__`."""
        init = cls.methods.get("__init__")
        scope = self.placement.scopes.get(id(init)) if init is not None else None
        if scope is None:
            return {}
        return {
            key[5:]: fact.device
            for key, fact in scope.facts.items()
            if key.startswith("self.") and fact.kind == MODULE and fact.device is not None
        }

    def class_model(self, name: str) -> ClassFacts | None:
        """Submodules, registered tensors and plain attributes of a module class of this file."""
        return class_facts(self.ctx).get(name)


def file_facts(ctx: FileContext) -> FileFacts:
    """The file's facts (memoised per file)."""
    return ctx.shared("facts", lambda c: FileFacts(c, file_placement(c)))


def _guessed_device(fact: Fact) -> bool:
    """A device value read from a settings name (`cfg.device`, `opts.device`) that the file
    never shows being built: what the callers hand in says more."""
    return fact.kind == DEVICE_VALUE and fact.spelled is None and fact.device is None


def _agreed(facts: Iterable[Fact]) -> Fact:
    """The one place every caller's run gives an expression (unknown if any disagrees). A run
    that only says "wherever the caller's own inputs are" (a helper's helper, followed from the
    helper's own analysis) does not disagree with runs that put the value on the accelerator:
    those are the callers further up that say where the inputs are."""
    seen = {(fact.kind, fact.where): fact for fact in facts}
    if len(seen) > 1:
        certain = [fact for (kind, where), fact in seen.items() if where != FOLLOWS]
        if len(certain) == 1 and certain[0].kind == DEVICE and certain[0].where == ACCELERATOR:
            return certain[0]
    return next(iter(seen.values())) if len(seen) == 1 else UNKNOWN_FACT
