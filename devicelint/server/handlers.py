"""The pygls handlers: each editor event or request, handed to the server's state in `app`."""

from __future__ import annotations

from urllib.parse import unquote

from lsprotocol import types

from devicelint.server import actions
from devicelint.server.app import DevicelintServer
from devicelint.server.settings import is_config_file

SHOW_RULE_COMMAND = "devicelint.showRule"
PYTHON_SUFFIXES = (".py", ".pyi")
CONFIG_GLOBS = ("**/pyproject.toml", "**/devicelint.toml")
WATCH_REGISTRATION_ID = "devicelint-config-files"


def _is_python(document: types.TextDocumentItem) -> bool:
    return document.language_id == "python" or unquote(document.uri).endswith(PYTHON_SUFFIXES)


def build_server() -> DevicelintServer:
    server = DevicelintServer()

    @server.feature(types.INITIALIZED)
    async def initialized(ls: DevicelintServer, params: types.InitializedParams) -> None:
        watched = ls.client_capabilities.workspace and ls.client_capabilities.workspace.did_change_watched_files
        if not (watched and watched.dynamic_registration):
            return  # the client watches nothing for us: a config saved in the editor still counts
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(glob_pattern=glob) for glob in CONFIG_GLOBS]
        )
        try:
            await ls.client_register_capability_async(
                types.RegistrationParams(
                    registrations=[
                        types.Registration(
                            id=WATCH_REGISTRATION_ID,
                            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=options,
                        )
                    ]
                )
            )
        except Exception as err:  # noqa: BLE001 - the client refused: config changes are then seen on save only
            ls.log(f"devicelint: could not watch config files ({err}); config changes apply when saved in the editor")

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DevicelintServer, params: types.DidOpenTextDocumentParams) -> None:
        if _is_python(params.text_document):
            ls.open_target(params.text_document.uri, "python", params.text_document.version)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DevicelintServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri in ls.targets:
            ls.changed(uri, params.text_document.version)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: DevicelintServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if is_config_file(unquote(uri)):
            ls.settings.forget()
            ls.relint_all()
        elif uri in ls.targets and not ls.is_current(ls.documents.outcome_for(uri), uri):
            ls.schedule(uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DevicelintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.close_target(params.text_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: DevicelintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        notebook = params.notebook_document
        ls.open_target(notebook.uri, "notebook", notebook.version)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: DevicelintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        if uri in ls.targets:
            ls.changed(uri, params.notebook_document.version)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(ls: DevicelintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        if uri in ls.targets and not ls.is_current(ls.documents.outcomes.get(uri), uri):
            ls.schedule(uri, 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: DevicelintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.close_target(params.notebook_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files_changed(ls: DevicelintServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(is_config_file(unquote(change.uri)) for change in params.changes):
            ls.settings.forget()
            ls.relint_all()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[actions.QUICK_FIX, actions.FIX_ALL_KIND], resolve_provider=False),
    )
    async def code_action(ls: DevicelintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        only = list(params.context.only) if params.context.only is not None else None
        found: list[types.CodeAction] = []
        outcome = ls.documents.outcome_for(uri)
        if actions.wanted(only, actions.QUICK_FIX) and ls.is_current(outcome, ls.documents.target_of(uri)):
            found += actions.quick_fixes(outcome, uri, params.range, params.context.diagnostics)
        if actions.wanted(only, actions.FIX_ALL_KIND):
            fix_all = await ls.fix_all(uri)
            if fix_all is not None:
                found.append(fix_all)
        return found

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: DevicelintServer, params: types.HoverParams) -> types.Hover | None:
        uri = params.text_document.uri
        outcome = ls.documents.outcome_for(uri)
        if not ls.is_current(outcome, ls.documents.target_of(uri)):
            return None
        codes, where = actions.codes_at(outcome, uri, params.position)
        pages = [page for page in [await ls.rule_page(code) for code in codes] if page]
        if not pages:
            return None
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n---\n\n".join(pages)), range=where
        )

    @server.command(SHOW_RULE_COMMAND)
    async def show_rule(ls: DevicelintServer, code_or_name: str) -> str:
        """The reference page (markdown) of a rule named by code or name."""
        page = await ls.rule_page(code_or_name)
        if page is None:
            raise ValueError(f"unknown rule {code_or_name!r}; `devicelint rules` lists them")
        return page

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: DevicelintServer, params: None) -> None:
        ls.stop()

    return server


def run_stdio() -> None:
    """Serve one client over stdin and stdout until it sends `exit` or closes the pipe."""
    build_server().start_io()
