from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.attribute_aliases import aliased_values, only_handed_on
from devicelint.analysis.comprehension_sources import iterated_parameter, kept_receiver
from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.facts import file_facts
from devicelint.analysis.host_modules import HOST
from devicelint.analysis.instance_parameters import handed_references
from devicelint.analysis.model_events import data_parallel_classes
from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import (
    ITERATION_HELPERS,
    ClassFacts,
    LocalContainer,
    added_elements,
    class_facts,
    container_kind,
    handed_to_call,
    holds_no_state,
    is_parameter_call,
    library_module,
    literal_elements,
    local_containers,
    module_constructor,
    returned_container,
)
from devicelint.analysis.placement_facts import MODULE, PARAMETER_FREE_MODULES
from devicelint.analysis.training.helpers import arguments_for, handed_back
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place, torch_nn_spelling
from devicelint.rule_base import FixProposal, Rule, Violation, register

REPLACEMENT = {"list": "nn.ModuleList", "tuple": "nn.ModuleList", "dict": "nn.ModuleDict"}
PARAMETER_REPLACEMENT = {"list": "nn.ParameterList", "tuple": "nn.ParameterList", "dict": "nn.ParameterDict"}


_UNREGISTERED = "`model.to(device)` never moves them, `state_dict()` never saves them and `parameters()` skips them"


@register
class SubmodulesInPlainContainer(Rule):
    """
    ## What it does
    Flags an `nn.Module` that keeps submodules (or `nn.Parameter`s) in a plain Python list,
    tuple or dict: `self.layers = [nn.Linear(...), ...]`, a list comprehension of modules,
    `self.heads = {"a": Head(), ...}`, `.append(module)` onto such a list or `heads[key] = module`
    into such a dict, a local list filled with modules and then stored (`self.layers = layers`),
    or the list returned by a builder of the same file (`self.features = make_layers(cfg)`).
    Modules from libraries outside `torch.nn` count too: torchmetrics metrics, torchvision and
    timm layers, `timm.create_model`, torchvision models and `transformers` `from_pretrained`
    models. A plain container whose elements are plain containers of modules (a dict of
    per-stage dicts of metrics, groups of layers appended one by one:
    `self.hids.append([nn.Linear(n, n), act()])`) is reported too, without a fix.

    ## Why it is a bug on a GPU
    `nn.Module` registers only submodules assigned directly or held in `nn.ModuleList` /
    `nn.ModuleDict`. Modules in a plain container are invisible to it: `model.to(device)` leaves
    them on the CPU (`forward` fails with `Expected all tensors to be on the same device`),
    `state_dict()` does not save them, and `model.parameters()` skips them, so the optimizer
    silently never trains them.

    ## Example
    ```python
    class Encoder(nn.Module):
        def __init__(self, depth, width):
            super().__init__()
            self.layers = [nn.Linear(width, width) for _ in range(depth)]
    ```

    ## Use instead
    ```python
    class Encoder(nn.Module):
        def __init__(self, depth, width):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
    ```
    Use `nn.ParameterList` / `nn.ParameterDict` for parameters.

    ## Fix safety
    No automatic fix: `state_dict` keys change when modules become registered, so existing
    checkpoints need their keys mapped.

    ## Known limits
    Only containers whose elements are visibly modules (constructors of `torch.nn` classes, of
    the libraries above or of module classes of the same file, functions of the file that
    return one, or names bound to them) are reported; builders are followed one call deep
    within the file. A container handed to the constructor (`self.members = members`) counts
    when every `Class(...)` call of the file passes one of modules (a literal, a comprehension,
    or a list the caller filled). A class imported from elsewhere counts only when the container's elements
    are then called like layers (`for block in self.blocks: x = block(x)`). A container that is later
    handed to `nn.ModuleList(...)`, `nn.Sequential(*...)` or any other call is assumed to be
    registered there, and so is a module also registered by `add_module` or `setattr(self, ...)`
    (or whose tensors the class registers one by one on another module,
    `holder.register_parameter("weight", layer.weight)`)
    (also as `self.heads[-1]`), or also handed to another call or object that may install it
    (`set_submodule(net, path, wrapper)`), or returned by a helper method whose every call in
    the class registers the result (`trunk.add_module(name, self._wrap(name, child))`,
    `self.stem = self._make("stem")`). A container whose elements the class moves where it
    uses them (`self.feats[k].to(x.device)`) or feeds host tensors on purpose
    (`self.resamplers[i](x.to(self.device))` with `device="cpu"` by default) is not reported,
    even if the elements hold parameters that the optimizer then misses. A module registered
    by hand (`add_module`, `setattr`) is reported after all in a module class that
    `nn.DataParallel` replicates over several GPUs (wrapped, or a submodule of the wrapped model)
    when the class calls the container's elements like layers: each replica copies the
    registered submodules, but its copy of the container still holds the original modules on
    the first GPU.
    """

    code = "DL103"
    name = "submodules-in-plain-container"
    summary = "Submodules kept in a plain list or dict are not registered, moved or saved."
    message = "`self.{attr}` keeps {what} in a plain {container}: {problem}; use `{replacement}`"
    fix_availability = "unsafe"
    tokens = ("torch", "Module", "PreTrainedModel")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for facts in class_facts(ctx).values():
            handed_on = _attributes_passed_to_calls(ctx, facts)
            called = _elements_called(ctx, facts)
            plain: dict[str, str] = {}
            looped = _registered_in_loop(ctx, facts) | _managed_by_hand(ctx, facts) | _only_picked(ctx, facts)
            for attr, stored, method in facts.assignments:
                if only_handed_on(ctx, facts.node, attr):
                    continue  # `self.a = self.<attr>` is every read: reported as `self.a`
                value = through_containers(ctx, stored)  # `self.layers = parts[0]`: what was put in
                if type(value) is cst.Call:
                    # `self.layers = keep(layers)`: a helper that hands back the caller's list
                    value = through_containers(ctx, handed_back(ctx, value) or value)
                aliased = aliased_values(ctx, value)
                if len(aliased) == 1:
                    # `self.layers = self._pending`, a list another method of the class built
                    value, method = through_containers(ctx, aliased[0][0]), aliased[0][1]
                container = container_kind(ctx, value)
                if container is None and attr not in facts.submodules and attr not in looped and attr not in handed_on:
                    # `self.layers = layers` (a local list filled above) or `= make_layers(cfg)`
                    built = _built_elsewhere(ctx, facts, value, method)
                    if built is not None:
                        plain.setdefault(attr, built.kind)
                        elements = _filled_elements(ctx, built, attr in called)
                        if elements:
                            yield self._report(ctx, facts, stored, attr, built.kind, elements)
                    elif type(value) is cst.Call and (imported := _imported_container(ctx, value)):
                        # `self.stages = make_stages(cfg)` of a builder in another module
                        plain.setdefault(attr, imported)
                        yield self._report(ctx, facts, stored, attr, imported, ["module"])
                    elif (handed := _handed_in(ctx, facts, value, method, attr in called)) is not None:
                        # `self.members = members`, and every `Ensemble([...])` of the file passes modules
                        plain.setdefault(attr, handed[0])
                        yield self._report(ctx, facts, stored, attr, handed[0], handed[1])
                if container is not None and attr in looped and attr in called and attr not in facts.submodules:
                    yield from self._replicated_by_hand(ctx, facts, value, attr, container, _elements(ctx, value, True))
                if container is None or attr in facts.submodules or attr in looped:
                    continue
                plain.setdefault(attr, container)
                elements = _elements(ctx, value, attr in called)
                if attr in handed_on or not elements:
                    continue
                yield self._report(ctx, facts, value, attr, container, elements)  # where the plain container is built
            # the plain containers of the class that are neither handed on, registered nor looped over
            followed = {a for a in plain if a not in handed_on and a not in facts.submodules and a not in looped}

            for attr, node, _ in facts.references:
                added = added_elements(ctx, node)
                if added is None or attr not in followed:
                    continue
                site, values, _ = added
                # `self.hids.append([nn.Linear(n, n), nn.ReLU()])`: a group of layers is no more
                # registered than one layer is (and needs its own ModuleList: no fix)
                elements = [k for v in values if (k := _group_kind(ctx, v, attr in called)) and k != "stateless"]
                if elements and len(values) == 1 and _group_registered_by_hand(ctx, site, values[0], attr in called):
                    if attr in called:
                        yield from self._replicated_by_hand(ctx, facts, site, attr, plain[attr], elements)
                    continue
                if elements:
                    groups = any(container_kind(ctx, v) is not None for v in values)
                    yield self._report(ctx, facts, site, attr, plain[attr], elements, fixable=not groups)
            for attr, node, helper in handed_references(ctx, facts.node):
                # `_keep(self, block)` running `model.blocks.append(block)`: filled through the
                # handed instance, with what every call hands the helper
                added = added_elements(ctx, node)
                if added is None or attr not in followed:
                    continue
                kinds = [_kind_in_callers(ctx, helper, v, attr in called) for v in added[1]]
                elements = [k for k in kinds if k and k != "stateless"]
                if elements:
                    yield self._report(ctx, facts, added[0], attr, plain[attr], elements)

    def _report(
        self,
        ctx: FileContext,
        facts: ClassFacts,
        node: cst.CSTNode,
        attr: str,
        container: str,
        elements: list[str],
        problem: str = _UNREGISTERED,
        fixable: bool = True,
    ) -> Violation:
        parameters = all(kind == "parameter" for kind in elements)
        replacement = (PARAMETER_REPLACEMENT if parameters else REPLACEMENT)[container]
        return self.violation(
            node,
            fix=_registering_fix(ctx, facts, attr, replacement) if fixable else None,
            attr=attr,
            container=container,
            what="parameters" if parameters else "submodules",
            replacement=replacement,
            problem=problem,
        )

    def _replicated_by_hand(
        self,
        ctx: FileContext,
        facts: ClassFacts,
        node: cst.CSTNode,
        attr: str,
        container: str,
        elements: list[str],
    ) -> Iterator[Violation]:
        """A plain container whose modules the class also registers by hand (`add_module`,
        `setattr`), called like layers, in a module class that `nn.DataParallel` replicates over
        several GPUs: each replica copies the registered submodules, but its copy of the
        container still holds the original modules on the first GPU."""
        replicated = data_parallel_classes(ctx).get(facts.node.name.value)
        if replicated is None or not replicated.several_gpus:
            return
        if not elements or any(kind == "parameter" for kind in elements):
            return
        owner = f" (a submodule of `{replicated.whole}`)" if replicated.whole is not None else ""
        problem = (
            f"`{replicated.spelled}`{replicated.where} wraps this module{owner}, and its replicas copy the registered submodules "
            f"but not the {container}, whose every copy still calls the original modules on the first GPU "
            "(Expected all tensors to be on the same device)"
        )
        yield self._report(ctx, facts, node, attr, container, elements, problem)


def _element_kind(ctx: FileContext, node: cst.BaseExpression, called: bool = False) -> str | None:
    """ "parameter", "module" (one holding state), "stateless" (a module without parameters or
    buffers: nothing to move or save) or None (not a module). With `called` (the class calls the
    container's elements like layers), an imported class of the project counts as a module."""
    if type(node) is cst.Call and (back := handed_back(ctx, node)) is not None:
        return _element_kind(ctx, back, called)  # `taps[k] = keep(block)`: the caller's `block`
    if is_parameter_call(ctx, node):
        return "parameter"
    constructed = module_constructor(ctx, node) or library_module(ctx, node)
    if constructed is not None:
        return "stateless" if _stateless(constructed, node) or holds_no_state(ctx, constructed) else "module"
    if called and _imported_class(ctx, node):
        return "module"
    if _module_factory(ctx, node):
        return "module"
    if type(node) is cst.Name:
        fact = file_facts(ctx).value(node)
        if fact.kind == MODULE and fact.factory is not None and fact.where in (None, HOST):  # built here, not moved
            return "stateless" if fact.factory in PARAMETER_FREE_MODULES else "module"
        if (iterated := iterated_parameter(ctx, node)) is not None:
            # `[h.to(device) for h in heads]` in `__init__`: what every construction hands in as `heads`
            init, param = iterated
            owner = ctx.index.enclosing_class(init)
            facts = class_facts(ctx).get(owner.name.value) if owner is not None else None
            handed = _handed_in(ctx, facts, param, init, called) if facts is not None else None
            return handed[1][0] if handed is not None else None
    if (receiver := kept_receiver(node)) is not None:
        return _element_kind(ctx, receiver, called)  # `head.to(device)`: the module itself
    return None


def _kind_in_callers(ctx: FileContext, helper: cst.FunctionDef, node: cst.BaseExpression, called: bool) -> str | None:
    """`_element_kind` of what a helper handed the instance adds: for one of the helper's
    parameters, the kind every call's argument agrees on (`helpers.arguments_for`)."""
    params = (*helper.params.posonly_params, *helper.params.params)
    if type(node) is cst.Name and any(p.name.value == node.value for p in params):
        passed = arguments_for(ctx, helper, node.value)
        kinds = {_element_kind(ctx, a, called) for a in passed or ()}
        return kinds.pop() if len(kinds) == 1 else None
    return _element_kind(ctx, node, called)


def _built_elsewhere(
    ctx: FileContext, facts: ClassFacts, value: cst.BaseExpression, method: cst.FunctionDef
) -> LocalContainer | None:
    """The plain container behind `self.x = layers` (a local the method filled and handed to
    nothing else) or `self.x = make_layers(cfg)` (a same-file builder returning one)."""
    if type(value) is cst.Name:
        box = local_containers(ctx, method).get(value.value)
        if box is not None:
            return None if box.handed_on else box
        # `layers = make_layers(cfg)` then `self.layers = layers`
        sources = [
            a.value
            for a in ctx.index.walk(method.body)
            if type(a) is cst.Assign
            and any(type(t.target) is cst.Name and t.target.value == value.value for t in a.targets)
        ]
        if len(sources) != 1 or _handed_on_locally(ctx, method, value.value):
            return None
        value = sources[0]
    return returned_container(ctx, value, facts)


def _handed_in(
    ctx: FileContext, facts: ClassFacts, value: cst.BaseExpression, method: cst.FunctionDef, called: bool
) -> tuple[str, list[str]] | None:
    """(container kind, element kinds) for `self.x = param` in `__init__`, when every
    construction of the class in the file passes a plain container of modules for `param`: a
    literal or comprehension, or a local list the caller filled (`Ensemble(heads)`)."""
    if type(value) is not cst.Name or method.name.value != "__init__":
        return None
    if _registered_in_init(ctx, method, value.value):
        return None  # `self.blocks = nn.ModuleList(layers)` too: the modules are registered there
    passed = _constructor_arguments(ctx, facts.node, method, value.value)
    kinds: set[str] = set()
    elements: list[str] = []
    for arg in passed or ():
        kind = container_kind(ctx, arg)
        if kind is not None:
            found = _elements(ctx, arg, called)
        else:
            caller = ctx.index.enclosing_function(arg)
            box = local_containers(ctx, caller).get(arg.value) if caller and type(arg) is cst.Name else None
            if box is None:
                return None
            kind, found = box.kind, _filled_elements(ctx, box, called)
        if not found:
            return None
        kinds.add(kind)
        elements += found
    return (kinds.pop(), elements) if len(kinds) == 1 and elements else None


_REGISTERING_CALLS = frozenset(
    {"ModuleList", "ModuleDict", "Sequential", "ParameterList", "ParameterDict", "add_module", "register_module"}
)


def _registered_in_init(ctx: FileContext, init: cst.FunctionDef, name: str) -> bool:
    """`__init__` also hands `name` (or its elements) to a registering call:
    `nn.ModuleList(layers)`, `nn.Sequential(*layers)`, `self.add_module(k, layers[k])`."""
    for call in (n for n in ctx.index.walk(init.body) if type(n) is cst.Call):
        callee = (dotted_name(call.func) or "").rsplit(".", 1)[-1]
        if callee not in _REGISTERING_CALLS and callee != "setattr":
            continue
        if any(type(n) is cst.Name and n.value == name for a in call.args for n in ctx.index.walk(a.value)):
            return True
    return False


def _constructor_arguments(
    ctx: FileContext, cls: cst.ClassDef, init: cst.FunctionDef, name: str
) -> list[cst.BaseExpression] | None:
    """What every `Class(...)` call of the file passes for `__init__`'s parameter `name`; None
    when there is none, or one spreads `*args`/`**kwargs` or leaves the default."""
    params = [p.name.value for p in (*init.params.posonly_params, *init.params.params)][1:]
    found: list[cst.BaseExpression] = []
    for call in ctx.index.of_type(cst.Call):
        if dotted_name(call.func) != cls.name.value:
            continue
        if any(a.star for a in call.args):
            return None
        positional = [a.value for a in call.args if a.keyword is None]
        bound = dict(zip(params, positional))
        bound.update({a.keyword.value: a.value for a in call.args if a.keyword is not None})
        if name not in bound:
            return None
        found.append(bound[name])
    return found or None


def _imported_container(ctx: FileContext, call: cst.Call) -> str:
    """ "list" or "dict" for a call of a function of another project module that returns a plain
    list of layers or a plain dict of layers or metrics, else ""."""
    spelled = dotted_name(call.func)
    place = ctx.project.functions.get(spelled) if spelled is not None else None
    return {"module-list": "list", "module-dict": "dict"}.get(place or "", "")


def _handed_on_locally(ctx: FileContext, method: cst.FunctionDef, name: str) -> bool:
    return any(type(n) is cst.Name and n.value == name and handed_to_call(ctx, n) for n in ctx.index.walk(method.body))


def _filled_elements(ctx: FileContext, box: LocalContainer, called: bool) -> list[str]:
    """The stateful module/parameter kinds put into a local container (literals must be all modules)."""
    found: list[str] = []
    for fill in box.fills:
        if fill.literal:
            found.extend(_elements(ctx, fill.node, called) if fill.elements else [])
            continue
        for value in fill.elements:
            kind = _element_kind(ctx, value, called)
            if (
                kind
                and kind != "stateless"
                and not (type(fill.node) is cst.Call and _registered_by_hand(ctx, fill.node, value))
            ):
                found.append(kind)
    return found


# Imported classes that are never modules, by qualified-name prefix.
NON_MODULE_LIBRARIES = (
    "torch.",
    "torchvision.transforms",
    "torchvision.datasets",
    "numpy.",
    "collections.",
    "dataclasses.",
    "typing.",
    "functools.",
    "itertools.",
    "pathlib.",
    "random.",
    "math.",
    "albumentations.",
    "PIL.",
    "transformers.",
    "datasets.",
    "tokenizers.",
    "threading.",
    "queue.",
    "multiprocessing.",
    "logging.",
    "argparse.",
    "enum.",
    "decimal.",
    "fractions.",
)


def _module_factory(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`conv_bn(c_in, c_out)` where the same file's `conv_bn` returns `nn.Sequential(...)`."""
    if not (type(node) is cst.Call and type(node.func) is cst.Name):
        return False
    function = next(
        (s for s in ctx.module.body if type(s) is cst.FunctionDef and s.name.value == node.func.value), None
    )
    if function is None:
        return False
    returns = [r.value for r in ctx.index.returns_of(function)]
    return bool(returns) and all(
        r is not None
        and (module_constructor(ctx, r) or library_module(ctx, r))
        and not _stateless(module_constructor(ctx, r) or "", r)
        for r in returns
    )


def _imported_class(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`ResBlock(...)` with `ResBlock` imported from the project (or a library not known to hold
    other things than modules)."""
    if type(node) is not cst.Call:
        return False
    qualified = ctx.qualified_name(node.func)
    if qualified is None or qualified.startswith(NON_MODULE_LIBRARIES):
        return False
    last = qualified.rsplit(".", 1)[-1]
    return last[:1].isupper() and not last.isupper()


def _only_picked(ctx: FileContext, facts: ClassFacts) -> set[str]:
    """Attributes that only offer submodules to choose from while the model is built: every read
    takes one element (`self.choices[arch]`) into a `self.` attribute, which registers it,
    directly in `__init__` or as what a method called only from `__init__` returns
    (`self.net = self._pick(arch)`). The chosen module is moved and saved; the others are unused."""
    by_attr: dict[str, list[tuple[cst.Attribute, cst.FunctionDef]]] = {}
    for attr, node, method in facts.references:
        if type(ctx.index.parent(node)) is not cst.AssignTarget:  # (its stores are what is offered)
            by_attr.setdefault(attr, []).append((node, method))
    return {attr for attr, reads in by_attr.items() if all(_picked_into_attribute(ctx, facts, n, m) for n, m in reads)}


def _picked_into_attribute(ctx: FileContext, facts: ClassFacts, node: cst.Attribute, method: cst.FunctionDef) -> bool:
    pick = ctx.index.parent(node)
    if type(pick) is not cst.Subscript or pick.value is not node:
        return False
    holder = ctx.index.parent(pick)
    if method.name.value == "__init__":
        return type(holder) is cst.Assign and _stores_on_self(holder)
    if type(holder) is cst.Assign and len(holder.targets) == 1 and type(holder.targets[0].target) is cst.Name:
        local = holder.targets[0].target.value  # `model = self.choices[name]` ... `return model`
        returned = [r.value for r in ctx.index.walk(method) if type(r) is cst.Return and r.value is not None]
        if not returned or not all(type(v) is cst.Name and v.value == local for v in returned):
            return False
    elif type(holder) is not cst.Return:
        return False
    calls = _self_calls(ctx, facts.node, method.name.value)
    return bool(calls) and all(
        (function := ctx.index.enclosing_function(c)) is not None
        and function.name.value == "__init__"
        and type(assign := ctx.index.parent(c)) is cst.Assign
        and _stores_on_self(assign)
        for c in calls
    )


def _stores_on_self(assign: cst.Assign) -> bool:
    return all(
        type(t.target) is cst.Attribute and type(t.target.value) is cst.Name and t.target.value.value == "self"
        for t in assign.targets
    )


def _elements_called(ctx: FileContext, facts: ClassFacts) -> set[str]:
    """Attributes whose elements a method other than `__init__` calls like layers:
    `self.blocks[i](x)`, `for block in self.blocks: x = block(x)`, `for k, f in self.heads.items(): f(x)`."""
    found: set[str] = set()
    for attr, node, method in facts.references:
        if method.name.value == "__init__":
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Subscript and parent.value is node:
            call = ctx.index.parent(parent)
            if type(call) is cst.Call and call.func is parent:
                found.add(attr)
            continue
        iterated: cst.CSTNode | None = node
        path: list[int] = []  # where the element sits in the loop target: [] whole, [1] second of a pair
        if type(parent) is cst.Attribute and parent.attr.value in ("values", "items"):
            path = [1] if parent.attr.value == "items" else []
            iterated = ctx.index.parent(parent)  # the `.items()` call
            parent = ctx.index.parent(iterated) if iterated is not None else None
        if type(parent) is cst.Arg and iterated is not None:
            call = ctx.index.parent(parent)
            if not (type(call) is cst.Call and type(call.func) is cst.Name and call.func.value in ("zip", "enumerate")):
                continue
            position = 1 if call.func.value == "enumerate" else next(i for i, a in enumerate(call.args) if a is parent)
            path = [position] + path
            iterated, parent = call, ctx.index.parent(call)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is iterated:
            target: cst.BaseExpression | None = parent.target
            for position in path:
                elements = target.elements if isinstance(target, (cst.Tuple, cst.List)) else ()
                target = elements[position].value if position < len(elements) else None
            if type(target) is not cst.Name:
                continue
            scope = parent.body if type(parent) is cst.For else ctx.index.parent(parent)
            if scope is not None and any(
                type(n) is cst.Call and type(n.func) is cst.Name and n.func.value == target.value
                for n in ctx.index.walk(scope)
            ):
                found.add(attr)
    return found


def _stateless(name: str, call: cst.BaseExpression) -> bool:
    if name in PARAMETER_FREE_MODULES:
        return True
    args = call.args if type(call) is cst.Call else ()
    if name in ("Sequential", "ModuleList", "ModuleDict") and not args:
        return True
    # A loss without a class weight has no state.
    return name.endswith("Loss") and not any(
        a.keyword is not None and a.keyword.value in ("weight", "pos_weight") for a in args
    )


def _elements(ctx: FileContext, value: cst.CSTNode, called: bool = False) -> list[str]:
    """The kinds of the module/parameter elements of a container literal (empty if any is not one)."""
    items = literal_elements(value)
    kinds = [_nested_kind(ctx, item, called, 0) for item in items]
    if not kinds or not all(kinds) or all(k == "stateless" for k in kinds):
        return []
    return [k for k in kinds if k is not None and k != "stateless"]


def _nested_kind(ctx: FileContext, item: cst.BaseExpression, called: bool, depth: int) -> str | None:
    """`_element_kind`, where an element that is itself a plain container written out (a dict of
    metrics per stage: `{stage: {"acc": Accuracy(), ...} for stage in stages}`) counts as the
    modules it holds: nothing registers them either."""
    if depth < 2 and container_kind(ctx, item) is not None:
        inner = [_nested_kind(ctx, element, called, depth + 1) for element in literal_elements(item)]
        if not inner or not all(inner):
            return None
        return next((k for k in inner if k != "stateless"), "stateless")
    return _element_kind(ctx, item, called)


def _group_kind(ctx: FileContext, value: cst.BaseExpression, called: bool) -> str | None:
    """`_element_kind` of a value added to a container, where a group written out (`[nn.Linear(n,
    n), act()]`) is a module if any of its members is one, whatever the others are."""
    if container_kind(ctx, value) is None:
        return _element_kind(ctx, value, called)
    kinds = {_nested_kind(ctx, member, called, 1) for member in literal_elements(value)}
    return next((k for k in ("module", "parameter", "stateless") if k in kinds), None)


def _group_registered_by_hand(ctx: FileContext, call: cst.CSTNode, value: cst.BaseExpression, called: bool) -> bool:
    """`_registered_by_hand` of a value added to a container, or of every module in a group
    added (`self.add_module(name, stage)` before `self.stages.append((stage, name))`)."""
    if container_kind(ctx, value) is None:
        return _registered_by_hand(ctx, call, value)
    members = [m for m in literal_elements(value) if _element_kind(ctx, m, called) not in (None, "stateless")]
    return bool(members) and all(_registered_by_hand(ctx, call, m) for m in members)


def _registered_in_loop(ctx: FileContext, facts: ClassFacts) -> set[str]:
    """Attributes registered one by one: `for i, m in enumerate(self.layers): self.add_module(str(i), m)`,
    or whose elements' tensors are (`for m in self.kernels: holder.register_parameter("w", m.weight)`)."""
    found: set[str] = set()
    for attr, node, _ in facts.references:
        parent = ctx.index.parent(node)
        if type(parent) is cst.Arg:
            parent = ctx.index.parent(ctx.index.parent(parent) or parent)
        if type(parent) is not cst.For:
            continue
        for inner in ctx.index.walk(parent.body):
            if (
                type(inner) is cst.Call
                and type(inner.func) is cst.Attribute
                and inner.func.attr.value in ("add_module", "register_module", "register_parameter", "register_buffer")
            ):
                # the elements, or tensors taken from each of them, registered one by one
                found.add(attr)
                break
    return found


def _managed_by_hand(ctx: FileContext, facts: ClassFacts) -> set[str]:
    """Attributes whose elements the class registers or places itself: an element handed to
    `self.add_module(name, self.heads[-1])` / `setattr(self, name, self.heads[k])`, an element
    moved where it is used (`self.feats[k].to(x.device)`), or elements fed host tensors on
    purpose (`self.resamplers[i](wave.cpu())`, `wave.to(self.device)` with `device="cpu"`)."""
    found: set[str] = set()
    for attr, node, _ in facts.references:
        parent = ctx.index.parent(node)
        if not (type(parent) is cst.Subscript and parent.value is node):
            continue
        outer = ctx.index.parent(parent)
        if type(outer) is cst.Arg:
            call = ctx.index.parent(outer)
            if type(call) is cst.Call and _registering_call(call):
                found.add(attr)
        elif type(outer) is cst.Attribute and outer.value is parent and outer.attr.value in ("to", "cuda", "cpu"):
            if type(ctx.index.parent(outer)) is cst.Call:
                found.add(attr)
        elif (
            type(outer) is cst.Call
            and outer.func is parent
            and outer.args
            and all(_host_input(ctx, facts, a.value) for a in outer.args if a.keyword is None)
        ):
            found.add(attr)
    return found


def _registering_call(call: cst.Call) -> bool:
    func = call.func
    if type(func) is cst.Attribute:
        return func.attr.value in ("add_module", "register_module")
    return type(func) is cst.Name and func.value == "setattr"


def _host_input(ctx: FileContext, facts: ClassFacts, arg: cst.BaseExpression) -> bool:
    """`x.cpu()`, `x.to("cpu")`, or `x.to(self.device)` where the class keeps `self.device` on
    the host (assigned the literal "cpu", or a constructor parameter defaulting to it)."""
    if not (type(arg) is cst.Call and type(arg.func) is cst.Attribute):
        return False
    if arg.func.attr.value == "cpu":
        return True
    if arg.func.attr.value != "to" or not arg.args:
        return False
    target = arg.args[0].value
    if type(target) is cst.SimpleString:
        return target.value.strip("'\"") == "cpu"
    if not (type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self"):
        return False
    values = [(v, m) for a, v, m in facts.assignments if a == target.attr.value]
    return bool(values) and all(_host_value(v, m) for v, m in values)


def _host_value(value: cst.BaseExpression, method: cst.FunctionDef) -> bool:
    if type(value) is cst.SimpleString:
        return value.value.strip("'\"") == "cpu"
    if type(value) is cst.Name:
        for param in (*method.params.params, *method.params.kwonly_params):
            if param.name.value == value.value:
                return type(param.default) is cst.SimpleString and param.default.value.strip("'\"") == "cpu"
    return False


def _installed_elsewhere(ctx: FileContext, function: cst.FunctionDef, call: cst.CSTNode, name: str) -> bool:
    """`set_module_by_path(net, path, wrapper)` or `parent.child = wrapper` next to
    `self.wrappers[path] = wrapper`: the element also lives in another module, which may be the
    registered one (the plain container only indexes it)."""
    for node in ctx.index.walk(function.body):
        if type(node) is cst.Call and node is not call and len(node.args) >= 2:
            if any(
                type(a.value) is cst.Name and a.value.value == name and (i > 0 or a.keyword is not None)
                for i, a in enumerate(node.args)
            ):
                return True
        if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value == name:
            for target in node.targets:
                holder = target.target
                if type(holder) is cst.Attribute and not (
                    type(holder.value) is cst.Name and holder.value.value == "self"
                ):
                    return True
    return False


def _registered_by_hand(ctx: FileContext, call: cst.CSTNode, value: cst.BaseExpression, depth: int = 0) -> bool:
    """`self.add_module(str(i), layer)` (or `setattr(self, name, layer)`) next to
    `self.layers.append(layer)` registers it; so may installing it in another module, or
    returning it to callers that all register it."""
    if type(value) is not cst.Name:
        return False
    function = ctx.index.enclosing_function(call)
    if function is None:
        return False
    if _installed_elsewhere(ctx, function, call, value.value):
        return True
    if depth < 2 and _registered_by_callers(ctx, function, value.value, depth):
        return True
    for node in ctx.index.walk(function.body):
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value in ("add_module", "register_module")
            and len(node.args) >= 2
        ):
            other = node.args[1].value
            if type(other) is cst.Name and other.value == value.value:
                return True
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and node.func.attr.value in ("register_parameter", "register_buffer")
            and len(node.args) >= 2
        ):
            # `holder.register_parameter("weight", layer.weight)`: the layer's own tensor is
            # registered elsewhere, so `.to()` and `state_dict()` reach it there
            other = node.args[1].value
            if type(other) is cst.Attribute and type(other.value) is cst.Name and other.value.value == value.value:
                return True
        if (
            type(node) is cst.Call
            and type(node.func) is cst.Name
            and node.func.value == "setattr"
            and len(node.args) == 3
            and type(node.args[2].value) is cst.Name
            and node.args[2].value.value == value.value
        ):
            return True
    return False


def _registered_by_callers(ctx: FileContext, function: cst.FunctionDef, name: str, depth: int) -> bool:
    """`return block` from a method of the class whose every call registers what it returns:
    `trunk.add_module(n, self._wrap(n, child))`, `setattr(self, n, self._make(n))`,
    `self.stem = self._make("stem")`, or a local that the caller registers so."""
    if not any(
        type(node) is cst.Return
        and type(node.value) is cst.Name
        and node.value.value == name
        and ctx.index.enclosing_function(node) is function
        for node in ctx.index.walk(function.body)
    ):
        return False
    cls = ctx.index.enclosing_class(function)
    if cls is None:
        return False
    calls = _self_calls(ctx, cls.body, function.name.value)
    return bool(calls) and all(_result_registered(ctx, call, depth) for call in calls)


def _result_registered(ctx: FileContext, call: cst.Call, depth: int) -> bool:
    parent = ctx.index.parent(call)
    if type(parent) is cst.Arg:
        outer = ctx.index.parent(parent)
        if type(outer) is not cst.Call or not _registering_call(outer):
            return False
        position = 2 if type(outer.func) is cst.Name else 1  # setattr(obj, name, value)
        keyword = parent.keyword.value if parent.keyword is not None else None
        return keyword in ("module", "value") or (keyword is None and outer.args.index(parent) == position)
    if type(parent) is cst.Assign:
        targets = [t.target for t in parent.targets]
        if all(type(t) is cst.Attribute for t in targets):
            return True  # an attribute of a module: `self.stem = ...`, `trunk.layer1 = ...`
        if len(targets) == 1 and type(targets[0]) is cst.Name:
            return _registered_by_hand(ctx, call, targets[0], depth + 1)
    return False


def _attributes_passed_to_calls(ctx: FileContext, facts: ClassFacts) -> set[str]:
    """Attributes handed to a call (`nn.ModuleList(self.layers)`, `nn.Sequential(*self.layers)`)
    or returned: registered or managed elsewhere."""
    found: set[str] = set()
    for attr, node, _ in facts.references:
        parent = ctx.index.parent(node)
        if type(parent) is cst.Arg:
            call = ctx.index.parent(parent)
            iterating = type(call) is cst.Call and type(call.func) is cst.Name and call.func.value in ITERATION_HELPERS
            if not iterating:
                found.add(attr)
        elif type(parent) is cst.Return:
            found.add(attr)
    return found


# What the registering containers support beyond iteration, `len`, indexing and `+`/`+=`.
_CONTAINER_METHODS = {
    "nn.ModuleList": {"append", "extend", "insert", "pop"},
    "nn.ParameterList": {"append", "extend"},
    "nn.ModuleDict": {"clear", "items", "keys", "pop", "update", "values"},
    "nn.ParameterDict": {"clear", "copy", "get", "items", "keys", "pop", "popitem", "setdefault", "update", "values"},
}


def _registering_fix(ctx: FileContext, facts: ClassFacts, attr: str, replacement: str) -> FixProposal | None:
    """Wrap the attribute's one assignment in `replacement` (`self.blocks = nn.ModuleList([...])`),
    when every use of the attribute in the class still works on the registering container."""
    values = [value for name, value, _ in facts.assignments if name == attr]
    nn_name = torch_nn_spelling(ctx)
    if len(values) != 1 or nn_name is None or not _uses_fit(ctx, facts, attr, replacement):
        return None
    value = values[0]
    if any(container_kind(ctx, element) is not None for element in literal_elements(value)):
        return None  # containers inside: each needs its own ModuleDict/ModuleList
    if replacement.endswith("Dict") and not _string_keys(value):
        return None  # ModuleDict/ParameterDict take string keys only
    empty = isinstance(value, (cst.List, cst.Dict, cst.Tuple)) and not value.elements
    wrapped = f"{nn_name}.{replacement.split('.', 1)[1]}({'' if empty else code_in_place(ctx, value, value)})"
    return FixProposal(f"Use `{replacement}`", safe=False, replacements=((value, wrapped),))


def _uses_fit(ctx: FileContext, facts: ClassFacts, attr: str, replacement: str) -> bool:
    methods = _CONTAINER_METHODS[replacement]
    for name, node, _ in facts.references:
        if name != attr:
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Attribute and parent.value is node and parent.attr.value not in methods:
            return False  # `self.blocks.sort()`, `.index(...)`, `.get(...)` on a ModuleDict
        if type(parent) is cst.Call and parent.func is node:
            return False
        if (
            type(parent) is cst.Arg
            and type(call := ctx.index.parent(parent)) is cst.Call
            and (type(call.func) is cst.Name and call.func.value in ("isinstance", "type", "json", "copy"))
        ):
            return False  # `isinstance(self.blocks, list)` turns False
        if type(parent) is cst.Subscript and parent.value is node and replacement.endswith("Dict"):
            keys = [e.slice.value for e in parent.slice if type(e.slice) is cst.Index]
            if any(type(k) in (cst.Integer, cst.Float) for k in keys):
                return False
    return True


def _string_keys(value: cst.BaseExpression) -> bool:
    if type(value) is cst.Dict:
        return all(
            type(e) is cst.DictElement
            and type(e.key) in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)
            for e in value.elements
        )
    if type(value) is cst.DictComp:
        key = value.key
        if type(key) is cst.Name and type(value.for_in.target) is cst.Name and key.value == value.for_in.target.value:
            # `{name: ... for name in ("a", "b")}`
            source = value.for_in.iter
            return isinstance(source, (cst.Tuple, cst.List)) and all(
                type(e.value) is cst.SimpleString for e in source.elements
            )
        return type(key) in (cst.SimpleString, cst.FormattedString) or (
            type(key) is cst.Call and type(key.func) is cst.Name and key.func.value == "str"
        )
    return True  # a name or builder: filled through subscripts, checked in `_uses_fit`


def _self_calls(ctx: FileContext, root: cst.CSTNode, method: str) -> list[cst.Call]:
    """The `self.<method>(...)` calls below `root`."""
    return [
        node
        for node in ctx.index.walk(root)
        if type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and type(node.func.value) is cst.Name
        and node.func.value.value == "self"
        and node.func.attr.value == method
    ]
