"""What a rule sees of one file: the tree, its index, import names and helpers."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar, cast

import libcst as cst

from devicelint.analysis.index import NodeIndex
from devicelint.analysis.names import ImportTable
from devicelint.project.view import EMPTY_VIEW, ProjectView

T = TypeVar("T")


@dataclass
class FileContext:
    path: str
    source: str
    module: cst.Module
    # The torch release the project targets (from config), or None for "latest".
    torch_version: str | None = None
    # What the file sees of the other modules of its project (empty when linted alone).
    project: ProjectView = EMPTY_VIEW
    # For a notebook's joined cells, the cell each line came from (empty for a file).
    cells: tuple[int, ...] = ()
    index: NodeIndex = field(init=False)

    def __post_init__(self) -> None:
        self.index = NodeIndex(self.module)

    @cached_property
    def imports(self) -> ImportTable:
        return ImportTable(self.index)

    def qualified_name(self, node: cst.CSTNode) -> str | None:
        return self.imports.qualified_name(node)

    def code_for(self, node: cst.CSTNode) -> str:
        """Source text of a node, for messages (`torch.zeros(...)`)."""
        return self.module.code_for_node(node)

    @cached_property
    def cache(self) -> dict[Hashable, object]:
        """Per-file memo for analyses that several rules share (keyed by analysis name)."""
        return {}

    def release(self) -> None:
        """Let go of the shared analyses once every rule has run. They point back at this
        context (a cycle), so without this the whole tree would wait for the cyclic collector,
        which then walks every node of it: 13% of the lint time on timm."""
        self.__dict__.pop("cache", None)
        self.__dict__.pop("imports", None)

    def shared(self, key: Hashable, build: Callable[[FileContext], T]) -> T:
        """Build an analysis once per file and hand the same object to every rule."""
        if key not in self.cache:
            self.cache[key] = build(self)
        return cast(T, self.cache[key])  # what `build` made for this key
