"""A progress bar on stderr for long runs on a terminal, never in pipes or machine output."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

# Short runs finish before a bar would help; it appears only after this many seconds.
SHOW_AFTER_SECONDS = 1.0


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and total > 1 and sys.stderr.isatty()
        self.started = time.monotonic()
        self.done = 0
        self.bar: ProgressBar[int] | None = None

    def __enter__(self) -> Progress:
        return self

    def tick(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.bar is None:
            if time.monotonic() - self.started < SHOW_AFTER_SECONDS:
                return
            self.bar = click.progressbar(length=self.total, label="Linting", file=sys.stderr, show_pos=True)
            self.bar.__enter__()
            self.bar.update(self.done)
        else:
            self.bar.update(1)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.__exit__(kind, error, trace)
