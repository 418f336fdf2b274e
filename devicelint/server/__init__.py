"""`devicelint server`: a language server (LSP over stdio) built on pygls.

- `positions`: devicelint's positions <-> LSP positions (UTF-16 code units by default).
- `conversions`: findings and fixes -> diagnostics and text edits.
- `settings`: each file's rules from the nearest config, as the command line reads them.
- `lint_pool`: lints in worker processes, so no file can stall or kill the server.
- `documents`: what was linted for each open document, and what it produced.
- `actions`: code actions (fixes, `# noqa`, fix all) and hovers.
- `app`: the server's state: open documents, scheduling, lints and their outcomes.
- `handlers`: the pygls handlers, wiring editor events and requests to `app`.
- `protocol`: pygls's protocol with a leak fixed.

Only this package imports pygls or lsprotocol (`positions` and `settings` need neither).
Nothing here imports LibCST: it is parsed in the worker processes alone.
"""
