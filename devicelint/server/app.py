"""The language server's state and work: which documents are open, when each is linted, and
what a lint outcome becomes (diagnostics, fix-all edits, rule pages). `handlers` wires the
editor's events and requests to it.

Everything here runs on pygls's event loop; linting runs in worker processes (`lint_pool`),
so a slow file or a crashing rule never holds up other documents or requests.
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from devicelint import __version__
from devicelint.finding import FileResult, Finding
from devicelint.project.view import ProjectView
from devicelint.registry import PROJECT_URL
from devicelint.server import actions
from devicelint.server.conversions import diagnostic, replacement, versioned_edit
from devicelint.server.documents import LintOutcome, OpenDocuments, Problem, Snapshot
from devicelint.server.lint_pool import LintPool
from devicelint.server.positions import LineIndex
from devicelint.server.protocol import DevicelintProtocol
from devicelint.server.settings import FileSettings, SettingsResolver

# Changes closer together than this are a burst (a paste, a multi-cursor edit, fast typing):
# the burst is linted once, this long after its last change. A change after a quiet spell is
# linted at once, so a single keystroke pays nothing for the debounce (see
# bench/server_latency.py).
DEBOUNCE_SECONDS = 0.05


@dataclass(frozen=True)
class LintRequest:
    """What one lint reads: the target's version and the texts of its documents."""

    target: str
    target_version: int | None
    snapshots: tuple[Snapshot, ...]
    display: str
    settings: FileSettings
    # For a notebook: each cell as (cell type, text), and each cell's document URI.
    cells: tuple[tuple[str, str], ...] | None = None
    cell_uris: tuple[str, ...] = ()


class DevicelintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            name="devicelint",
            version=__version__,
            protocol_cls=DevicelintProtocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[
                    types.NotebookDocumentFilterWithCells(
                        notebook="*", cells=[types.NotebookCellLanguage(language="python")]
                    )
                ],
                save=True,
            ),
        )
        self.pool = LintPool()
        self.documents = OpenDocuments()
        self.settings = SettingsResolver(self.show_config_error)
        # Open lint targets: a Python file's URI -> "python", a notebook's URI -> "notebook".
        self.targets: dict[str, str] = {}
        self.target_versions: dict[str, int | None] = {}
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._last_change: dict[str, float] = {}
        self._pages: dict[str, str] = {}
        # Each open Python file -> the files its project view read (`devicelint.project`): when
        # one of them is edited, saved or closed, the file is linted again.
        self._reads: dict[str, set[str]] = {}

    # -- messages to the client ------------------------------------------------------------

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def log_internal_error(self, message: str) -> None:
        self.log(
            f"devicelint: internal error: {message}. This is a bug in devicelint, not a problem in "
            f"the file; the other rules' findings are shown. Please report it at {PROJECT_URL}/issues",
            types.MessageType.Error,
        )

    def show_config_error(self, message: str) -> None:
        self.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Error, message=f"devicelint: {message}")
        )
        self.log(f"devicelint: {message}", types.MessageType.Error)

    def publish(self, uri: str, version: int | None, diagnostics: list[types.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
        )

    # -- scheduling -------------------------------------------------------------------------

    def schedule(self, target: str, delay: float) -> None:
        """Lint `target` after `delay` seconds, replacing any lint of it not finished yet (its
        text is older; a queued worker job is cancelled, a running one's result dropped)."""
        pending = self._pending.pop(target, None)
        if pending is not None:
            pending.cancel()
        self._pending[target] = asyncio.ensure_future(self._lint_later(target, delay))

    def changed(self, target: str, version: int | None) -> None:
        """The buffer changed: lint it now after a quiet spell, else once the burst is over."""
        self.target_versions[target] = version
        now = asyncio.get_running_loop().time()
        in_burst = now - self._last_change.get(target, float("-inf")) < DEBOUNCE_SECONDS
        self._last_change[target] = now
        self.schedule(target, DEBOUNCE_SECONDS if in_burst else 0)
        self.relint_dependants(target)

    def relint_dependants(self, target: str) -> None:
        """Lint again the open files whose project view read `target`'s file."""
        path = _file_path(target)
        if path is None:
            return
        key = str(path.absolute())
        for other, reads in list(self._reads.items()):
            if other != target and key in reads and other in self.targets:
                self.schedule(other, DEBOUNCE_SECONDS)

    async def _lint_later(self, target: str, delay: float) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            await self.lint(target)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - a bug in the server: logged, and it keeps serving
            self.log_internal_error(f"{type(err).__name__} in the server: {err}\n{traceback.format_exc()}")
        finally:
            if self._pending.get(target) is asyncio.current_task():
                del self._pending[target]

    def relint_all(self) -> None:
        for target in list(self.targets):
            self.schedule(target, 0)

    def is_current(self, outcome: LintOutcome | None, target: str) -> TypeGuard[LintOutcome]:
        """Whether `outcome` was computed on the target's present text."""
        if outcome is None or target not in self.targets:
            return False
        if outcome.target_version != self.target_versions.get(target):
            return False
        return all(self._version_of(s.uri) == s.version for s in outcome.snapshots)

    def _version_of(self, uri: str) -> int | None:
        document = self.workspace.text_documents.get(unquote(uri))
        return document.version if document is not None else None

    # -- linting ----------------------------------------------------------------------------

    def request_for(self, target: str) -> LintRequest | None:
        kind = self.targets.get(target)
        if kind == "python":
            document = self.workspace.text_documents.get(unquote(target))
            if document is None:
                return None
            path = _file_path(target)
            settings = self.settings.for_file(path, self._fallback_folder())
            snapshot = Snapshot(target, document.version, document.source)
            return LintRequest(target, document.version, (snapshot,), str(path) if path else target, settings)
        if kind == "notebook":
            notebook = self.workspace.get_notebook_document(notebook_uri=target)
            if notebook is None:
                return None
            path = _file_path(target)
            settings = self.settings.for_file(path, self._fallback_folder())
            cells: list[tuple[str, str]] = []
            snapshots: list[Snapshot] = []
            for cell in notebook.cells:
                document = self.workspace.text_documents.get(unquote(cell.document))
                is_python = document is not None and document.language_id in (None, "python")
                if cell.kind == types.NotebookCellKind.Code and is_python:
                    cells.append(("code", document.source))
                    snapshots.append(Snapshot(cell.document, document.version, document.source))
                else:
                    cells.append(("markdown", ""))
            return LintRequest(
                target,
                notebook.version,
                tuple(snapshots),
                str(path) if path else target,
                settings,
                tuple(cells),
                tuple(cell.document for cell in notebook.cells),
            )
        return None

    async def lint(self, target: str) -> None:
        request = self.request_for(target)
        if request is None:
            return
        if request.cells is not None and not request.settings.notebooks:
            result: FileResult | str = FileResult(request.display, ())  # `notebooks = false` in the config
        elif request.cells is not None:
            result = await self.pool.lint_notebook(list(request.cells), request.display, request.settings)
        else:
            view = await self.project_view(target)
            result = await self.pool.lint_python(
                request.snapshots[0].text, request.display, request.settings, project=view
            )
        if isinstance(result, str):
            self.log_internal_error(result)
            return
        outcome = self._outcome(request, result)
        if not self.is_current(outcome, target):
            return  # the buffer changed while it was linted: the newer lint publishes
        previous = self.documents.store(target, outcome)
        for cell_uri in request.cell_uris:
            self.documents.target_of_cell[cell_uri] = target
        for message in outcome.internal_errors:
            if previous is None or message not in previous.internal_errors:
                self.log_internal_error(message)
        by_uri = outcome.diagnostics_by_uri()
        if previous is not None:  # cells deleted since: clear what was shown on them
            for old in previous.snapshots:
                by_uri.setdefault(old.uri, [])
        for uri, diagnostics in by_uri.items():
            snapshot = outcome.snapshot(uri)
            self.publish(uri, snapshot.version if snapshot else None, diagnostics)

    async def project_view(self, target: str) -> ProjectView:
        """What the file sees of its project's other modules, read with the open buffers' texts
        in place of the files on disk (built in a thread: the event loop keeps serving)."""
        from devicelint.project.view import EMPTY_VIEW

        path = _file_path(target)
        if path is None:
            return EMPTY_VIEW
        path = path.absolute()
        overlay: dict[str, bytes] = {}
        for uri, kind in self.targets.items():
            document = self.workspace.text_documents.get(unquote(uri)) if kind == "python" else None
            open_path = _file_path(uri)
            if document is not None and open_path is not None:
                overlay[str(open_path.absolute())] = document.source.encode("utf-8", errors="surrogatepass")
        anchor = self.settings.config_folder(path) or self._workspace_folder_of(path)
        try:
            view, reads = await asyncio.to_thread(_view_of, path, anchor, overlay)
        except Exception as err:  # noqa: BLE001 - the file is still linted, on its own
            self.log_internal_error(f"{type(err).__name__} while reading the project of {path}: {err}")
            return EMPTY_VIEW
        self._reads[target] = reads
        return view

    def _workspace_folder_of(self, path: Path) -> Path | None:
        folders = [p for f in self.workspace.folders.values() if (p := _file_path(f.uri)) is not None]
        inside = [f.absolute() for f in folders if f.absolute() in path.parents]
        return max(inside, key=lambda f: len(f.parts), default=None)

    def _outcome(self, request: LintRequest, result: FileResult) -> LintOutcome:
        encoding = _encoding_name(self.workspace.position_encoding)
        texts = {snapshot.uri: snapshot.text for snapshot in request.snapshots}
        indexes: dict[str, LineIndex] = {}
        problems: list[Problem] = []
        for finding in result.findings:
            uri = self._document_of(finding, request)
            if uri is None:
                continue
            if uri not in indexes:
                indexes[uri] = LineIndex(texts.get(uri, ""), encoding)
            problems.append(Problem(uri, finding, diagnostic(finding, indexes[uri])))
        return LintOutcome(
            request.target_version, request.snapshots, tuple(problems), result.internal_errors, encoding, indexes
        )

    @staticmethod
    def _document_of(finding: Finding, request: LintRequest) -> str | None:
        if request.cells is None:
            return request.target
        if finding.cell is not None and 0 < finding.cell <= len(request.cell_uris):
            return request.cell_uris[finding.cell - 1]
        # A finding about the whole notebook (it could not be read, it took too long).
        return request.snapshots[0].uri if request.snapshots else None

    def _fallback_folder(self) -> Path | None:
        for folder in self.workspace.folders.values():
            path = _file_path(folder.uri)
            if path is not None:
                return path
        root = self.workspace.root_path
        return Path(root) if root else None

    # -- opening and closing ----------------------------------------------------------------

    def open_target(self, target: str, kind: str, version: int | None) -> None:
        self.targets[target] = kind
        self.target_versions[target] = version
        self.schedule(target, 0)

    def close_target(self, target: str) -> None:
        self.relint_dependants(target)  # its text is now the file's on disk
        self._reads.pop(target, None)
        self.targets.pop(target, None)
        self.target_versions.pop(target, None)
        self._last_change.pop(target, None)
        pending = self._pending.pop(target, None)
        if pending is not None:
            pending.cancel()
        outcome = self.documents.drop(target)
        for snapshot in outcome.snapshots if outcome is not None else ():
            self.publish(snapshot.uri, None, [])

    def stop(self) -> None:
        """The client asked to shut down: no more lints, workers stopped."""
        for pending in self._pending.values():
            pending.cancel()
        self._pending.clear()
        self.pool.close()

    # -- requests ---------------------------------------------------------------------------

    async def fix_all(self, uri: str) -> types.CodeAction | None:
        """Every safe fix of the buffer as it is now, as one edit of that version."""
        if self.targets.get(uri) != "python":
            return None  # notebooks are reported, not fixed
        outcome = self.documents.outcome_for(uri)
        if self.is_current(outcome, uri) and not actions.has_safe_fix(outcome, uri):
            return None
        request = self.request_for(uri)
        if request is None:
            return None
        snapshot = request.snapshots[0]
        view = await self.project_view(uri)
        result = await self.pool.lint_python(
            snapshot.text, request.display, request.settings, fix_mode="safe", project=view
        )
        if isinstance(result, str):
            self.log_internal_error(result)
            return None
        if result.fixed_source is None:
            return None
        index = LineIndex(snapshot.text, _encoding_name(self.workspace.position_encoding))
        edit = replacement(index, result.fixed_source)
        if edit is None:
            return None
        return types.CodeAction(
            title=actions.FIX_ALL_TITLE, kind=actions.FIX_ALL_KIND, edit=versioned_edit(uri, snapshot.version, [edit])
        )

    async def rule_page(self, code_or_name: str) -> str | None:
        key = code_or_name.strip().upper()
        if key not in self._pages:
            page = await self.pool.rule_page(code_or_name)
            if page is None:
                return None
            self._pages[key] = page
        return self._pages[key]


def _view_of(path: Path, anchor: Path | None, overlay: dict[str, bytes]) -> tuple[ProjectView, set[str]]:
    from devicelint.project.index import ProjectIndex, project_root

    index = ProjectIndex(project_root(path, anchor), overlay=overlay)
    return index.view_and_reads(path)


def _file_path(uri: str) -> Path | None:
    if not uri.startswith("file:"):
        return None
    path = to_fs_path(uri)
    return Path(path) if path else None


def _encoding_name(encoding: object) -> str:
    return str(getattr(encoding, "value", encoding) or "utf-16")
