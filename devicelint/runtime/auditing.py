"""Static-at-runtime audit of a live model: where its tensors really are and what `.to()` misses."""

from __future__ import annotations

import inspect
import linecache
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from devicelint.finding import Finding
from devicelint.runtime import _sites
from devicelint.runtime._sites import Site
from devicelint.runtime.records import (
    OFF_DEVICE_PARAMETER,
    PLAIN_CONTAINER,
    UNREGISTERED_TENSOR,
    Record,
)

_MODULE_INTERNALS = frozenset(vars(nn.Module()).keys())


@dataclass
class AuditItem:
    """One audit finding and the tensors it explains (so ops using them are not reported again)."""

    record: Record
    tensors: list[torch.Tensor] = field(default_factory=list)


def same_device(actual: torch.device, expected: torch.device) -> bool:
    if actual.type != expected.type:
        return False
    if expected.index is None or actual.index is None:
        return True
    return actual.index == expected.index


def audit(model: nn.Module, device: str | torch.device) -> list[Finding]:
    """Parameters and buffers off `device`, unregistered tensor attributes, modules in plain containers.

    Needs no dispatch mode and runs nothing: it reads the model's attributes.
    """
    expected = torch.device(device)
    return sorted(
        (item.record.to_finding() for item in audit_items(model, expected, call_site=None)),
        key=lambda f: f.sort_key,
    )


def audit_items(
    model: nn.Module, expected: torch.device, call_site: Site | None, device_checks: bool = True
) -> list[AuditItem]:
    """The audit's findings. Without `device_checks` only what is wrong on any device
    (modules and parameters in plain containers) is reported."""
    items: list[AuditItem] = []
    off: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    # Aliases (`self.heads = [self.head_a, self.head_b]`) of registered objects are fine.
    registered_ids = {id(m) for m in model.modules()}
    registered_ids.update(id(t) for t in model.parameters())
    registered_ids.update(id(t) for t in model.buffers())
    # (path, module, registered): modules reached through plain containers are not registered.
    stack: list[tuple[str, nn.Module, bool]] = [("", model, True)]
    root = type(model).__name__  # module paths start at the root's class, as in every finding
    while stack:
        path, module, registered = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name, child in reversed(list(module._modules.items())):
            if child is not None:
                stack.append((_join(path, name), child, registered))
        owner = type(module)
        if registered:
            for name, tensor in _own_tensors(module):
                if not same_device(tensor.device, expected):
                    off.append((_join(path, name), tensor))
        if _is_torch_class(owner):
            continue  # torch's own modules register what they hold
        for attr, value in vars(module).items():
            if attr in _MODULE_INTERNALS:
                continue
            attr_path = _join(path, attr)
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                if device_checks and not same_device(value.device, expected):
                    record = Record(
                        UNREGISTERED_TENSOR,
                        _assignment_site(owner, attr, call_site),
                        _under(root, path),
                        "error",
                        f"`{attr_path}` is a plain tensor attribute on {value.device}: `.to()`, "
                        f"`state_dict` and DDP ignore it, so it stays off {expected}; "
                        f'use `{_owner_name(owner, attr_path)}.register_buffer("{attr}", ...)` instead',
                    )
                    record.hit()
                    items.append(AuditItem(record, [value]))
            elif isinstance(value, (list, tuple, dict)):
                item = _container_item(
                    owner, path, attr, value, expected, registered_ids, device_checks, root, call_site
                )
                if item is not None:
                    items.append(item)
                    entries = value.items() if isinstance(value, dict) else enumerate(value)
                    for key, child in entries:
                        if isinstance(child, nn.Module) and id(child) not in registered_ids:
                            stack.append((f"{attr_path}[{key}]", child, False))
    if off and device_checks:
        items.append(_off_device_item(model, root, off, expected, call_site))
    return items


def _off_device_item(
    model: nn.Module, root: str, off: list[tuple[str, torch.Tensor]], expected: torch.device, call_site: Site | None
) -> AuditItem:
    """DL604: the model's own parameters and buffers off `expected`, said as the user would fix it."""
    names = [name for name, _ in off]
    devices = " and ".join(sorted({str(t.device) for _, t in off}))
    module = _common_module(names)
    site = call_site or _class_site(type(model))
    moved = len(off) < sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    if module and moved:
        # The rest of the model is on the device: this part came in after `.to()`.
        attr = module.rsplit(".", 1)[-1].split("[", 1)[0]
        if call_site is not None:
            site = _attribute_line(call_site, attr) or site
        message = (
            f"`{root}.{module}` is on {devices} while the rest of `{root}` is on {expected}: `{module}` was "
            f"replaced after the model was moved; move the new module too (`.to(device)`), or move the "
            f"model after replacing it"
        )
    else:
        shown = ", ".join(f"`{root}.{n}`" for n in names[:3]) + (
            f" and {len(names) - 3} more" if len(names) > 3 else ""
        )
        count = "" if len(names) == 1 else f" ({len(names)} parameters and buffers)"
        message = (
            f"{shown} {'is' if len(names) == 1 else 'are'} on {devices}, expected {expected}{count}; move "
            f"`{root}` with `.to(device)` before running it"
        )
    record = Record(OFF_DEVICE_PARAMETER, site, _under(root, module), "error", message)
    record.hit()
    return AuditItem(record, [t for _, t in off])


def _container_item(
    owner: type,
    path: str,
    attr: str,
    value: list[Any] | tuple[Any, ...] | dict[Any, Any],
    expected: torch.device,
    registered_ids: set[int],
    device_checks: bool,
    root: str,
    call_site: Site | None,
) -> AuditItem | None:
    entries = [
        (k, v)
        for k, v in (value.items() if isinstance(value, dict) else enumerate(value))
        if id(v) not in registered_ids
    ]
    modules = [v for _, v in entries if isinstance(v, nn.Module)]
    params = [v for _, v in entries if isinstance(v, nn.Parameter)]
    stray = [
        v
        for _, v in entries
        if isinstance(v, torch.Tensor)
        and not isinstance(v, nn.Parameter)
        and device_checks
        and not same_device(v.device, expected)
    ]
    if not (modules or params or stray):
        return None
    kind = type(value).__name__
    attr_path = _join(path, attr)
    if modules:
        what, use = "modules", "`nn.ModuleList`" if kind != "dict" else "`nn.ModuleDict`"
    elif params:
        what, use = "parameters", "`nn.ParameterList`" if kind != "dict" else "`nn.ParameterDict`"
    else:
        what, use = f"tensors on {stray[0].device}", "registered buffers"
    record = Record(
        PLAIN_CONTAINER,
        _assignment_site(owner, attr, call_site),
        _under(root, path),
        "error",
        f"`{attr_path}` is a plain {kind} holding {what}: `.to()`, `.parameters()` and `state_dict` "
        f"do not see them (they stay off {expected}); use {use}",
    )
    record.hit()
    tensors: list[torch.Tensor] = list(params) + stray
    for module in modules:
        tensors.extend(module.parameters())
        tensors.extend(module.buffers())
    return AuditItem(record, tensors)


def _own_tensors(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    for name, param in module._parameters.items():
        if param is not None:
            yield name, param
    for name, buf in module._buffers.items():
        if buf is not None:
            yield name, buf


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _common_module(names: list[str]) -> str:
    parts = [n.split(".")[:-1] for n in names]
    prefix = parts[0]
    for other in parts[1:]:
        i = 0
        while i < min(len(prefix), len(other)) and prefix[i] == other[i]:
            i += 1
        prefix = prefix[:i]
    return ".".join(prefix)


def _is_torch_class(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "torch"


def _owner_name(owner: type, attr_path: str) -> str:
    """`self` inside a user's class; the module's path for a library class one cannot edit."""
    if _from_installed_package(owner):
        return attr_path.rsplit(".", 1)[0] if "." in attr_path else "model"
    return "self"


def _from_installed_package(cls: type) -> bool:
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    return path is not None and _sites.in_installed_package(path)


def _under(root: str, path: str) -> str:
    return f"{root}.{path}" if path else root


_SITE_CACHE: dict[tuple[type, str], Site | None] = {}


def _assignment_site(cls: type, attr: str, call_site: Site | None) -> Site | None:
    """The line that assigns `<module>.<attr> = ...`: in the class (or a user base class), else,
    for a class from an installed package, in the user's file that runs the model."""
    key = (cls, attr)
    if key not in _SITE_CACHE:
        _SITE_CACHE[key] = _find_assignment(cls, attr)
    found = _SITE_CACHE[key]
    if found is not None:
        return found
    if call_site is not None and _from_installed_package(cls):
        # Attached from outside (`model.layers[0].attn.scale = torch.ones(4)`): the library's
        # class is not where the user can fix it.
        return _attribute_line(call_site, attr) or call_site[:2]
    return _class_site(cls)


def _find_assignment(cls: type, attr: str) -> Site | None:
    pattern = re.compile(rf"\bself\.{re.escape(attr)}\s*(?::[^=\n]+)?(?:=(?!=)|\+=)")
    for klass in cls.__mro__:
        if klass is nn.Module or _is_torch_class(klass) or klass is object:
            continue
        try:
            lines, start = inspect.getsourcelines(klass)
            filename = inspect.getsourcefile(klass)
        except (OSError, TypeError):
            continue
        if filename is None:
            continue
        for offset, text in enumerate(lines):
            if pattern.search(text):
                return (filename, start + offset)
    return None


def _attribute_line(call_site: Site, attr: str) -> Site | None:
    """The nearest line above the call site, in its file, that assigns `.attr = ...` or
    `setattr(..., "attr", ...)`: where the user attached or replaced it."""
    path, line = call_site[0], call_site[1]
    pattern = re.compile(rf"\.{re.escape(attr)}\s*=(?!=)|setattr\([^,]+,\s*[\'\"]{re.escape(attr)}[\'\"]")
    lines = linecache.getlines(path)
    for number in range(min(line, len(lines)), 0, -1):
        if pattern.search(lines[number - 1]):
            return (path, number)
    return None


def _class_site(cls: type) -> Site | None:
    try:
        lines, start = inspect.getsourcelines(cls)
        filename = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        return None
    return (filename, start) if filename else None
