"""Latency of `devicelint server`: from a `didChange` to the `publishDiagnostics` for it.

Starts the server over stdio (as an editor does), opens a file, then types: each edit inserts
one character into a comment at the end of a line (a keystroke), waits for the diagnostics
of that version, then pauses before the next so that no edit is coalesced with another.
Prints the median (and the spread) over the edits, after two warm-up edits.

    python bench/server_latency.py                      # a generated ~1,000-line training script
    python bench/server_latency.py PATH [--edits 10]    # any file, e.g. transformers' largest

The largest file of the transformers wheel:
    pip download --no-deps transformers -d /tmp/tf && unzip -q -o /tmp/tf/transformers-*.whl -d /tmp/tf
    python bench/server_latency.py "$(find /tmp/tf/transformers -name '*.py' -printf '%s %p\\n' | sort -n | tail -1 | cut -d' ' -f2)"
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_script import training_script  # noqa: E402

WARM_UP_EDITS = 2
PAUSE_SECONDS = 0.3
TIMEOUT_SECONDS = 120


class Client(LanguageClient):
    def __init__(self) -> None:
        super().__init__("devicelint-latency", "1")
        self.arrived: dict[int | None, float] = {}
        self.counts: dict[int | None, int] = {}
        self.waiting: dict[int | None, asyncio.Future[None]] = {}

        @self.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(client: Client, params: types.PublishDiagnosticsParams) -> None:
            client.arrived[params.version] = time.perf_counter()
            client.counts[params.version] = len(params.diagnostics)
            future = client.waiting.pop(params.version, None)
            if future is not None and not future.done():
                future.set_result(None)

    async def diagnostics_for(self, version: int) -> float:
        if version not in self.arrived:
            future = self.waiting[version] = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(future, TIMEOUT_SECONDS)
        return self.arrived[version]


async def measure(path: Path, edits: int, server: list[str]) -> tuple[list[float], int, float]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    client = Client()
    await client.start_io(*server)
    await client.initialize_async(
        types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=path.parent.resolve().as_uri())
    )
    client.initialized(types.InitializedParams())
    uri = path.resolve().as_uri()
    began = time.perf_counter()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    first = await client.diagnostics_for(1) - began  # includes starting the lint workers
    findings = client.counts[1]
    # Keystrokes: a comment grows at the end of the file's longest-standing line, the last.
    line = max(i for i, content in enumerate(lines) if content.strip()) if lines else 0
    column = len(lines[line])
    latencies = []
    for number in range(WARM_UP_EDITS + edits):
        version = number + 2
        inserted = " #" if number == 0 else "x"
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(types.Position(line, column), types.Position(line, column)), text=inserted
                    )
                ],
            )
        )
        sent = time.perf_counter()
        column += len(inserted)
        arrived = await client.diagnostics_for(version)
        if number >= WARM_UP_EDITS:
            latencies.append(arrived - sent)
        await asyncio.sleep(PAUSE_SECONDS)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return latencies, findings, first


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "path", nargs="?", type=Path, help="file to edit (default: a generated ~1,000-line training script)"
    )
    parser.add_argument("--edits", type=int, default=10, help="measured edits (default 10)")
    args = parser.parse_args()
    server = [sys.executable, "-m", "devicelint", "server"]
    with tempfile.TemporaryDirectory() as folder:
        path = args.path
        if path is None:
            path = Path(folder) / "train.py"
            path.write_text(training_script(), encoding="utf-8")
        latencies, findings, first = asyncio.run(measure(path, args.edits, server))
        size = path.stat().st_size
        line_count = path.read_text(encoding="utf-8").count("\n")
    milliseconds = sorted(seconds * 1000 for seconds in latencies)
    print(f"{path.name}: {line_count} lines, {size / 1000:.0f} kB, {findings} findings")
    print(f"  first diagnostics after didOpen: {first * 1000:.0f} ms (starts the lint workers)")
    print(
        f"  didChange -> publishDiagnostics over {len(milliseconds)} edits: median {statistics.median(milliseconds):.0f} ms "
        f"(min {milliseconds[0]:.0f}, max {milliseconds[-1]:.0f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
