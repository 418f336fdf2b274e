"""Which module is running: global forward hooks keep a stack of module paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook


class ModuleTracker:
    """Names every module it sees run (`Net.blocks.0.attn`) and keeps the stack of running ones.

    A module met with nothing running is a root: its tree is named from there, and
    `on_root(module, args)` runs once for it (the checker audits it then). A module not in
    its parent's registered children is looked for in the parent's plain lists and dicts
    (`blocks[0]`), so even unregistered layers get a path.
    """

    def __init__(self, on_root: Callable[[nn.Module, Any], None]) -> None:
        self.on_root = on_root
        # id -> (module, path); holding the module keeps the id from being reused.
        self.paths: dict[int, tuple[nn.Module, str]] = {}
        self.stack: list[tuple[nn.Module, str]] = []
        self.audited: set[int] = set()
        self._handles: list[Any] = []

    def start(self) -> None:
        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, always_call=True),
        ]

    def stop(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.stack.clear()

    @property
    def current(self) -> str | None:
        return self.stack[-1][1] if self.stack else None

    def add_root(self, module: nn.Module) -> None:
        # Paths start at the root's class (`GPT2LMHeadModel.transformer.h.0`), as every
        # runtime finding names them.
        self._name_tree(module, type(module).__name__)

    def _pre(self, module: nn.Module, args: Any) -> None:
        known = self.paths.get(id(module))
        if known is None:
            if self.stack:
                parent = self.stack[-1][0]
                parent_path = self.paths[id(parent)][1]
                name = _child_name(parent, module) or type(module).__name__
                self._name_tree(module, f"{parent_path}.{name}" if parent_path else name)
            else:
                self.add_root(module)
            known = self.paths[id(module)]
        if not self.stack and id(module) not in self.audited:
            self.audited.add(id(module))
            self.on_root(module, args)
        self.stack.append(known)

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        stack = self.stack
        # Pop back to this module (an exception inside a child skips its post hook).
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] is module:
                del stack[i:]
                return

    def _name_tree(self, module: nn.Module, prefix: str) -> None:
        for name, sub in module.named_modules(prefix=prefix):
            self.paths.setdefault(id(sub), (sub, name))


def _child_name(parent: nn.Module, child: nn.Module) -> str | None:
    name: str
    for name, sub in parent.named_modules():
        if sub is child:
            return name
    for attr, value in vars(parent).items():
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if item is child:
                    return f"{attr}[{i}]"
        elif isinstance(value, dict):
            for key, item in value.items():
                if item is child:
                    return f"{attr}[{key!r}]"
    return None
