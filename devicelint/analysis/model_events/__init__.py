"""What the code does to model variables and module classes, for the parallelism rules (DL2xx)
and DL107: which wrapper wraps which model, what one function does to one model variable
(built, moved, wrapped, loaded), which submodules a class places on which device.

Every device here comes from the placement engine (`facts.device_of`, the engine's
`DeviceId`); this package adds the module-level events on top, one concern per module:

- `devices`: the move/cast vocabulary of modules (`Resolver.move`, `chain_base`,
  `device_ids_first`), and scope constants for non-device values;
- `scopes`: the nodes and single bindings of one function, `statement_of`, `set_device_called`;
- `variables`: what one function does to one model variable (`history`, `usage_after`);
- `classes`: submodules an `__init__` places (`class_placements`, from the engine's facts),
  `moves_itself`, `built_on_cpu`;
- `wrappers`: `DataParallel`/DDP sites, `wrapper_at`, `wrapped_split`, `spread_by_loader`.
- `ranks`: the global rank used as a GPU index (`global_rank_indices`).
- `instance_callables`: callables a module keeps on itself over the instance (bound methods,
  partials, lambdas reading `self`), which DataParallel replicas copy still bound to the original.
"""

from __future__ import annotations

from devicelint.analysis.devices import distinct
from devicelint.analysis.model_events.classes import (
    ClassPlacement,
    built_on_cpu,
    built_where,
    class_placements,
    moves_itself,
    returned_device,
    split_of,
)
from devicelint.analysis.model_events.devices import (
    APEX_DISTRIBUTED_DATA_PARALLEL,
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    MM_DATA_PARALLEL,
    MM_DISTRIBUTED_DATA_PARALLEL,
    MM_WRAPPER_METHODS,
    TRUSTED_PREFIXES,
    Device,
    Placement,
    Resolver,
    chain_base,
    device_ids_first,
    rebinds,
    resolver_for,
    strip_self_returning,
)
from devicelint.analysis.model_events.scopes import (
    INIT_PROCESS_GROUP,
    Scope,
    module_functions,
    process_group_initialised,
    scope_facts,
    scope_of,
    set_device_called,
    set_device_calls,
    short,
    statement_of,
    string_constants,
)
from devicelint.analysis.model_events.variables import (
    History,
    Usage,
    class_history,
    history,
    usage_after,
)
from devicelint.analysis.model_events.wrappers import (
    Replication,
    WrapperSite,
    assigned_target,
    data_parallel_classes,
    imported_wrapper_sites,
    prepared_sites,
    returned_wrapper_sites,
    spans_several_gpus,
    spread_by_loader,
    wrapped_class,
    wrapped_split,
    wrapper_at,
    wrapper_chain_moves,
    wrapper_sites,
)

__all__ = [
    "APEX_DISTRIBUTED_DATA_PARALLEL",
    "ClassPlacement",
    "DATA_PARALLEL",
    "DISTRIBUTED_DATA_PARALLEL",
    "MM_DATA_PARALLEL",
    "MM_DISTRIBUTED_DATA_PARALLEL",
    "MM_WRAPPER_METHODS",
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
    "built_where",
    "chain_base",
    "Replication",
    "data_parallel_classes",
    "spans_several_gpus",
    "class_history",
    "class_placements",
    "device_ids_first",
    "distinct",
    "rebinds",
    "returned_device",
    "imported_wrapper_sites",
    "prepared_sites",
    "returned_wrapper_sites",
    "history",
    "module_functions",
    "moves_itself",
    "resolver_for",
    "scope_facts",
    "scope_of",
    "INIT_PROCESS_GROUP",
    "process_group_initialised",
    "set_device_called",
    "set_device_calls",
    "short",
    "split_of",
    "spread_by_loader",
    "statement_of",
    "string_constants",
    "strip_self_returning",
    "usage_after",
    "wrapped_class",
    "wrapped_split",
    "wrapper_at",
    "wrapper_chain_moves",
    "wrapper_sites",
]
