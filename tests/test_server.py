"""`devicelint server` end to end: a real LSP client (pytest-lsp) drives the server over stdio."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from conftest import FIXTURES, ROOT  # noqa: E402
from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, default_converter, register_lsp_features  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = [sys.executable, "-m", "devicelint", "server"]
HARNESS = [sys.executable, str(Path(__file__).with_name("server_harness.py"))]
WAIT_SECONDS = 30
DL108_BAD = FIXTURES / "DL108" / "bad_numpy_on_device.py"
NUMPY_MESSAGE = (
    "`probabilities.numpy()` converts a tensor that is on the device: it raises `TypeError: can't "
    "convert cuda:0 device type tensor to numpy`; call `.cpu()` first: `probabilities.cpu().numpy()`"
)
LOAD_MESSAGE = (
    "`torch.load(...)` has no `map_location`: a checkpoint saved on a GPU fails on a CPU-only machine or "
    'lands on the saving GPU; pass `map_location=device` (or "cpu")'
)


# -- a client that records every publishDiagnostics with its version --------------------------


async def _record_diagnostics(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published.setdefault(params.uri, []).append(params)  # type: ignore[attr-defined]


async def _record_registration(client: LanguageClient, params: types.RegistrationParams) -> None:
    client.registrations.extend(params.registrations)  # type: ignore[attr-defined]


def make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    register_lsp_features(
        client,
        {
            **DEFAULT_CLIENT_FEATURES,
            types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _record_diagnostics,
            types.CLIENT_REGISTER_CAPABILITY: _record_registration,
        },
    )
    client.published = {}  # type: ignore[attr-defined]
    client.registrations = []  # type: ignore[attr-defined]
    return client


async def diagnostics_for(client: LanguageClient, uri: str, version: int | None) -> list[types.Diagnostic]:
    """The diagnostics published for `uri` at `version` (waiting for them)."""

    async def published() -> list[types.Diagnostic]:
        while True:
            for params in client.published.get(uri, []):  # type: ignore[attr-defined]
                if params.version == version:
                    return list(params.diagnostics)
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(published(), WAIT_SECONDS)


def file_uri(path: Path) -> str:
    return path.resolve().as_uri()


async def open_file(
    client: LanguageClient, path: Path, text: str | None = None, version: int = 1
) -> list[types.Diagnostic]:
    text = path.read_text(encoding="utf-8") if text is None else text
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=file_uri(path), language_id="python", version=version, text=text)
        )
    )
    return await diagnostics_for(client, file_uri(path), version)


async def change_file(client: LanguageClient, path: Path, text: str, version: int) -> list[types.Diagnostic]:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=file_uri(path), version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    return await diagnostics_for(client, file_uri(path), version)


def close_file(client: LanguageClient, path: Path) -> None:
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=file_uri(path)))
    )


def where(diagnostic: types.Diagnostic) -> tuple[str, int, int, int, int]:
    r = diagnostic.range
    return str(diagnostic.code), r.start.line, r.start.character, r.end.line, r.end.character


def apply_lsp_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply text edits as an editor does: positions in UTF-16 code units, last edit first."""
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: types.Position) -> int:
        if position.line >= len(lines):
            return len(text)
        line, units = lines[position.line], 0
        for index, char in enumerate(line):
            if units >= position.character or char in "\r\n":
                return starts[position.line] + index
            units += 2 if ord(char) > 0xFFFF else 1
        return starts[position.line] + len(line)

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


def the_edit(action: types.CodeAction, uri: str, version: int) -> list[types.TextEdit]:
    """The action's edits, checked to be one TextDocumentEdit of `uri` at `version`."""
    assert action.edit is not None and action.edit.changes is None
    [change] = action.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit)
    assert change.text_document.uri == uri and change.text_document.version == version
    return list(change.edits)


async def code_actions(
    client: LanguageClient, path: Path, line: int, only: list[str] | None = None
) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=file_uri(path)),
            range=types.Range(types.Position(line, 0), types.Position(line + 1, 0)),  # the whole line selected
            context=types.CodeActionContext(diagnostics=[], only=only),
        )
    )
    return list(result or [])


# -- the shared server: two workspace folders with different configs ----------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("server")
    plain = root / "plain"
    plain.mkdir()
    (plain / "devicelint.toml").write_text("")  # the defaults, and no config from above the temp folder
    first = root / "first"
    first.mkdir()
    (first / "pyproject.toml").write_text('[tool.devicelint]\nignore = ["DL108"]\n')
    second = root / "second"
    (second / "scripts").mkdir(parents=True)
    (second / "devicelint.toml").write_text('select = ["DL108"]\nper-file-ignores = { "scripts/*.py" = ["DL108"] }\n')
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, client_factory=make_client))
async def client(lsp_client: LanguageClient, workspace: Path):  # type: ignore[no-untyped-def]
    folders = [types.WorkspaceFolder(uri=(workspace / name).as_uri(), name=name) for name in ("first", "second")]
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=pytest_lsp.client_capabilities("visual-studio-code"), workspace_folders=folders
        )
    )
    yield
    await lsp_client.shutdown_session()


async def test_open_reports_each_finding_with_code_range_severity_and_rule_page(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "plain" / "predict.py"
    path.write_text(DL108_BAD.read_text())
    diagnostics = await open_file(client, path)
    assert [where(d) for d in diagnostics] == [
        ("DL108", 10, 23, 10, 47),
        ("DL108", 12, 14, 12, 35),
        ("DL108", 18, 11, 18, 41),
    ]
    second = diagnostics[1]
    assert second.message == NUMPY_MESSAGE
    assert second.severity == types.DiagnosticSeverity.Error
    assert second.source == "devicelint"
    assert second.code_description.href == "https://github.com/devicelint/devicelint/blob/main/rules/DL108.md"
    close_file(client, path)


async def test_editing_the_buffer_relints_it_unsaved_and_clears_fixed_findings(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "plain" / "edited.py"
    original = DL108_BAD.read_text()
    path.write_text(original)
    assert len(await open_file(client, path)) == 3
    # Fixed in the buffer only: the file on disk keeps the bugs.
    fixed = original.replace(".numpy()", ".cpu().numpy()")
    assert await change_file(client, path, fixed, version=2) == []
    broken_again = fixed.replace("print(probabilities.cpu().numpy())", "print(probabilities.numpy())")
    assert [where(d) for d in await change_file(client, path, broken_again, version=3)] == [("DL108", 12, 14, 12, 35)]
    close_file(client, path)
    await diagnostics_for(client, file_uri(path), None)  # closing clears the file's diagnostics
    assert list(client.diagnostics[file_uri(path)]) == []


NET = """import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""
TRAIN = """from models.net import Net


def run(loader):
    model = Net()
    for x in loader:
        x = x.to("cuda")
        model(x)
"""


async def republished(client: LanguageClient, uri: str, after: int) -> list[types.Diagnostic]:
    """The diagnostics of the next publication for `uri` after its first `after` ones."""

    async def published() -> list[types.Diagnostic]:
        while True:
            sent = client.published.get(uri, [])  # type: ignore[attr-defined]
            if len(sent) > after:
                return list(sent[-1].diagnostics)
            await asyncio.sleep(0.01)

    return await asyncio.wait_for(published(), WAIT_SECONDS)


async def test_editing_an_imported_module_relints_its_open_importers(client: LanguageClient, tmp_path: Path) -> None:
    # The project index in the editor: the importer's view is read with the open buffers' texts.
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    net, train = tmp_path / "models" / "net.py", tmp_path / "train.py"
    net.write_text(NET)
    train.write_text(TRAIN)
    uri = file_uri(train)
    assert [where(d) for d in await open_file(client, train)] == [("DL117", 7, 8, 7, 16)]
    await open_file(client, net)
    sent = len(client.published[uri])  # type: ignore[attr-defined]
    # Net places nothing any more (unsaved): train.py is linted again, and is clean.
    await change_file(client, net, NET.replace("(nn.Module)", "").replace("        super().__init__()\n", ""), 2)
    assert await republished(client, uri, sent) == []
    sent = len(client.published[uri])  # type: ignore[attr-defined]
    await change_file(client, net, NET, 3)
    assert [where(d) for d in await republished(client, uri, sent)] == [("DL117", 7, 8, 7, 16)]
    close_file(client, net)
    close_file(client, train)


async def test_a_burst_of_changes_is_linted_once(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "plain" / "burst.py"
    original = DL108_BAD.read_text()
    await open_file(client, path, original)
    for version in range(2, 7):  # five changes at once, as a paste or a multi-cursor edit sends them
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=file_uri(path), version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=original + "#" * version + "\n")],
            )
        )
    assert len(await diagnostics_for(client, file_uri(path), 6)) == 3
    published = {params.version for params in client.published[file_uri(path)]}  # type: ignore[attr-defined]
    # The first change may be linted at once (it followed a quiet spell); the rest wait for the last.
    assert {3, 4, 5}.isdisjoint(published) and 6 in published
    close_file(client, path)


async def test_quick_fix_and_noqa_actions_edit_the_linted_version(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "plain" / "actions.py"
    text = DL108_BAD.read_text().replace("print(probabilities.numpy())", "print(probabilities.numpy())  # noqa: E501")
    path.write_text(text)
    await open_file(client, path, text, version=7)
    uri = file_uri(path)

    by_title = {a.title: a for a in await code_actions(client, path, 10)}
    fix = by_title["devicelint (DL108): Call `.cpu()` before `.numpy()`"]
    assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred
    assert [where(d) for d in fix.diagnostics] == [("DL108", 10, 23, 10, 47)]
    fixed = apply_lsp_edits(text, the_edit(fix, uri, 7))
    assert fixed.splitlines()[10] == "        outputs.append(logits.argmax(1).cpu().numpy())  # expect: DL108"

    noqa = by_title["Disable DL108 for this line"]
    silenced = apply_lsp_edits(text, the_edit(noqa, uri, 7))
    assert (
        silenced.splitlines()[10] == "        outputs.append(logits.argmax(1).numpy())  # expect: DL108  # noqa: DL108"
    )
    assert silenced.splitlines()[:10] == text.splitlines()[:10]

    # An existing noqa comment for another tool is extended, not doubled.
    extended = apply_lsp_edits(
        text,
        the_edit({a.title: a for a in await code_actions(client, path, 12)}["Disable DL108 for this line"], uri, 7),
    )
    assert extended.splitlines()[12] == "        print(probabilities.numpy())  # noqa: DL108, E501  # expect: DL108"
    # The silenced buffer has no finding left on that line.
    assert [d.range.start.line for d in await change_file(client, path, silenced, version=8)] == [12, 18]
    close_file(client, path)


async def test_fix_all_applies_every_safe_fix_as_one_versioned_edit(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "plain" / "fix_all.py"
    text = DL108_BAD.read_text() + 'state = torch.load("ckpt.pt")\n'  # DL501's fix is unsafe: left alone
    path.write_text(text)
    assert [d.code for d in await open_file(client, path, text, version=3)] == ["DL108", "DL108", "DL108", "DL501"]
    actions = await code_actions(client, path, 0, only=["source.fixAll"])
    assert [(a.title, a.kind) for a in actions] == [("Fix all safe devicelint problems", "source.fixAll.devicelint")]
    fixed = apply_lsp_edits(text, the_edit(actions[0], file_uri(path), 3))
    assert fixed == text.replace(".numpy()", ".cpu().numpy()")
    assert [d.code for d in await change_file(client, path, fixed, version=4)] == ["DL501"]
    assert await code_actions(client, path, 0, only=["source.fixAll"]) == []  # nothing safe left
    # The unsafe fix is offered alone, and says so.
    [unsafe] = [a for a in await code_actions(client, path, 19, only=["quickfix"]) if a.title.startswith("devicelint")]
    assert unsafe.title == 'devicelint (DL501): Add `map_location="cpu"` (unsafe)' and not unsafe.is_preferred
    close_file(client, path)


async def test_columns_are_utf16_code_units_on_non_ascii_lines(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "plain" / "unicode.py"
    text = 'import torch\nlabel = "crème brûlée 🍮"; state = torch.load("ckpt.pt")\n'
    path.write_text(text, encoding="utf-8")
    [diagnostic] = await open_file(client, path, text)
    # 34 characters precede `torch.load`; the emoji takes two UTF-16 code units.
    assert where(diagnostic) == ("DL501", 1, 35, 1, 56)
    assert diagnostic.message == LOAD_MESSAGE
    [fix] = [a for a in await code_actions(client, path, 1) if a.title.startswith("devicelint")]
    fixed = apply_lsp_edits(text, the_edit(fix, file_uri(path), 1))
    assert fixed.splitlines()[1] == 'label = "crème brûlée 🍮"; state = torch.load("ckpt.pt", map_location="cpu")'
    [noqa] = [a for a in await code_actions(client, path, 1) if a.title == "Disable DL501 for this line"]
    silenced = apply_lsp_edits(text, the_edit(noqa, file_uri(path), 1))
    assert silenced.splitlines()[1] == 'label = "crème brûlée 🍮"; state = torch.load("ckpt.pt")  # noqa: DL501'
    close_file(client, path)


async def test_syntax_error_while_typing_is_dl000_and_the_server_keeps_going(
    client: LanguageClient, workspace: Path
) -> None:
    path = workspace / "plain" / "typing.py"
    text = "import torch\n\nstate = torch.load('a.pt', map_location='cpu')\n"
    assert await open_file(client, path, text) == []
    half_typed = text + "def train(model, loader:\n"
    [error] = await change_file(client, path, half_typed, version=2)
    assert error.code == "DL000" and error.range.start.line == 3
    assert error.message.startswith("syntax error: ")
    finished = text + "def train(model, loader):\n    return torch.load('b.pt')\n"
    assert [where(d) for d in await change_file(client, path, finished, version=3)] == [("DL501", 4, 11, 4, 29)]
    close_file(client, path)


async def test_hover_and_show_rule_give_the_rule_page(client: LanguageClient, workspace: Path) -> None:
    path = workspace / "plain" / "hover.py"
    path.write_text(DL108_BAD.read_text())
    await open_file(client, path)
    page = (ROOT / "rules" / "DL108.md").read_text(encoding="utf-8")
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=file_uri(path)), position=types.Position(12, 20)
        )
    )
    assert hover.contents.kind == types.MarkupKind.Markdown and hover.contents.value == page
    assert (hover.range.start.line, hover.range.start.character) == (12, 14)
    nothing = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=file_uri(path)), position=types.Position(0, 0))
    )
    assert nothing is None
    shown = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="devicelint.showRule", arguments=["numpy-on-device-tensor"])
    )
    assert shown == page
    close_file(client, path)


async def test_each_workspace_folder_uses_its_nearest_config_and_a_config_change_relints(
    client: LanguageClient, workspace: Path
) -> None:
    text = DL108_BAD.read_text() + 'state = torch.load("ckpt.pt")\n'
    first, second, script = (
        workspace / "first" / "a.py",
        workspace / "second" / "b.py",
        workspace / "second" / "scripts" / "c.py",
    )
    for path in (first, second, script):
        path.write_text(text)
    # The server asked the client to watch config files (VS Code's capabilities allow it).
    [registration] = client.registrations  # type: ignore[attr-defined]
    assert registration.method == "workspace/didChangeWatchedFiles"
    assert [w["globPattern"] for w in registration.register_options["watchers"]] == [
        "**/pyproject.toml",
        "**/devicelint.toml",
    ]
    assert [d.code for d in await open_file(client, first, text)] == ["DL501"]  # ignore = ["DL108"]
    assert [d.code for d in await open_file(client, second, text)] == ["DL108"] * 3  # select = ["DL108"]
    assert await open_file(client, script, text) == []  # per-file-ignores
    # The first folder's config changes on disk: its open file is linted again.
    (workspace / "first" / "pyproject.toml").write_text('[tool.devicelint]\nignore = ["DL501"]\n')
    before = len(client.published[file_uri(first)])  # type: ignore[attr-defined]
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[
                types.FileEvent(uri=file_uri(workspace / "first" / "pyproject.toml"), type=types.FileChangeType.Changed)
            ]
        )
    )

    async def relinted() -> list[types.Diagnostic]:
        while len(client.published[file_uri(first)]) == before:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        return client.published[file_uri(first)][-1].diagnostics  # type: ignore[attr-defined]

    assert [d.code for d in await asyncio.wait_for(relinted(), WAIT_SECONDS)] == ["DL108"] * 3
    for path in (first, second, script):
        close_file(client, path)


async def test_notebook_cells_are_linted_together_and_reported_per_cell(
    client: LanguageClient, workspace: Path
) -> None:
    notebook_uri = (workspace / "plain" / "resume.ipynb").as_uri()
    sources = [
        "# Resume a run",
        "%matplotlib inline\nimport torch\nmodel = Net().cuda()\n",
        'state = torch.load("ckpt.pt")\nmodel.load_state_dict(state)\n',
        'out = model(x)\nif out.device == "cuda":\n    print("on gpu")\n',
    ]
    cells, documents = [], []
    for number, source in enumerate(sources):
        uri = f"vscode-notebook-cell:{notebook_uri[len('file:') :]}#cell{number}"
        markdown = number == 0
        cells.append(
            types.NotebookCell(
                kind=types.NotebookCellKind.Markup if markdown else types.NotebookCellKind.Code, document=uri
            )
        )
        documents.append(
            types.TextDocumentItem(uri=uri, language_id="markdown" if markdown else "python", version=1, text=source)
        )
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook_uri, notebook_type="jupyter-notebook", version=1, cells=cells
            ),
            cell_text_documents=documents,
        )
    )
    assert [where(d) for d in await diagnostics_for(client, cells[2].document, 1)] == [("DL501", 0, 8, 0, 29)]
    assert [where(d) for d in await diagnostics_for(client, cells[3].document, 1)] == [("DL502", 1, 3, 1, 23)]
    assert await diagnostics_for(client, cells[1].document, 1) == []
    # "Disable for this line" edits the cell's own text.
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=cells[2].document),
            range=types.Range(types.Position(0, 10), types.Position(0, 10)),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )
    [noqa] = [a for a in result if a.title == "Disable DL501 for this line"]
    assert (
        apply_lsp_edits(sources[2], the_edit(noqa, cells[2].document, 1)).splitlines()[0]
        == 'state = torch.load("ckpt.pt")  # noqa: DL501'
    )
    # Editing a cell re-lints the notebook.
    fixed = 'state = torch.load("ckpt.pt", map_location="cpu")\nmodel.load_state_dict(state)\n'
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=2),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=cells[2].document, version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
                        )
                    ]
                )
            ),
        )
    )
    assert await diagnostics_for(client, cells[2].document, 2) == []
    client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=notebook_uri),
            cell_text_documents=[types.TextDocumentIdentifier(uri=c.document) for c in cells],
        )
    )


# -- servers of their own ----------------------------------------------------------------------


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(
        server_command=SERVER,
        client_factory=make_client,
        server_env={
            **os.environ,
            "DEVICELINT_TEST_FAULTS": "1",
            "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).with_name("server_faults")), os.environ.get("PYTHONPATH", "")]
            ),
        },
    ),
)
async def faulty_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


async def test_a_crashing_rule_is_logged_and_a_slow_file_blocks_nothing(
    faulty_client: LanguageClient, tmp_path: Path
) -> None:
    client = faulty_client
    (tmp_path / "devicelint.toml").write_text("max-file-seconds = 2\n")
    crash = tmp_path / "crash.py"
    text = DL108_BAD.read_text() + 'state = torch.load("ckpt.pt")  # CRASH_DEVICELINT\n'
    # The other rules' findings are still shown; the crash goes to the client's log.
    assert [d.code for d in await open_file(client, crash, text)] == ["DL501"]
    [logged] = [m for m in client.log_messages if "internal error" in m.message]
    assert logged.type == types.MessageType.Error
    assert "DL108 crashed on" in logged.message and "RuntimeError: injected by the test" in logged.message

    slow, quick = tmp_path / "slow.py", tmp_path / "quick.py"
    slow_text = DL108_BAD.read_text() + "# SLOW_DEVICELINT\n"
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=file_uri(slow), language_id="python", version=1, text=slow_text)
        )
    )
    started = asyncio.get_running_loop().time()
    assert [d.code for d in await open_file(client, quick, 'import torch\nstate = torch.load("a.pt")\n')] == ["DL501"]
    assert asyncio.get_running_loop().time() - started < 2  # not behind the slow file
    [timed_out] = await diagnostics_for(client, file_uri(slow), 1)
    assert timed_out.code == "DL002"
    assert (
        timed_out.message == "not analysed: linting took longer than 2 s (set `max-file-seconds` to change the limit)"
    )
    # The worker that gave up was replaced: linting goes on.
    assert [
        d.code for d in await change_file(client, quick, 'import torch\nx = torch.load("b.pt")\nprint(x)\n', 2)
    ] == ["DL501"]


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=HARNESS, client_factory=make_client))
async def traced_client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


async def server_state(client: LanguageClient) -> dict[str, Any]:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command="devicelint.test.state"))


async def test_initialize_imports_neither_torch_nor_libcst(traced_client: LanguageClient) -> None:
    modules = (await server_state(traced_client))["modules"]
    assert "pygls" in modules
    assert not [m for m in modules if m.split(".")[0] in ("torch", "libcst")]


async def test_memory_stays_flat_over_hundreds_of_edits(traced_client: LanguageClient, tmp_path: Path) -> None:
    client = traced_client
    path = tmp_path / "busy.py"
    base = DL108_BAD.read_text()
    await open_file(client, path, base)

    async def edits(first: int, count: int) -> None:
        for version in range(first, first + count):
            # Each edit changes the text and the findings' messages, so nothing can be shared.
            text = base.replace("probabilities", f"probabilities_{version}")
            assert len(await change_file(client, path, text, version)) == 3

    await edits(2, 50)  # warm up: caches, the pool, pygls's own structures
    client.published.clear()  # type: ignore[attr-defined]
    before = await server_state(client)
    await edits(52, 250)
    after = await server_state(client)
    assert (after["outcomes"], after["pending"], after["targets"]) == (1, 0, 1)
    assert after["request_futures"] <= before["request_futures"]  # pygls keeps none per notification
    growth = after["traced_bytes"] - before["traced_bytes"]
    assert growth < 50_000, f"the server grew by {growth} bytes over 250 edits"
    close_file(client, path)
    await diagnostics_for(client, file_uri(path), None)
    closed = await server_state(client)
    assert (closed["outcomes"], closed["targets"]) == (0, 0)
