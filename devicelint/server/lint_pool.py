"""Lint in worker processes, never on the editor's thread or in the server's process.

The workers are the command line's (`devicelint.runner`): forked from a server that has
LibCST and the rules imported, each file in a big-stack thread with the per-file time limit,
a rule's crash turned into an internal error. A worker that gives up on a file at the time
limit, grows past the memory mark or dies exits and a fresh pool takes over; requests caught
in a broken pool are tried once more there. The server process itself never imports LibCST.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from devicelint import runner
from devicelint.finding import FileResult
from devicelint.project.view import EMPTY_VIEW, ProjectView
from devicelint.runner import Task, TaskOptions
from devicelint.server.settings import FileSettings

T = TypeVar("T")

# Two workers: a file that takes long (or hits the time limit) leaves the other free.
WORKERS = 2
# A request that broke the pool twice is not tried again.
ATTEMPTS = 2


class LintPool:
    """Worker processes started on the first lint, restarted when one breaks."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            runner._start_forkserver(context)
            self._pool = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=context,
                initializer=runner._worker_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    def _retire(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is pool:
            self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker; BrokenProcessPool after the last attempt."""
        for attempt in range(ATTEMPTS):
            pool = self._executor()
            try:
                result = await asyncio.wrap_future(pool.submit(function, *args))
            except BrokenProcessPool:
                self._retire(pool)
                if attempt + 1 == ATTEMPTS:
                    raise
                continue
            if isinstance(result, FileResult) and result.ends_worker:
                self._retire(pool)  # its worker is exiting: new requests go to a fresh pool
            return result
        raise AssertionError("unreachable")

    async def lint_python(
        self,
        text: str,
        display: str,
        settings: FileSettings,
        fix_mode: str = "none",
        project: ProjectView = EMPTY_VIEW,
    ) -> FileResult | str:
        """Lint a buffer (with what it sees of its project's other modules); a string is
        devicelint's own failure (never the file's)."""
        task = Task(
            display, display, settings.codes, len(text.encode("utf-8", errors="surrogatepass")), project=project
        )
        return await self._lint(text, task, settings, fix_mode)

    async def lint_notebook(
        self, cells: list[tuple[str, str]], display: str, settings: FileSettings
    ) -> FileResult | str:
        """Lint a notebook's cells, given as (cell type, source) in order: the code cells are
        joined as the command line joins a `.ipynb` file's, and findings name their cell."""
        document = json.dumps({"cells": [{"cell_type": kind, "source": source} for kind, source in cells]})
        data = document.encode("utf-8")
        # The runner recognises notebooks by their suffix; an unsaved notebook has none.
        path = display if display.endswith(".ipynb") else display + ".ipynb"
        return await self._lint(data, Task(path, display, settings.codes, len(data)), settings, "none")

    async def _lint(self, data: str | bytes, task: Task, settings: FileSettings, fix_mode: str) -> FileResult | str:
        options = TaskOptions(
            torch_version=settings.torch_version,
            fix_mode=fix_mode,
            max_file_seconds=settings.max_file_seconds,
            max_file_tokens=settings.max_file_tokens,
            reuse_parses=True,
        )
        try:
            return await self._call(runner.lint_data, data, task, options)
        except BrokenProcessPool:
            return f"the lint worker process died while linting {task.display} (not analysed)"

    async def rule_page(self, code_or_name: str) -> str | None:
        """A rule's reference page (markdown), read in a worker where the rules are imported."""
        from devicelint.docs import page_of

        try:
            return await self._call(page_of, code_or_name)
        except BrokenProcessPool:
            return None

    def close(self) -> None:
        if self._pool is not None:
            self._retire(self._pool)
