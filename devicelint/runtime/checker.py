"""`check(...)`: the context manager (and decorator) that runs the runtime checks."""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar, cast

import torch
from torch import nn

from devicelint.finding import Finding
from devicelint.runtime import _sites
from devicelint.runtime.auditing import audit_items, same_device
from devicelint.runtime.backward_errors import clear as clear_held_errors
from devicelint.runtime.backward_errors import hook_patches, take
from devicelint.runtime.detector import Detector
from devicelint.runtime.function_mode import FunctionMode
from devicelint.runtime.modules import ModuleTracker
from devicelint.runtime.patching import RegionPatches
from devicelint.runtime.records import HOST_SYNC, PER_STEP_COPY, Record, merge
from devicelint.runtime.sim_backend import SimBackendModule
from devicelint.runtime.sim_cuda_names import cuda_name_patches

SyncPolicy = Literal["warn", "error", "ignore"]
SimulatePolicy = Literal["auto", "always", "never"]
F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_active: check | None = None


class DeviceConsistencyError(AssertionError):
    """Raised with every runtime finding, grouped by call site (not just the first)."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        super().__init__(format_findings(findings))


class Report:
    """What one checked region found. `findings` are `devicelint.finding.Finding` objects."""

    def __init__(self, min_syncs: int, min_copies: int) -> None:
        self._records: dict[tuple[Any, ...], Record] = {}
        self._min = {HOST_SYNC: min_syncs, PER_STEP_COPY: min_copies}
        self.simulated = False
        self.device: torch.device | None = None

    @property
    def findings(self) -> list[Finding]:
        totals: dict[tuple[Any, ...], int] = {}
        for r in self._records.values():
            key = (r.code, r.site, r.group)
            totals[key] = totals.get(key, 0) + r.count
        kept = [r for r in self._records.values() if totals[(r.code, r.site, r.group)] >= self._min.get(r.code, 1)]
        return sorted(merge(kept), key=lambda f: f.sort_key)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def format(self) -> str:
        return format_findings(self.findings)

    def __repr__(self) -> str:
        return f"<devicelint runtime report: {len(self.findings)} finding(s)>"


def format_findings(findings: list[Finding]) -> str:
    """Every finding, grouped by call site, through the static reporters when available."""
    if not findings:
        return "devicelint runtime: no findings"
    head = f"devicelint runtime: {len(findings)} finding(s)"
    try:
        from devicelint.report import ReportContext, render
    except ImportError:
        pass  # the reporters are optional for the runtime half
    else:
        body = render("text", findings, ReportContext(files_checked=0, show_source=True))
        return f"{head}\n{body}"
    lines = [head]
    for f in sorted(findings, key=lambda f: f.sort_key):
        module = f" [module `{f.module_path}`]" if f.module_path else ""
        lines.append(f"{f.path}:{f.line}:{f.column}: {f.code} {f.message}{module}")
    return "\n".join(lines)


class check:  # noqa: N801 (used as `with devicelint.runtime.check(...)` and `@check(...)`)
    """Check device consistency while the body runs.

    `model`: named and audited up front (else every root module is named and audited the
    first time it runs). `expect_device`: where tensors belong (default: `cuda`, simulated on
    a CPU-only machine when `simulate` allows). `syncs`: host syncs are warnings, errors or
    not reported; a sync inside an installed library (transformers' own `.item()`) is named at
    the user's line that led there and stays a warning unless `library_syncs=True`.
    `raise_on_exit`: raise `DeviceConsistencyError` listing every error.
    """

    def __init__(
        self,
        model: nn.Module | None = None,
        expect_device: str | torch.device | None = None,
        syncs: SyncPolicy = "warn",
        *,
        simulate: SimulatePolicy = "auto",
        raise_on_exit: bool = False,
        min_syncs: int = 2,
        min_copies: int = 2,
        library_syncs: bool = False,
    ) -> None:
        if syncs not in ("warn", "error", "ignore"):
            raise ValueError(f"syncs must be 'warn', 'error' or 'ignore', not {syncs!r}")
        if simulate not in ("auto", "always", "never"):
            raise ValueError(f"simulate must be 'auto', 'always' or 'never', not {simulate!r}")
        # Held weakly: a decorator's check lives as long as its function, and must not keep
        # the model (and its GPU memory) alive.
        self._model = weakref.ref(model) if model is not None else None
        self.expect_device = expect_device
        self.syncs = syncs
        self.simulate = simulate
        self.raise_on_exit = raise_on_exit
        self.min_syncs = min_syncs
        self.min_copies = min_copies
        self.library_syncs = library_syncs
        self.report: Report | None = None
        self._owner: threading.Thread | None = None
        self._swap_before: bool | None = None
        self._region_patches: RegionPatches | None = None
        self.tracker: ModuleTracker | None = None
        self._modes: list[Any] = []

    # -- decorator form ---------------------------------------------------------------
    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._copy():
                return fn(*args, **kwargs)

        return cast(F, wrapper)  # functools.wraps keeps fn's signature

    @property
    def model(self) -> nn.Module | None:
        return self._model() if self._model is not None else None

    def _copy(self) -> check:
        return check(
            self.model,
            self.expect_device,
            self.syncs,
            simulate=self.simulate,
            raise_on_exit=self.raise_on_exit,
            min_syncs=self.min_syncs,
            min_copies=self.min_copies,
            library_syncs=self.library_syncs,
        )

    # -- context manager ------------------------------------------------------------------
    def __enter__(self) -> Report:
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError("devicelint.runtime.check is already active; checks do not nest")
            _active = self
        try:
            return self._start()
        except BaseException:
            for mode in reversed(self._modes):
                mode.__exit__(None, None, None)
            self._modes = []
            if self.tracker is not None:
                self.tracker.stop()
            self._restore_torch()
            _active = None
            raise

    def _start(self) -> Report:
        self._owner = threading.current_thread()
        _sites.refresh_roots()
        report = self.report = Report(self.min_syncs, self.min_copies)
        simulated = self._want_simulation()
        if simulated:
            from devicelint.runtime import simulate as sim

            sim_device = sim.install()
            accelerator: torch.device | None = sim_device
            expected = self._expected(sim_device)
        else:
            expected = self._expected(None)
            accelerator = expected if expected.type != "cpu" else None
        report.simulated = simulated
        if simulated:
            # `model.to("cuda").half()` must change what the simulated tensors hold, not only
            # what they report: swap converted parameters whole (torch's way for tensor
            # subclasses), inside the region only.
            self._swap_before = torch.__future__.get_swap_module_params_on_conversion()
            torch.__future__.set_swap_module_params_on_conversion(True)
            clear_held_errors()
            self._region_patches = RegionPatches(
                [*hook_patches(), *cuda_name_patches(sim.SIM_TYPE, sim.to_sim)]
            ).__enter__()
            SimBackendModule.in_region = True
        report.device = expected
        self._expected_device = expected
        self.tracker = ModuleTracker(self._audit_root)
        self.detector = Detector(
            self.tracker,
            report._records,
            accelerator=accelerator,
            sync_severity={"warn": "warning", "error": "error", "ignore": None}[self.syncs],
            simulate=simulated,
            library_syncs=self.library_syncs,
        )
        self.tracker.start()
        function_mode = FunctionMode(self.detector, simulated) if accelerator is not None else None
        for mode in (function_mode, self.detector):
            if mode is not None:
                mode.__enter__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode.__enter__ is unannotated
                self._modes.append(mode)  # entered: exited again however the region ends
        model = self.model
        if model is not None:
            self.tracker.add_root(model)
        _watch_new_threads(True)
        return report

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        global _active
        try:
            for mode in reversed(self._modes):
                mode.__exit__(None, None, None)
            self._modes = []
            assert self.tracker is not None  # set by __enter__
            self.tracker.stop()
            _watch_new_threads(False)
            self._restore_torch()
            model = self.model
            if model is not None and id(model) not in self.tracker.audited:
                self._audit_root(model)  # never ran: audit it as it is now
        finally:
            self._restore_torch()  # also when something above failed
            _active = None
        held = take()
        if held is not None and exc_type is None:
            # A backward ran where no `backward()` call of this thread could raise it.
            raise held.with_traceback(held.__traceback__)
        report = self.report
        assert report is not None
        warnings_only = [f for f in report.findings if f.severity != "error"]
        for finding in warnings_only:
            # Shown at the user's line the finding names, not at the `check()` that ended.
            warnings.warn_explicit(
                DeviceWarning(f"{finding.code} {finding.message}"),
                DeviceWarning,
                finding.path,
                finding.line,
                module=finding.path.removesuffix(".py").replace("/", "."),
            )
        if self.raise_on_exit and exc_type is None and report.errors:
            raise DeviceConsistencyError(report.errors)

    def _restore_torch(self) -> None:
        """Undo what a simulated region changed in torch (idempotent)."""
        if self._swap_before is not None:
            torch.__future__.set_swap_module_params_on_conversion(self._swap_before)
            self._swap_before = None
        if self._region_patches is not None:
            self._region_patches.__exit__(None, None, None)
            self._region_patches = None
            SimBackendModule.in_region = False

    # -- helpers --------------------------------------------------------------------------
    def _want_simulation(self) -> bool:
        wanted = str(self.expect_device) if self.expect_device is not None else "cuda"
        if wanted.startswith("cpu"):
            return False
        if self.simulate == "never":
            return False
        if self.simulate == "always":
            return True
        return not torch.cuda.is_available()

    def _expected(self, sim_device: torch.device | None) -> torch.device:
        wanted = torch.device(self.expect_device) if self.expect_device is not None else None
        if sim_device is not None:
            if wanted is None or wanted.type == "cuda":
                return sim_device
            return wanted
        if wanted is not None:
            return wanted
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _audit_root(self, module: nn.Module, args: Any = ()) -> None:
        # Called only inside the region: __enter__ set both.
        assert self.tracker is not None and self.report is not None
        self.tracker.audited.add(id(module))
        expected = self._expected_device
        # A model that runs wholly on the CPU with CPU inputs (code that picked "cpu" because
        # `torch.cuda.is_available()` is False) is a consistent run: no device findings then.
        on_device = any(isinstance(a, torch.Tensor) and same_device(a.device, expected) for a in _flat(args)) or any(
            same_device(t.device, expected) for t in _first_tensors(module)
        )
        site = _sites.user_site(1)
        for item in audit_items(module, expected, call_site=site, device_checks=on_device):
            record = item.record
            key = (record.code, record.site, record.module_path, record.template)
            if key in self.report._records:
                continue
            self.report._records[key] = record
            self.detector.add_audit_origins(record, item.tensors)


def _flat(args: Any) -> list[torch.Tensor]:
    if isinstance(args, (list, tuple)):
        return [a for a in args if isinstance(a, torch.Tensor)]
    return [args] if isinstance(args, torch.Tensor) else []


def _first_tensors(module: nn.Module, limit: int = 64) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tensor: torch.Tensor
    for tensor in module.parameters():
        found.append(tensor)
        if len(found) >= limit:
            break
    for tensor in module.buffers():
        found.append(tensor)
        if len(found) >= 2 * limit:
            break
    return found


class DeviceWarning(UserWarning):
    """A runtime finding of warning severity (host syncs with `syncs="warn"`)."""


@contextlib.contextmanager
def watch_this_thread() -> Iterator[None]:
    """Check this thread too while the open `check()` region lasts.

    Threads started while a region is open are watched on their own; a thread that was
    already running when it opened (a pool created earlier) is not, unless its work runs
    inside this context manager.
    """
    active = _active
    modes = list(active._modes) if active is not None else []
    if active is None or not modes or threading.current_thread() is active._owner:
        yield
        return
    for mode in modes:
        mode.__enter__()
    try:
        yield
    finally:
        for mode in reversed(modes):
            mode.__exit__(None, None, None)


_bootstrap_inner = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]  # CPython's private thread entry, not in typeshed


def _watched_bootstrap(thread: threading.Thread) -> None:
    with watch_this_thread():
        _bootstrap_inner(thread)


def _watch_new_threads(on: bool) -> None:
    # Torch's dispatch modes are per thread: a thread started inside the region enters them
    # itself, so a CPU input that reaches a "cuda" model in a worker thread is still seen.
    threading.Thread._bootstrap_inner = _watched_bootstrap if on else _bootstrap_inner  # type: ignore[attr-defined]  # as above
