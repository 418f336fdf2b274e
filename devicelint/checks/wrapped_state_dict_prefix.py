from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.model_events import (
    DATA_PARALLEL,
    DISTRIBUTED_DATA_PARALLEL,
    WrapperSite,
    built_on_cpu,
    chain_base,
    history,
    resolver_for,
    returned_wrapper_sites,
    scope_facts,
    scope_of,
    short,
    statement_of,
    string_constants,
    wrapper_at,
    wrapper_sites,
)
from devicelint.analysis.model_events.one_path_wraps import loads_after_one_path_wrap
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.training.helpers import calls_of
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place
from devicelint.project.view import path_key as file_name_of
from devicelint.rule_base import FixProposal, Rule, Violation, register

SAVERS = frozenset({"torch.save", "torch.serialization.save"})
LOADERS = frozenset({"torch.load", "torch.serialization.load"})
# Code that already handles the prefix: nothing to report in that file.
_PREFIX_HELPERS = frozenset({"consume_prefix_in_state_dict_if_present"})
_CHECKPOINT_FILE = re.compile(r"^[\w.-]*\w\.(pt|pth|ckpt|bin|tar|pkl|pth\.tar|safetensors)$")


@dataclass(frozen=True)
class _Saved:
    call: cst.Call
    model: str
    path: str
    key: str | None
    wrapper: WrapperSite | None  # the wrapper the saved model is, None for a bare model


@register
class WrappedStateDictPrefix(Rule):
    """
    ## What it does
    Flags a checkpoint that crosses the `DataParallel`/`DistributedDataParallel` boundary in
    one file: `torch.save(model.state_dict(), path)` (or `{"model": model.state_dict()}`) where
    `model` is a wrapper (wrapped in the same function, or `self.model` wrapped in another
    method of the class), and the same file (and key) loaded with `load_state_dict` into a bare
    model built in the file (a class of the file or of `torch.nn`, a builder, or a torchvision
    model picked by name: `models.__dict__[args.arch]()`); and the reverse, a bare model's checkpoint loaded into a wrapper.
    It also flags a load that runs whether or not an `if` on the run's GPU or process count
    above it wrapped the model or one of its submodules (`if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)`, `net.encoder = nn.DataParallel(net.encoder)` under `if
    world_size > 1:`, then `model.load_state_dict(sd)` after the `if`): whatever keys the
    checkpoint has, it cannot load on both machines.
    The finding is on the `load_state_dict` call, where the keys fail to match.

    ## Why it is a bug on a GPU
    A wrapper holds the model as its `module` attribute, so every key of its `state_dict()`
    starts with `module.` (`module.encoder.weight`). Loading those keys into the bare model
    fails with `Missing key(s) in state_dict: "encoder.weight" ... Unexpected key(s):
    "module.encoder.weight"`, and with `strict=False` it silently loads nothing. The
    checkpoint written by the multi-GPU run cannot be used by the single-GPU evaluation.

    ## Example
    ```python
    model = nn.DataParallel(Net()).cuda()
    torch.save(model.state_dict(), "best.pt")
    ...
    net = Net()
    net.load_state_dict(torch.load("best.pt", map_location="cpu"))
    ```

    ## Use instead
    ```python
    torch.save(model.module.state_dict(), "best.pt")
    ```
    and, for checkpoints already written by the wrapper,
    `consume_prefix_in_state_dict_if_present(state_dict, "module.")` before loading.

    ## Fix safety
    Loading a wrapper's checkpoint into the bare model, the fix strips the prefix at the load:
    `model.load_state_dict({key.removeprefix("module."): value for key, value in sd.items()})`,
    right for checkpoints saved either way (keys without the prefix are unchanged), old ones on
    disk included. Loading a bare model's state into the wrapper, it loads into the wrapped
    model: `model.module.load_state_dict(sd)`. Both are unsafe: a checkpoint whose own keys
    start with `module.` (a submodule named `module`) would lose that part of its names.

    With the project index, a bare model loading a checkpoint file (and key) that another
    module of the project saves from a wrapper's state dict (`torch.save(model.state_dict(),
    CHECKPOINT)` after `model = nn.DataParallel(model)` in `train.py`, loaded in `evaluate.py`)
    is reported too, naming the saving file and line.

    ## Known limits
    A wrap on one path counts only under an `if` with no `else` that compares a count of GPUs or
    processes (`device_count()`, `n_gpu`, `world_size`; a flag such as `if data_parallel:` may
    say how the checkpoint was saved), and only for a load in the statements after that `if` in the same block, before the name is
    bound to another model (`model = model.cuda()` keeps it). In one file, save and load must name the same path: the same expression, the
    same constant, or paths ending in the same checkpoint file name (`os.path.join(d,
    "best.pth")` and `f"{d}/best.pth"`), or, for a checkpoint dict, the same key
    (`{"net_state": ...}` and `ckpt["net_state"]`) unless both paths name different files.
    Where a save to the load's path runs unconditionally before the load in the same scope (one
    function, or a notebook's cells in order), the load reads what the last such save wrote:
    earlier saves to the path, and the scope's saves after the load, are not compared.
    A load in a method that only the wrapping method calls, before it wraps, reads into the
    bare model. Files whose code (not comments) has a `"module."` or
    `"module"` string, a `[7:]` slice or `consume_prefix_in_state_dict_if_present` are taken
    to handle the prefix. The loaded model must be built from a class call in the function that
    loads it (or a call of a builder function of the file whose every return hands back a
    model it built and neither wrapped nor moved, `model = make_net()`), or in each caller of a helper that receives it (`load_checkpoint(net, path)`);
    a saved model is followed the same way through a save helper (`save_checkpoint(model,
    path)`, also with `self.model`), one level deep, with the caller's path put in. A wrapper
    returned by a function of the file (`model = parallelize(net)`) counts as a wrapper. A
    state dict handed to `__init__` through the class's constructor calls (`Reader(args,
    ckpt["state"])`, also `cls(...)` in a classmethod) is followed to what each call loaded, and
    `__init__` sees `self.model` before another method wraps it; a copy of a state dict
    (`copy.copy`, `copy.deepcopy`, `dict`, `OrderedDict`) keeps its keys.
    """

    code = "DL204"
    name = "wrapped-state-dict-prefix"
    summary = "A wrapper's state dict keys start with `module.` and do not load into the bare model."
    message = "{problem}; {advice}"
    fix_availability = "unsafe"
    tokens = ("state_dict",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if _handles_prefix(ctx):
            return
        reported: set[int] = set()
        if "DataParallel" in ctx.source:
            for violation in self._saved_here(ctx):
                reported.add(id(violation.node))
                yield violation
        for violation in self._saved_elsewhere(ctx):
            if id(violation.node) not in reported:
                reported.add(id(violation.node))
                yield violation
        for found in loads_after_one_path_wrap(ctx):
            if id(found.load) in reported:
                continue
            reported.add(id(found.load))
            test = short(ctx, found.guard.test, 40)
            yield self.violation(
                found.load,
                problem=(
                    f"`{short(ctx, found.load)}` runs whether or not `if {test}:` above it wrapped `{found.site.target}` "
                    f"in `{found.site.kind}`, and the wrapper adds `{found.key_prefix}` to the keys it expects, "
                    "so one checkpoint cannot load on both paths (missing and unexpected keys)"
                ),
                advice=f"load the state dict into the bare model before wrapping it (or into `{found.site.target}.module` when wrapped)",
            )

    def _saved_elsewhere(self, ctx: FileContext) -> Iterator[Violation]:
        """A bare model of this file loading a checkpoint file that another project module saves
        from a wrapper's state dict (the project view's `wrapped_saved`)."""
        if not ctx.project.wrapped_saved:
            return
        # a file this one saves itself is judged above, by what it saves
        own = {_file_name_in(saved.path) for call in ctx.index.of_type(cst.Call) for saved in _saves(ctx, call)}
        for call in ctx.index.of_type(cst.Call):
            if not (type(call.func) is cst.Attribute and call.func.attr.value == "load_state_dict" and call.args):
                continue
            target = dotted_name(call.func.value)
            source = _loaded_from(ctx, call.args[0].value)
            if target is None or source is None or _wrapper_of(ctx, target, call) is not None:
                continue
            path, key = source
            name = _file_name_in(path) or _imported_constant(ctx, path)
            if name is None or name in own:
                continue
            saved = next((s for s in ctx.project.wrapped_saved if s[0] == name and s[1] == (key or "")), None)
            if saved is None or not _bare(ctx, target, call):
                continue
            yield self.violation(
                call,
                fix=_strip_prefix(ctx, call),
                problem=(
                    f"`{short(ctx, call)}` loads into the bare model `{target}` the `{name.lstrip('@')}` that {saved[2]}:{saved[3]} "
                    "saves from a `DataParallel`/`DistributedDataParallel` wrapper's state dict, whose keys start "
                    "with `module.` (missing and unexpected keys)"
                ),
                advice=(
                    "save the wrapped model's `.module.state_dict()` there, and strip the prefix from checkpoints "
                    'already saved (`torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")`)'
                ),
            )

    def _saved_here(self, ctx: FileContext) -> Iterator[Violation]:
        saves = [s for call in ctx.index.of_type(cst.Call) for s in _saves(ctx, call)]
        if not saves:
            return
        for call in ctx.index.of_type(cst.Call):
            if not (type(call.func) is cst.Attribute and call.func.attr.value == "load_state_dict" and call.args):
                continue
            target = dotted_name(call.func.value)
            source = _loaded_from(ctx, call.args[0].value)
            handed = _handed_state(ctx, call, call.args[0].value) if source is None else None
            if target is None or (source is None and handed is None):
                continue
            for target, loaded, at in _through_callers(ctx, call, target, source, handed=handed):  # noqa: B020  (each caller's view replaces the callee's)
                found = next(self._load(ctx, call, target, loaded, at, saves), None)
                if found is not None:
                    yield found  # one finding per load, however many callers reach it
                    break

    def _load(
        self,
        ctx: FileContext,
        call: cst.Call,
        target: str,
        source: tuple[str, str | None],
        at: cst.CSTNode,
        saves: list[_Saved],
    ) -> Iterator[Violation]:
        """The findings for one load into `target` (as it is at `at`) from `source`."""
        into_wrapper = _wrapper_of(ctx, target, at)
        via = f" (passed in by `{short(ctx, at)}`{_where(ctx, at)})" if at is not call else ""
        for saved in _last_written(ctx, call, source[0], [s for s in saves if _same_checkpoint(s, source)]):
            if saved.wrapper is not None and into_wrapper is None and _bare(ctx, target, at):
                yield self.violation(
                    call,
                    fix=_strip_prefix(ctx, call),
                    problem=(
                        f"`{short(ctx, call)}` loads into the bare model `{target}`{via} the state dict that "
                        f"`{short(ctx, saved.call)}`{_where(ctx, saved.call)} saved from the `{saved.wrapper.kind}` wrapper "
                        f"`{saved.model}`, whose keys start with `module.` (missing and unexpected keys)"
                    ),
                    advice=(
                        f"save `{saved.model}.module.state_dict()` instead, and strip the prefix from checkpoints "
                        'already saved (`torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "module.")`)'
                    ),
                )
            elif saved.wrapper is None and into_wrapper is not None:
                owner = code_in_place(ctx, call.func.value, call.func.value)  # type: ignore[attr-defined]  # `x.load_state_dict(...)`
                yield self.violation(
                    call,
                    fix=None
                    if via
                    else FixProposal(
                        f"Load into the wrapped model: `{owner}.module.load_state_dict(...)`",
                        safe=False,
                        replacements=((call.func.value, f"{owner}.module"),),  # type: ignore[attr-defined]  # as above
                    ),
                    problem=(
                        f"`{short(ctx, call)}` loads the state dict of the bare model `{saved.model}`{_where(ctx, saved.call)} into the "
                        f"`{into_wrapper.kind}` wrapper `{target}`{via}, whose keys start with `module.` "
                        "(missing and unexpected keys)"
                    ),
                    advice=f"load it with `{target}.module.load_state_dict(...)`",
                )


def _last_written(ctx: FileContext, load: cst.Call, path: str, saves: list[_Saved]) -> list[_Saved]:
    """The saves of the checkpoint that `load` reads: where a save to its path runs on every path
    before the load, in the load's own scope (a notebook's cells, one function), only what the
    last such save wrote (it overwrote the earlier files; what the scope saves after the load
    comes too late), and what other functions may write; else all of them."""
    scope = ctx.index.enclosing_function(load)
    here = ctx.index.position(load)
    writes = [
        call
        for call in ctx.index.of_type(cst.Call)
        if ctx.qualified_name(call.func) in SAVERS
        and len(call.args) >= 2
        and ctx.index.enclosing_function(call) is scope
        and -1 < ctx.index.position(call) < here
        and _unconditional(ctx, call, scope)
        and _path_key(ctx, call.args[1].value, call) == path
    ]
    if not writes:
        return saves
    last = ctx.index.position(max(writes, key=ctx.index.position))
    return [
        s
        for s in saves
        if ctx.index.enclosing_function(s.call) is not scope or last <= ctx.index.position(s.call) < here
    ]


def _unconditional(ctx: FileContext, node: cst.CSTNode, scope: cst.FunctionDef | None) -> bool:
    """`node` runs whenever its scope's body gets to it: no `if`, loop or `try` around it there."""
    parent = ctx.index.parent(node)
    while parent is not None and parent is not scope:
        if type(parent) in (cst.If, cst.For, cst.While, cst.Try, cst.IfExp):
            return False
        parent = ctx.index.parent(parent)
    return True


def _same_checkpoint(saved: _Saved, source: tuple[str, str | None]) -> bool:
    """The load reads what the save wrote: the same path, or the same key of a checkpoint dict
    (`{"net_state": ...}` saved by `save(path)` and `ckpt["net_state"]` loaded by
    `evaluate(checkpoint_path)`, the path chosen by each caller) unless both paths are
    spelled as different files."""
    path, key = source
    if saved.key != key:
        return False
    if saved.path == path:
        return True
    return key is not None and not (_names_a_file(saved.path) and _names_a_file(path))


def _file_name_in(path: str) -> str | None:
    """The file name a comparable path (`_path_key`) ends in: `best.pt` for `str:runs/best.pt`
    and for `file:best.pt`; None for a path held only as source text."""
    if path.startswith("str:"):
        return file_name_of(path[4:])
    return path[5:] if path.startswith("file:") else None


def _imported_constant(ctx: FileContext, path: str) -> str | None:
    """`@config.CKPT` for a path held as the source text of another module's constant
    (`config.CKPT`, `CKPT` after `from config import CKPT`), as the saving module names it."""
    if not _DOTTED.fullmatch(path):
        return None
    qualified = ctx.qualified_name(cst.parse_expression(path))
    return f"@{qualified}" if qualified is not None and "." in qualified else None


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _names_a_file(path: str) -> bool:
    return path.startswith(("str:", "file:"))


def _strip_prefix(ctx: FileContext, call: cst.Call) -> FixProposal | None:
    """Load with the `module.` prefix stripped: right for checkpoints saved either way."""
    state = call.args[0]
    if state.keyword is not None or state.star:
        return None
    text = code_in_place(ctx, state.value, state.value)
    stripped = f'{{key.removeprefix("module."): value for key, value in {text}.items()}}'
    return FixProposal("Strip the `module.` prefix at load", safe=False, replacements=((state.value, stripped),))


def _handles_prefix(ctx: FileContext) -> bool:
    """The code strips or adds `module.` itself: a `"module."`/`"module"` string, torch's
    `consume_prefix_in_state_dict_if_present`, or a `key[7:]` slice (comments do not count)."""
    if any(text == "module" or text.startswith("module.") for text in string_constants(ctx)):
        return True
    if any(token in ctx.source for token in _PREFIX_HELPERS):
        return any(name.value in _PREFIX_HELPERS for name in ctx.index.of_type(cst.Name))
    for node in ctx.index.of_type(cst.Slice):
        if type(node.lower) is cst.Integer and node.lower.value == "7" and node.upper is None:
            return True
    return False


def _wrapper_of(ctx: FileContext, var: str, at: cst.CSTNode) -> WrapperSite | None:
    """The wrapper `var` holds at `at`: wrapped earlier in the same function, or `self.model`
    wrapped in another method of the same class."""
    site = wrapper_at(ctx, var, at)
    if site is not None or not var.startswith("self.") or var.count(".") != 1:
        return site
    cls = ctx.index.enclosing_class(at)
    if cls is None:
        return None
    method = ctx.index.enclosing_function(at)
    for other in wrapper_sites(ctx) + returned_wrapper_sites(ctx):
        if (
            other.target == var
            and other.scope is not scope_of(ctx, at)
            and ctx.index.enclosing_class(other.call) is cls
        ):
            if method is not None and (method.name.value == "__init__" or _runs_only_before(ctx, method, other.call)):
                continue  # `__init__` runs before any other method; or it loads through `self._load()` and wraps after it
            return other
    return None


def _runs_only_before(ctx: FileContext, method: cst.FunctionDef, site: cst.CSTNode) -> bool:
    """Every `self.<method>(...)` call of the class is in `site`'s function, before `site`."""
    calls = calls_of(ctx, method)
    if not calls:
        return False
    root = scope_of(ctx, site)
    scope = scope_facts(ctx, root)
    limit = scope.order.get(id(statement_of(ctx, site)), -1)
    return all(
        scope_of(ctx, call) is root and scope.order.get(id(statement_of(ctx, call)), limit) < limit for call in calls
    )


def _where(ctx: FileContext, node: cst.CSTNode) -> str:
    """` in `evaluate`` for a node inside a function, else nothing."""
    function = ctx.index.enclosing_function(node)
    return f" in `{function.name.value}`" if function is not None else ""


def _saves(ctx: FileContext, call: cst.Call) -> list[_Saved]:
    if ctx.qualified_name(call.func) not in SAVERS or len(call.args) < 2:
        return []
    obj, path = call.args[0], call.args[1]
    if obj.keyword is not None or path.star or obj.star:
        return []
    found = []
    for saved, at, path_text in _saved_objects(ctx, call, obj.value, path.value):
        pairs: list[tuple[cst.BaseExpression, str | None]] = [(saved, None)]
        if type(saved) is cst.Dict:
            pairs = [
                (e.value, text)
                for e in saved.elements
                if type(e) is cst.DictElement
                and type(e.key) is cst.SimpleString
                and isinstance(text := literal_value(e.key), str)
            ]
        for value, key in pairs:
            model = _state_dict_of(ctx, _bound_value(ctx, value, call))  # `state = model.state_dict()`
            if model is None:
                continue
            for model, path_key, where in _through_callers(ctx, call, model, (path_text, key), at):  # noqa: B020  (each caller's view replaces the callee's)
                wrapper = _wrapper_of(ctx, model, where)
                if wrapper is None and not _bare(ctx, model, where):
                    continue
                found.append(_Saved(call, model, path_key[0], key, wrapper))
    return found


def _saved_objects(
    ctx: FileContext, call: cst.Call, saved: cst.BaseExpression, path: cst.BaseExpression
) -> list[tuple[cst.BaseExpression, cst.CSTNode, str]]:
    """(what is saved, where its names are judged, path key) for `torch.save(saved, path)`: the
    object itself (or the dict a local is bound to), and, when it is a parameter of a save helper
    (`def save_checkpoint(state, filename="checkpoint.pth")`), what each caller passes for it."""
    found: list[tuple[cst.BaseExpression, cst.CSTNode, str]] = [
        (_bound_value(ctx, saved, call), call, _path_key(ctx, path, call))
    ]
    name = dotted_name(saved)
    function = ctx.index.enclosing_function(call)
    if name is None or function is None or name not in _parameters(function):
        return found
    path_name = dotted_name(path)
    for site in calls_of(ctx, function):
        argument = _argument(function, site, name)
        if argument is None:
            continue
        path_key = _path_key(ctx, path, call)
        if path_name in _parameters(function):
            path_argument = _argument(function, site, path_name) or _default(function, path_name)
            if path_argument is None:
                continue
            path_key = _path_key(ctx, path_argument, site)
        found.append((_bound_value(ctx, argument, site), site, path_key))
    return found


def _bound_value(ctx: FileContext, node: cst.BaseExpression, at: cst.CSTNode) -> cst.BaseExpression:
    """The dict or call a local is bound to once (`ckpt = {"model": ...}`), else the node."""
    name = dotted_name(node)
    if name is not None:
        values = scope_facts(ctx, scope_of(ctx, at)).assigned.get(name)
        if values is not None and len(values) == 1 and type(values[0]) in (cst.Dict, cst.Call):
            return values[0]
    return node


def _default(function: cst.FunctionDef, param: str) -> cst.BaseExpression | None:
    params = function.params
    for p in (*params.posonly_params, *params.params, *params.kwonly_params):
        if p.name.value == param:
            return p.default
    return None


def _through_callers(
    ctx: FileContext,
    node: cst.CSTNode,
    model: str,
    source: tuple[str, str | None] | None,
    at: cst.CSTNode | None = None,
    handed: tuple[str, str | None] | None = None,
) -> list[tuple[str, tuple[str, str | None], cst.CSTNode]]:
    """(model, (path, key), where to judge the model) for a save or load at `node` (its names
    read at `at`, a caller already put in): itself, and, when the model is a parameter of its
    function (`def save_checkpoint(model, path)`), each call of that function in the file with
    the caller's model and path put in (one level). A load whose state dict is itself handed in
    (`handed`: the parameter and the key read from it, `def restore(net, ckpt)` loading
    `ckpt["model"]`) reads, at each call, what the caller loaded for that parameter."""
    at = at or node
    found: list[tuple[str, tuple[str, str | None], cst.CSTNode]] = [(model, source, at)] if source is not None else []
    if at is not node:
        return found
    function = ctx.index.enclosing_function(node)
    if function is None:
        return found
    if model not in _parameters(function):
        # `self.net.load_state_dict(state)` with `state` handed in (`__init__(self, args,
        # state=None)` called as `Reader(args, ckpt["state"])`): the model is the one here,
        # the state dict what each caller loaded
        return found + (_handed_by_callers(ctx, function, model, node, handed) if handed is not None else [])
    for site in calls_of(ctx, function):
        argument = _argument(function, site, model)
        name = dotted_name(argument) if argument is not None else None
        if name is None:
            continue
        if source is None:
            state = _argument(function, site, handed[0]) if handed is not None else None
            loaded = _loaded_from(ctx, state) if state is not None else None
            if handed is None or loaded is None or (handed[1] is not None and loaded[1] is not None):
                continue
            found.append((name, (loaded[0], handed[1] or loaded[1]), site))
            continue
        path = source[0]
        if path in _parameters(function):
            path_argument = _argument(function, site, path)
            if path_argument is None:
                continue
            path = _path_key(ctx, path_argument, site)
        found.append((name, (path, source[1]), site))
    return found


def _handed_by_callers(
    ctx: FileContext, function: cst.FunctionDef, model: str, load: cst.CSTNode, handed: tuple[str, str | None]
) -> list[tuple[str, tuple[str, str | None], cst.CSTNode]]:
    """(model, (path, key), the load) for each call of `function` that hands it a loaded
    checkpoint for the state-dict parameter `handed`, the model itself not handed in."""
    found: list[tuple[str, tuple[str, str | None], cst.CSTNode]] = []
    for site in calls_of(ctx, function):
        state = _argument(function, site, handed[0])
        loaded = _loaded_from(ctx, state) if state is not None else None
        if loaded is None or (handed[1] is not None and loaded[1] is not None):
            continue
        found.append((model, (loaded[0], handed[1] or loaded[1]), load))
    return found


def _handed_state(ctx: FileContext, call: cst.Call, node: cst.BaseExpression) -> tuple[str, str | None] | None:
    """(parameter, key) when the state dict a load reads is a parameter of its function or a
    literal key of one (`ckpt`, `ckpt["model"]`): what the callers hand in says what it is."""
    key = None
    if type(node) is cst.Subscript and len(node.slice) == 1:
        index = node.slice[0].slice
        value = (
            literal_value(index.value) if type(index) is cst.Index and type(index.value) is cst.SimpleString else None
        )
        if not isinstance(value, str):
            return None
        key, node = value, node.value
    function = ctx.index.enclosing_function(call)
    if type(node) is not cst.Name or function is None or node.value not in _parameters(function):
        return None
    if len(scope_facts(ctx, function).assigned.get(node.value, ())) > 1:
        return None  # rebound in the function (the parameter is its one binding): not what callers hand in
    return node.value, key


def _parameters(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def _argument(function: cst.FunctionDef, call: cst.Call, param: str) -> cst.BaseExpression | None:
    """The expression a call passes for one parameter of the function, None when not plain."""
    names = _parameters(function)
    if _is_method(function):
        names = names[1:]
    positional = [p for p in names if p not in {k.name.value for k in function.params.kwonly_params}]
    for position, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value == param:
                return arg.value
        elif position < len(positional) and positional[position] == param:
            return arg.value
    return None


def _is_method(function: cst.FunctionDef) -> bool:
    params = function.params.params
    return bool(params) and params[0].name.value in ("self", "cls")


def _state_dict_of(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """`model` for `model.state_dict()`, also through a copy of it (`copy.copy(...)`,
    `copy.deepcopy(...)`, `dict(...)`, `OrderedDict(...)`), which keeps its keys."""
    while (
        type(node) is cst.Call
        and len(node.args) == 1
        and not node.args[0].star
        and node.args[0].keyword is None
        and ctx.qualified_name(node.func) in _KEY_KEEPING_COPIES
    ):
        node = node.args[0].value
    if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "state_dict":
        if not node.args:
            return dotted_name(node.func.value)
    return None


_KEY_KEEPING_COPIES = frozenset(
    {"copy.copy", "copy.deepcopy", "builtins.dict", "dict", "collections.OrderedDict", "typing.OrderedDict"}
)


def _path_key(ctx: FileContext, node: cst.BaseExpression, at: cst.CSTNode) -> str:
    """A comparable form of a path expression: its constant value when it has one, else its source."""
    key = dotted_name(node)
    if key is not None:
        values = scope_facts(ctx, scope_of(ctx, at)).assigned.get(key) or scope_facts(ctx, ctx.module).assigned.get(key)
        if values is not None and len(values) == 1 and type(values[0]) is cst.SimpleString:
            node = values[0]
    if type(node) is cst.SimpleString and isinstance(text := literal_value(node), str):
        return "str:" + text
    name = _file_name(node)
    if name is not None:
        return "file:" + name  # `os.path.join(out, "best.pth")` and `f"{out}/best.pth"` name one file
    return "".join(ctx.code_for(node).split())


def _file_name(node: cst.BaseExpression) -> str | None:
    """The checkpoint file name a path expression ends with: its last literal piece."""
    pieces = [
        literal_value(n) if type(n) is cst.SimpleString else n.value
        for n in _walk(node)
        if isinstance(n, (cst.SimpleString, cst.FormattedStringText))
    ]
    if not pieces or not isinstance(pieces[-1], str):
        return None
    last = pieces[-1].replace("\\", "/").rsplit("/", 1)[-1]
    return last if _CHECKPOINT_FILE.match(last) else None


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found = [node]
    for child in node.children:
        found.extend(_walk(child))
    return found


def _loaded_from(ctx: FileContext, node: cst.BaseExpression, depth: int = 0) -> tuple[str, str | None] | None:
    """(path, key) for `torch.load(p)`, `torch.load(p)["k"]`, or a name bound once to either."""
    key = None
    if type(node) is cst.Subscript and len(node.slice) == 1:
        index = node.slice[0].slice
        if type(index) is not cst.Index or type(index.value) is not cst.SimpleString:
            return None
        value = literal_value(index.value)
        key = value if isinstance(value, str) else None
        if key is None:
            return None
        node = node.value
    if type(node) is cst.Call and ctx.qualified_name(node.func) in LOADERS and node.args:
        first = node.args[0]
        if first.star or (first.keyword is not None and first.keyword.value != "f"):
            return None
        return _path_key(ctx, first.value, node), key
    name = dotted_name(node)
    if name is not None and depth < 2:
        values = scope_facts(ctx, scope_of(ctx, node)).assigned.get(name)
        if values is not None and len(values) == 1:
            inner = _loaded_from(ctx, values[0], depth + 1)
            if inner is not None and (key is None or inner[1] is None):
                return inner[0], key or inner[1]
    return None


def _bare(ctx: FileContext, var: str, at: cst.CSTNode) -> bool:
    """Whether `var` is a model built by a class call in this scope (or `wrapper.module`)."""
    if var.endswith(".module"):
        return True
    facts = history(ctx, var, at)
    if facts.bind is None:
        return False
    base = chain_base(resolver_for(ctx, at), facts.bind)[0]
    if type(base) is not cst.Call:
        return False
    qualified = ctx.qualified_name(base.func) or ""
    if qualified in DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL:
        return False
    if _picked_from_model_zoo(ctx, base.func):
        return True  # `models.__dict__[args.arch]()`: a torchvision model chosen by name
    callee = (dotted_name(base.func) or "").rsplit(".", 1)[-1]
    # (or a builder function of the file whose every return hands back a model it built and
    # never wrapped or moved: `model = make_net()`)
    return facts.trusted or callee[:1].isupper() or callee == "from_pretrained" or built_on_cpu(ctx, base, None)


MODEL_ZOOS = ("torchvision.models",)


def _picked_from_model_zoo(ctx: FileContext, func: cst.BaseExpression) -> bool:
    """`models.__dict__[name]` or `getattr(models, name)` of `torchvision.models`: the model
    builder a script picks by name (the ImageNet example's `--arch`), which builds a bare model."""
    zoo: cst.BaseExpression | None = None
    if type(func) is cst.Subscript and type(func.value) is cst.Attribute and func.value.attr.value == "__dict__":
        zoo = func.value.value
    elif type(func) is cst.Call and type(func.func) is cst.Name and func.func.value == "getattr" and func.args:
        zoo = func.args[0].value
    qualified = ctx.qualified_name(zoo) if zoo is not None else None
    return qualified is not None and any(qualified == z or qualified.startswith(z + ".") for z in MODEL_ZOOS)
