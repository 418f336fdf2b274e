"""Which submodule of a model is placed on which device, and which wrapper wraps which model.

Facts for the parallelism rules (DL2xx) and DL107, one concern per module:

- `devices`: device literals, `Resolver` (device expressions, and the one `.to`/`.cuda`/`.cpu`
  recogniser here, `Resolver.move`), `chain_base`, `device_ids_first`;
- `scopes`: the nodes and single bindings of one function, `statement_of`, `set_device_called`;
- `variables`: what one function does to one model variable (`history`, `usage_after`);
- `classes`: submodules an `__init__` places (`class_placements`), `moves_itself`, `built_on_cpu`;
- `wrappers`: `DataParallel`/DDP sites, `wrapper_at`, `wrapped_split`, `spread_by_loader`.

This package is one of the placement models that the analysis design (one interpreter, one
lattice) is meant to replace; checks import from this package, not from its modules.
"""

from __future__ import annotations

from devicelint.analysis.devices import distinct

from devicelint.analysis.module_placement.devices import (
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    Device,
    Placement,
    Resolver,
    TRUSTED_PREFIXES,
    chain_base,
    device_ids_first,
    rebinds,
    resolver_for,
    strip_self_returning,
)
from devicelint.analysis.module_placement.scopes import (
    Scope,
    module_functions,
    scope_facts,
    scope_of,
    set_device_called,
    set_device_calls,
    short,
    statement_of,
    string_constants,
)
from devicelint.analysis.module_placement.variables import (
    History,
    Usage,
    history,
    usage_after,
)
from devicelint.analysis.module_placement.classes import (
    ClassPlacement,
    built_on_cpu,
    class_placements,
    moves_itself,
    split_of,
)
from devicelint.analysis.module_placement.wrappers import (
    WrapperSite,
    assigned_target,
    spread_by_loader,
    wrapped_split,
    wrapper_at,
    wrapper_chain_moves,
    wrapper_sites,
)

__all__ = [
    "ClassPlacement",
    "DATA_PARALLEL",
    "DISTRIBUTED_DATA_PARALLEL",
    "Device",
    "History",
    "Placement",
    "Resolver",
    "Scope",
    "TRUSTED_PREFIXES",
    "Usage",
    "WrapperSite",
    "assigned_target",
    "built_on_cpu",
    "chain_base",
    "class_placements",
    "device_ids_first",
    "distinct",
    "rebinds",
    "history",
    "module_functions",
    "moves_itself",
    "resolver_for",
    "scope_facts",
    "scope_of",
    "set_device_called",
    "set_device_calls",
    "short",
    "split_of",
    "spread_by_loader",
    "statement_of",
    "string_constants",
    "strip_self_returning",
    "usage_after",
    "wrapped_split",
    "wrapper_at",
    "wrapper_chain_moves",
    "wrapper_sites",
]
