"""`devicelint server` for tests that look inside the server process: no debounce (each edit
is linted at once), memory traced from the start, and a command reporting the process's state."""

import gc
import sys
import tracemalloc

from devicelint.server import app, handlers


def main() -> None:
    tracemalloc.start()
    app.DEBOUNCE_SECONDS = 0
    server = handlers.build_server()

    @server.command("devicelint.test.state")
    def state(ls: app.DevicelintServer) -> dict:
        gc.collect()
        return {
            "modules": sorted(sys.modules),
            "traced_bytes": tracemalloc.get_traced_memory()[0],
            "outcomes": len(ls.documents.outcomes),
            "pending": len(ls._pending),
            "targets": len(ls.targets),
            "request_futures": len(ls.protocol._request_futures),
        }

    server.start_io()


if __name__ == "__main__":
    main()
