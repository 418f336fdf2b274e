"""The exit codes of every devicelint command, as Ruff's: below `cli` and `check_command`, which
both return them."""

from __future__ import annotations

# 0: nothing found; 1: findings; 2: a usage or config error, or a path that does not exist.
# 3: devicelint itself failed (a rule raised, a worker died); CI can tell it from findings.
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3
# Ctrl-C or SIGTERM, as shells report a run ended by SIGINT.
EXIT_INTERRUPTED = 130
