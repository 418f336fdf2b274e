"""pytest plugin: `@pytest.mark.devicelint`, `--devicelint-runtime`, the `devicelint` fixture.

Registered through the `pytest11` entry point. torch is imported only when a test asks for
the checker (marker, fixture or flag): other test runs pay nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from devicelint.finding import Finding


class _OptionError(Exception):
    pass


_STASH = pytest.StashKey[Any]()
_SYNCS = ("warn", "error", "ignore")
_SIMULATE = ("auto", "always", "never")
_MARK_OPTIONS = ("syncs", "expect_device", "simulate", "min_syncs", "min_copies", "library_syncs")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("devicelint", "devicelint runtime device checks")
    group.addoption(
        "--devicelint-runtime",
        action="store_true",
        default=False,
        help="Check device consistency in every test (as if each had @pytest.mark.devicelint).",
    )
    group.addoption(
        "--devicelint-syncs",
        choices=_SYNCS,
        default="warn",
        help="Host syncs inside checked tests: warn (default), error (fail the test) or ignore.",
    )
    group.addoption(
        "--devicelint-report",
        metavar="PATH",
        default=None,
        help="Also write every runtime finding of the session to PATH, in the static report's shapes "
        "(json, sarif or github: by --devicelint-report-format, else by the file's extension).",
    )
    group.addoption(
        "--devicelint-report-format",
        choices=("json", "sarif", "github"),
        default=None,
        help="Format of --devicelint-report (default: sarif for *.sarif, json for *.json, else github).",
    )
    group.addoption(
        "--devicelint-simulate",
        choices=_SIMULATE,
        default="auto",
        help="Simulate an accelerator on the CPU: auto (only without CUDA, default), always, never.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "devicelint(syncs=..., expect_device=..., simulate=...): run the test under the devicelint "
        "runtime checker; it fails with every device finding, grouped by call site.",
    )


def _enabled(item: pytest.Item) -> bool:
    return (
        item.config.getoption("--devicelint-runtime")
        or item.get_closest_marker("devicelint") is not None
        or "devicelint" in getattr(item, "fixturenames", ())
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # The simulated device must exist before the process's first backward pass.
    if any(_enabled(item) for item in items) and config.getoption("--devicelint-simulate") != "never":
        _install_simulation()


def _install_simulation() -> None:
    try:
        import torch
    except ImportError:
        return  # each checked test says that torch is needed

    if torch.cuda.is_available():
        return
    from devicelint.runtime import simulate

    try:
        simulate.install()
    except simulate.SimulationUnavailable:
        pass  # reported by each checked test that needs it


def _options(item: pytest.Item) -> dict[str, Any]:
    options: dict[str, Any] = {
        "syncs": item.config.getoption("--devicelint-syncs"),
        "simulate": item.config.getoption("--devicelint-simulate"),
    }
    marker = item.get_closest_marker("devicelint")
    if marker is not None:
        if marker.args:
            raise _OptionError("@pytest.mark.devicelint takes keyword arguments only")
        unknown = set(marker.kwargs) - set(_MARK_OPTIONS)
        if unknown:
            raise _OptionError(f"@pytest.mark.devicelint: unknown option(s) {sorted(unknown)}")
        options.update(marker.kwargs)
    return options


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    problem: str | None = None
    if _enabled(item):
        # Start before the fixtures are set up, so fixtures can build and move models.
        try:
            from devicelint.runtime.checker import check

            checker = check(**_options(item))
            checker.__enter__()
        except ImportError as exc:
            problem = f"devicelint: the runtime checks need torch (pip install 'devicelint[runtime]'): {exc}"
        except (_OptionError, ValueError, RuntimeError) as exc:
            problem = f"devicelint: {exc}"
        else:
            item.stash[_STASH] = checker
    try:
        result = yield
    except BaseException:
        _stop(item)
        raise
    if problem is not None:
        # Raised after pytest's own setup ran, so its teardown stays consistent.
        pytest.fail(problem, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        result = yield
    except BaseException as exc:
        checker = _stop(item)
        if checker is not None and checker.report is not None and checker.report.errors and hasattr(exc, "add_note"):
            from devicelint.runtime.checker import format_findings

            exc.add_note(format_findings(checker.report.errors))
        raise
    checker = _stop(item)
    if checker is not None and checker.report is not None:
        errors = checker.report.errors
        if errors:
            from devicelint.runtime.checker import format_findings

            # The findings are the failure: no traceback of this hook.
            pytest.fail(format_findings(errors), pytrace=False)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    _stop(item)
    return (yield)


def _stop(item: pytest.Item) -> Any:
    checker = item.stash.get(_STASH, None)
    if checker is None:
        return None
    del item.stash[_STASH]
    checker.__exit__(None, None, None)
    if checker.report is not None:
        item.config.stash.setdefault(_SESSION_FINDINGS, []).extend(checker.report.findings)
    return checker


_SESSION_FINDINGS: pytest.StashKey[list[Finding]] = pytest.StashKey()


def report_format(path: str, chosen: str | None) -> str:
    if chosen:
        return chosen
    if path.endswith((".sarif", ".sarif.json")):
        return "sarif"
    return "json" if path.endswith(".json") else "github"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the session's runtime findings for CI, so a pull request shows both halves."""
    path = session.config.getoption("--devicelint-report")
    if not path:
        return
    from devicelint.report import render

    unique = {(f.path, f.line, f.column, f.code, f.message): f for f in session.config.stash.get(_SESSION_FINDINGS, [])}
    fmt = report_format(path, session.config.getoption("--devicelint-report-format"))
    Path(path).write_text(render(fmt, list(unique.values())), encoding="utf-8")


class DeviceLintHandle:
    """What the `devicelint` fixture gives a test: the running check and its report."""

    def __init__(self, checker: Any) -> None:
        self._checker = checker

    @property
    def report(self) -> Any:
        return self._checker.report

    @property
    def findings(self) -> list[Finding]:
        findings: list[Finding] = self._checker.report.findings
        return findings

    @property
    def device(self) -> Any:
        """The device tensors belong on: `cuda`, or the simulated `vgpu:0` standing in for it."""
        return self._checker.report.device

    @property
    def simulated(self) -> bool:
        simulated: bool = self._checker.report.simulated
        return simulated

    def watch(self, model: Any) -> Any:
        """Name `model`'s modules from here and audit it when it first runs; returns `model`."""
        self._checker.tracker.add_root(model)
        return model


@pytest.fixture
def devicelint(request: pytest.FixtureRequest) -> DeviceLintHandle:
    """The running device check (requesting this fixture turns the checker on for the test)."""
    checker = request.node.stash.get(_STASH, None)
    if checker is None:
        pytest.fail("the devicelint fixture needs the devicelint checker running for this test")
    return DeviceLintHandle(checker)
