"""The dispatch mode that sees every aten op (forward, backward, optimizer) before it runs."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakIdKeyDictionary

from devicelint.runtime import _sites, backward_errors
from devicelint.runtime._sites import Site
from devicelint.runtime.modules import ModuleTracker
from devicelint.runtime.records import HOST_SYNC, MIXED_DEVICE_OP, PER_STEP_COPY, Record

aten = torch.ops.aten
_Tensor = torch.Tensor
_current_node = torch._C._current_autograd_node
_next_sequence_nr = torch._C._autograd._get_sequence_nr
_is_grad_enabled = torch.is_grad_enabled

# Ops that move data between devices on purpose.
_TRANSFERS = frozenset(
    {
        aten._to_copy.default,
        aten.copy_.default,
        aten._copy_from.default,
        aten._copy_from_and_resize.default,
        aten.lift_fresh.default,
        aten.lift_fresh_copy.default,
        aten.set_.source_Tensor,
        aten.detach.default,
        aten.alias.default,
    }
)
# Ops that take CPU integer tensors (lengths, batch sizes, split points) by design.
_CPU_INT_ARGS_OK = frozenset(
    {
        "_pack_padded_sequence",
        "_pack_padded_sequence_backward",
        "_pad_packed_sequence",
        "lstm",
        "gru",
        "rnn_tanh",
        "rnn_relu",
        "_ctc_loss",
        "_ctc_loss_backward",
        "_cudnn_ctc_loss",
        "_use_cudnn_ctc_loss",
        "ctc_loss",
        "tensor_split",
    }
)
# Indexing ops that accept a CPU index into an accelerator tensor (copying it every call).
_INDEXING = frozenset(
    {
        aten.index.Tensor,
        aten.index_put_.default,
        aten.index_put.default,
        aten._index_put_impl_.default,
        aten._unsafe_index.Tensor,
    }
)
# `torch.tensor([...])` builds its data outside the dispatcher, then lifts it: a factory.
_LIFTS = frozenset({aten.lift_fresh.default, aten.lift_fresh_copy.default})
_SYNC_OPS: dict[Any, str] = {
    aten._local_scalar_dense.default: "`.item()`, `float()`, `int()` or `bool()`",
    aten.is_nonzero.default: "`bool(tensor)` / `if tensor:`",
    aten.nonzero.default: "`nonzero` (data-dependent shape)",
    aten.masked_select.default: "boolean-mask selection (data-dependent shape)",
    aten._unique2.default: "`unique` (data-dependent shape)",
    aten.unique_dim.default: "`unique` (data-dependent shape)",
    aten.unique_consecutive.default: "`unique_consecutive` (data-dependent shape)",
    aten.equal.default: "`torch.equal`",
    aten.repeat_interleave.Tensor: "`repeat_interleave` without `output_size`",
}


# The hot path asks by `id(func)`: an op overload's own hash is a Python call.
_TRANSFER_IDS = frozenset(map(id, _TRANSFERS))
_INDEXING_IDS = frozenset(map(id, _INDEXING))
_LIFT_IDS = frozenset(map(id, _LIFTS))
_SYNC_IDS = frozenset(map(id, _SYNC_OPS))


class Origin:
    """Where a CPU tensor came from, so every op that later mixes it is one finding."""

    __slots__ = ("record", "site", "module_path", "op", "in_forward")

    def __init__(
        self,
        record: Record | None,
        site: Site | None,
        module_path: str | None,
        op: str,
        in_forward: bool,
    ) -> None:
        self.record = record  # set for audit findings: mixes of these tensors fold into them
        self.site = site
        self.module_path = module_path
        self.op = op
        self.in_forward = in_forward


class Detector(TorchDispatchMode):
    """Reports mixed-device ops, host syncs and per-step host-to-device copies."""

    def __init__(
        self,
        tracker: ModuleTracker,
        records: dict[tuple[Any, ...], Record],
        *,
        accelerator: torch.device | None,
        sync_severity: str | None,
        simulate: bool,
        library_syncs: bool = False,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode.__init__ is unannotated
        self.tracker = tracker
        self.records = records
        self.accelerator = accelerator
        self.sync_severity = sync_severity
        self.library_syncs = library_syncs
        self.simulate = simulate
        self.origins: WeakIdKeyDictionary = WeakIdKeyDictionary()
        # autograd sequence number -> (site, module path) of the forward op that made the node
        self.forward_sites: dict[int, tuple[Site | None, str | None]] = {}
        # > 0 while the function layer moves tensors it has already reported
        self.repairing = 0
        self._sim: ModuleType | None = None
        if simulate:
            from devicelint.runtime import simulate as sim

            self._sim = sim

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's handler to keep torch.compile out of it, at a few microseconds
        # per op (a fifth of the simulated device's cost); compiled regions still run under the
        # checker (tests/test_runtime.py), and this handler never needs compiling.
        return False

    # -- the hot path -------------------------------------------------------------------
    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        sim = self._sim
        if sim is None:
            return self._dispatch(func, args, kwargs or {})
        try:
            return self._dispatch(func, args, kwargs or {})
        except BaseException as exc:  # noqa: BLE001
            if not backward_errors.hold_in_backward(exc):
                raise
            return None

    def _dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:  # noqa: C901
        tensors = tensor_args(args, kwargs)
        node = _current_node()
        if node is None and _is_grad_enabled() and self.accelerator is not None:
            # Remember the forward line of the autograd node this op makes (its sequence
            # number is the one just taken), for ops its backward runs later.
            seq = _next_sequence_nr() - 1
            if seq not in self.forward_sites:
                self.forward_sites[seq] = (_sites.user_site(2), self.tracker.current)
                if len(self.forward_sites) > 500_000:
                    self._trim_forward_sites()
        sim = self._sim
        if tensors:
            first = tensors[0].device
            mixed = False
            for t in tensors:
                if t.device != first:
                    mixed = True
                    break
            op_id = id(func)
            if op_id in _TRANSFER_IDS:
                self._transfer(func, tensors, kwargs, node)
            elif mixed:
                if sim is None:
                    return self._mixed_on_device(func, tensors, args, kwargs, node)
                args, kwargs = self._mixed(func, tensors, args, kwargs, node)
            elif op_id in _SYNC_IDS or (op_id in _INDEXING_IDS and _has_mask_index(args)):
                if first.type != "cpu" and self.sync_severity is not None and _sites.sync_asked_by_user(1):
                    self._sync(func, node)
        if sim is not None:
            device = kwargs.get("device")
            if (
                device is not None
                and sim.is_sim(torch.device(device))
                and not any(isinstance(t, sim.SimTensor) for t in tensors)
            ):
                # A CPU op asked to make its result on the simulated device.
                out = sim.run_simulated(func, args, kwargs)
                return self._track_outputs(func, out, tensors, node) if self.accelerator is not None else out
            try:
                if any(type(t) is sim.SimTensor for t in tensors):
                    # What the dispatcher would do next (the simulated tensor's own handler),
                    # without the round trip through it.
                    out = sim.SimTensor.__torch_dispatch__(func, (), args, kwargs)
                else:
                    out = func(*args, **kwargs)
            except NotImplementedError as exc:
                raise sim.unsupported(func, exc) from None
        else:
            out = func(*args, **kwargs)
        if self.accelerator is not None:
            return self._track_outputs(func, out, tensors, node)
        return out

    # -- findings -----------------------------------------------------------------------
    def _where(self, node: Any) -> tuple[Site | None, str | None, bool]:
        """The user line and module of the op now running; backward ops get their forward's."""
        if node is not None:
            found = self.forward_sites.get(node._sequence_nr())
            if found is not None:
                return found[0], found[1], True
            return _sites.user_site(3), self.tracker.current, True
        return _sites.user_site(3), self.tracker.current, False

    def _record(self, key: tuple[Any, ...], make: Any) -> Record:
        record = self.records.get(key)
        if record is None:
            record = self.records[key] = make()
        return record

    def report_function_mix(self, func: Any, tensors: list[torch.Tensor], target: torch.device) -> None:
        """A torch function mixing CPU tensors that require grad with `target` tensors."""
        name = getattr(func, "__name__", str(func))
        self._mixed_findings(name, [t for t in tensors if t.device != target], target, None, hard=True)

    def _mixed_on_device(
        self, func: Any, tensors: list[torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any], node: Any
    ) -> Any:
        """A mix on a real accelerator: the device's own verdict decides, not the table.

        Kernels check their operands' devices before they start, so running the op as the
        program would is safe, and it is the only exact answer: some take CPU tensors by
        design (the philox seed and offset of attention's backward, which must stay on the
        host), some refuse what the table lets through (`ctc_loss` with CPU length tensors).
        """
        try:
            out = func(*args, **kwargs)
        except RuntimeError as exc:
            if "device" not in str(exc):
                raise
            args, kwargs = self._mixed(func, tensors, args, kwargs, node, device_raised=True)
            out = func(*args, **kwargs)
        else:
            self._mixed(func, tensors, args, kwargs, node, device_raised=False)
        if self.accelerator is not None:
            return self._track_outputs(func, out, tensors, node)
        return out

    def _mixed(
        self,
        func: Any,
        tensors: list[torch.Tensor],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        node: Any,
        device_raised: bool | None = None,
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Report a mix and say how to carry on; `device_raised` is a real device's verdict
        (None in simulation, where the table of what CUDA accepts stands in for it)."""
        target = next((t.device for t in tensors if t.device.type != "cpu"), tensors[0].device)
        minor = [t for t in tensors if t.device != target]
        hard = False
        silent_kind = None
        if func.overloadpacket.__name__ in _CPU_INT_ARGS_OK and not device_raised:
            minor = [t for t in minor if t.device.type != "cpu" or t.is_floating_point()]
            if not minor:
                return args, kwargs
        for t in minor:
            if t.device.type != "cpu":
                hard = True
            elif t.dim() == 0 and _takes_cpu_scalars(func):
                silent_kind = silent_kind or "scalar"
            elif func in _INDEXING and t is not args[0] and not t.is_floating_point():
                silent_kind = silent_kind or "index"
            else:
                hard = True
        if device_raised:
            hard = True
        elif device_raised is False and hard:
            return args, kwargs  # the device took these CPU tensors by design
        if not hard and silent_kind == "scalar" and _sites.innermost_is_library(1):
            # torch's own code passes CPU scalars to device ops on purpose (optimizer steps).
            return args, kwargs
        self._mixed_findings(_op_name(func), minor, target, node, hard, silent_kind)
        if hard:
            # Carry on as if the operand had been on the right device, so one run reports
            # every bug rather than stopping at the first (CUDA itself would raise here).
            args, kwargs = tree_map(lambda v: self._move(v, target), (args, kwargs))
        return args, kwargs

    def _mixed_findings(
        self,
        op: str,
        minor: list[torch.Tensor],
        target: torch.device,
        node: Any,
        hard: bool,
        silent_kind: str | None = None,
    ) -> None:
        backward = node is not None
        folded = False
        for t in minor:
            for origin in self.origins.get(t, ()):
                if origin.record is not None:
                    origin.record.hit(op, backward=backward)
                else:
                    self._mixed_record(
                        origin.site, origin.module_path, minor, target, silent_kind, hard, origin.op
                    ).hit(op, backward=backward)
                folded = True
        if not folded:
            site, module_path, backward = self._where(node)
            self._mixed_record(site, module_path, minor, target, silent_kind, hard, None).hit(op, backward)

    def _mixed_record(
        self,
        site: Site | None,
        module_path: str | None,
        minor: list[torch.Tensor],
        target: torch.device,
        silent_kind: str | None,
        hard: bool,
        made_by: str | None,
    ) -> Record:
        other = sorted({str(t.device) for t in minor})
        key = (MIXED_DEVICE_OP, site, module_path)

        def make() -> Record:
            where = f"a {' and '.join(other)} tensor"
            if made_by is not None:
                where = f"the {' and '.join(other)} tensor made here by `{made_by}`"
            if hard:
                tail = "CUDA raises `Expected all tensors to be on the same device`"
            elif silent_kind == "scalar":
                tail = "torch accepts a 0-dim CPU tensor silently but copies it to the device on every call"
            else:
                tail = "torch accepts a CPU index silently but copies it to the device on every call"
            return Record(
                MIXED_DEVICE_OP,
                site,
                module_path,
                "error",
                f"{{ops}} mixed {where} with tensors on {target} ({{times}}): {tail}; create it on "
                f"the input's device (`device=x.device`) or register it as a buffer",
            )

        return self._record(key, make)

    def _sync(self, func: Any, node: Any) -> None:
        site, module_path, backward = self._where(node)
        what = _SYNC_OPS.get(func, "boolean-mask indexing (data-dependent shape)")
        advice = "keep the value on the device (accumulate tensors, log every N steps) or move it out of the step"
        self._sync_record(site, module_path, what, advice).hit(_op_name(func), backward)

    def _transfer(self, func: Any, tensors: list[torch.Tensor], kwargs: dict[str, Any], node: Any) -> None:
        if self.repairing:
            return
        if func is aten._to_copy.default:
            source = tensors[0]
            device = kwargs.get("device")
            if device is None:
                return
            target = torch.device(device)
        elif func is aten.copy_.default and len(tensors) >= 2:
            source, target = tensors[1], tensors[0].device
        else:
            return
        if source.device.type == "cpu" and target.type != "cpu":
            for origin in self.origins.get(source, ()):
                if origin.record is None and origin.in_forward:
                    self._copy_record(origin, target).hit(origin.op)
        elif (
            source.device.type != "cpu"
            and target.type == "cpu"
            and self.sync_severity is not None
            and node is None  # backward copies back to CPU follow forward copies reported elsewhere
            and _sites.sync_asked_by_user(1)
        ):
            site, module_path, backward = self._where(node)
            what = "a device-to-host copy (`.cpu()`, `.tolist()`, `.numpy()`, `print`)"
            advice = "keep the value on the device or copy it out once, after the loop"
            self._sync_record(site, module_path, what, advice).hit(_op_name(func), backward)

    def _sync_record(self, site: Any, module_path: Any, what: str, advice: str) -> Record:
        """The one record of host syncs of one kind at one call site."""
        severity = self.sync_severity or "warning"
        if _sites.library_line(site) is not None and not self.library_syncs:
            # A library's own sync is not the user's to fix: reported, never failing a test.
            severity = "warning"
            advice = (
                "the sync is the library's own, reached from this line: a warning unless `check(library_syncs=True)`"
            )
        return self._record(
            (HOST_SYNC, site, module_path, what),
            lambda: Record(
                HOST_SYNC,
                site,
                module_path,
                severity,
                f"{what} waits for the device here ({{times}} in the checked region); {advice}",
                group=what,
            ),
        )

    def _copy_record(self, origin: Origin, target: torch.device) -> Record:
        key = (PER_STEP_COPY, origin.site, origin.module_path)
        return self._record(
            key,
            lambda: Record(
                PER_STEP_COPY,
                origin.site,
                origin.module_path,
                "error",
                f"a tensor made on the CPU by `{origin.op}` inside `forward` is copied to {target} "
                f"({{times}}); create it there directly (`device=x.device`) or register it once as a buffer",
            ),
        )

    # -- CPU tensor origins ---------------------------------------------------------------
    def _track_outputs(self, func: Any, out: Any, tensors: list[torch.Tensor], node: Any) -> Any:
        """Note where CPU tensors are made while an accelerator is expected."""
        cpu_out = _cpu_outputs(out)
        if not cpu_out:
            return out
        origins: tuple[Origin, ...] = ()
        if tensors and id(func) not in _LIFT_IDS:
            merged: dict[int, Origin] = {}
            for t in tensors:
                if t.device.type == "cpu":
                    for origin in self.origins.get(t, ()):
                        merged.setdefault(id(origin), origin)
            origins = tuple(merged.values())[:4]
        elif node is None:
            module_path = self.tracker.current
            made_by = "torch.tensor" if func in _LIFTS else f"torch.{func.overloadpacket.__name__}"
            origins = (Origin(None, _sites.user_site(3), module_path, made_by, module_path is not None),)
        if origins:
            for t in cpu_out:
                self.origins[t] = origins
        return out

    def add_audit_origins(self, record: Record, tensors: list[torch.Tensor]) -> None:
        origin = Origin(record, record.site, record.module_path, "", False)
        for t in tensors:
            self.origins[t] = (origin,)

    def _move(self, value: Any, target: torch.device) -> Any:
        if isinstance(value, _Tensor) and value.device != target:
            if self._sim is not None and self._sim.is_sim(target):
                return self._sim.to_sim(value)
            return value.to(target)
        return value

    def _trim_forward_sites(self) -> None:
        keep = sorted(self.forward_sites)[len(self.forward_sites) // 2 :]
        self.forward_sites = {k: self.forward_sites[k] for k in keep}


def tensor_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among an op's arguments, one level into lists and tuples."""
    found: list[torch.Tensor] = []
    for group in (args, kwargs.values()):
        for a in group:
            if isinstance(a, _Tensor):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                found.extend(b for b in a if isinstance(b, _Tensor))
    return found


def _cpu_outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, _Tensor):
        return [out] if out.device.type == "cpu" else []
    if isinstance(out, (list, tuple)):
        return [t for t in out if isinstance(t, _Tensor) and t.device.type == "cpu"]
    return []


def _has_mask_index(args: tuple[Any, ...]) -> bool:
    if len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    return any(isinstance(i, _Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


# Elementwise (TensorIterator) kernels take a 0-dim CPU operand as a scalar; others raise.
_CPU_SCALAR_OPS = frozenset({aten.masked_fill.Tensor, aten.masked_fill_.Tensor, aten.rsub.Tensor, aten.where.self})
_SCALAR_OK: dict[Any, bool] = {}


def _takes_cpu_scalars(func: Any) -> bool:
    known = _SCALAR_OK.get(func)
    if known is None:
        known = _SCALAR_OK[func] = func in _CPU_SCALAR_OPS or torch.Tag.pointwise in func.tags
    return known


_OP_NAMES: dict[Any, str] = {}


def _op_name(func: Any) -> str:
    name = _OP_NAMES.get(func)
    if name is None:
        packet = func.overloadpacket.__name__
        name = _OP_NAMES[func] = f"aten.{packet}"
    return name
