from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import libcst as cst

from devicelint.analysis.container_reads import holders
from devicelint.analysis.device_in_scope import device_in_scope
from devicelint.analysis.facts import file_facts
from devicelint.analysis.modules import dataset_classes
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.negation import through_not
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.placement_values import cpu_only_script, is_device_guard
from devicelint.analysis.training.helpers import bound_arguments, calls_of, returned_call
from devicelint.analysis.unmapped_loads import unmapped_calls
from devicelint.context import FileContext
from devicelint.fix_text import keyword_argument, with_argument
from devicelint.project.view import path_key
from devicelint.rule_base import FixProposal, Rule, Violation, register

LOADERS = frozenset({"torch.load", "torch.serialization.load"})
# Library loaders that hand their `map_location` (default `None`) on to `torch.load`, with the
# position of that parameter: OpenMMLab's checkpoint helpers (`load_checkpoint(model, filename,
# map_location=None)`, `_load_checkpoint(filename, map_location=None)`).
MAP_LOCATION_AT = {
    "torch.load": 1,
    "torch.serialization.load": 1,
    "mmcv.runner._load_checkpoint": 1,
    "mmcv.runner.checkpoint._load_checkpoint": 1,
    "mmengine.runner._load_checkpoint": 1,
    "mmengine.runner.checkpoint._load_checkpoint": 1,
    "mmcv.runner.load_checkpoint": 2,
    "mmcv.runner.checkpoint.load_checkpoint": 2,
    "mmengine.runner.load_checkpoint": 2,
    "mmengine.runner.checkpoint.load_checkpoint": 2,
}


@register
class TorchLoadWithoutMapLocation(Rule):
    """
    ## What it does
    Flags `torch.load(...)` calls (and OpenMMLab's `load_checkpoint(model, filename)` /
    `_load_checkpoint(filename)`, which hand their `map_location`, `None` by default, on to
    `torch.load`) that pass no `map_location`, by keyword or as the second
    positional argument, or that pass `None`, which is the same: `map_location=None`, either
    branch of `None if ... else "cpu"`, or a name of the same function bound to `None` that no
    later binding replaces on every path to the load (`loc = None`, then `if resume: loc =
    "cpu"`). A `None` chosen only where a GPU is available (`None if torch.cuda.is_available()
    else "cpu"`, or `loc = None` then `if not torch.cuda.is_available(): loc = "cpu"`; also under
    the program's own device switch, `if args.cpu:`) is the guarded load of the known limits
    below, written another way, and is not reported.

    ## Why it is a bug on a GPU
    `torch.load` puts every tensor back on the device it was saved from. A checkpoint written
    on `cuda:0` fails to load on a CPU-only machine (`Attempting to deserialize object on a
    CUDA device but torch.cuda.is_available() is False`), and on a multi-GPU machine every
    rank loads its copy onto GPU 0, which can run that GPU out of memory.

    ## Example
    ```python
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state)
    ```

    ## Use instead
    ```python
    state = torch.load("checkpoint.pt", map_location=device)
    model.load_state_dict(state)
    ```

    ## Fix safety
    The fix adds `map_location=` and is unsafe: tensors no longer land on the GPU they were
    saved from. It names the device the surrounding code moves things to (`device`,
    `args.device`, `self.device`: the most used one visible at the call), so a loaded model or
    tensor lands where the code uses it. With no such device in scope it adds `"cpu"` only when
    the payload is not used as a module (a state dict for `load_state_dict`, which copies into
    wherever the model is); a whole pickled model that is called or moved gets no fix, since on
    the CPU it would meet the device inputs.

    ## Known limits
    A call that forwards `**kwargs` is not reported, since `map_location` may be among them.
    `weights_only=True` does not change where tensors land, so it does not silence the rule.
    The rule stays quiet where the file shows a payload that cannot hold device tensors or
    that never leaves the process:

    - an in-memory `io.BytesIO` buffer (built in the function, or a parameter annotated
      `BytesIO`) or a temporary file (`tempfile.*`, or a path spelled with or built from
      `tmp`/`temp`, such as a test's `tmp_path`);
    - a file the same function (or the same module-level script) saved just before: a
      round trip in one process; likewise a file the `__init__` of the object whose method
      loads it saves (a snapshot taken when the object is built and restored later); likewise a place that an earlier statement of the same
      function or script (a notebook's cells) hands to a checkpoint writer (`torch.save`, a
      `ModelCheckpoint("./saved", ...)` handler): the program reloads what it trained and wrote;
      or a load-or-build cache, where the function saves to the same
      path the very value it loads into (`data = torch.load(f)` ... `torch.save(data, f)`),
      or the very parts it unpacks it into when none of them is built on the device here
      (`a, b = torch.load(f)` ... `torch.save([a, b], f)`, `x = c["x"]` ... `{"x": x}`);
    - training data: a result assigned to a name that says data (`train_data`,
      `vectors`, `answer_vocab`) from a path that says nothing of checkpoints, with no use that
      loads weights;
    - a file that every `torch.save` of this file writing the same name (a file-name literal
      such as `"rng.pth"`, or a constant such as `SCALER_NAME`) fills with host values:
      `.cpu()` tensors, NumPy data, RNG states, a scaler's or scheduler's state, a module's
      state dict taken after moving it to the host (`net.cpu().state_dict()`), or a state
      dict taken with `offload_to_cpu=True`; likewise a class whose loader and saver take the
      path as a parameter (`_load(self, path)` / `_save(self, path)`) when every save of the
      class writes host values (also an attribute that the class fills only with such);
    - a result that only goes to host consumers: `scaler.load_state_dict(...)`,
      `lr_scheduler.load_state_dict(...)`, RNG setters (`torch.set_rng_state`,
      `random.setstate`), `torch.from_numpy` (also when the next statements rebind the name:
      `x = torch.from_numpy(x[k])`);
    - a result sorted (`sorted(list(torch.load(f)))`): sortable items are words or numbers (a
      vocabulary), or only the keys are kept;
    - a load inside a `Dataset` class (or a plain class named `...Dataset`, as dataset libraries
      write theirs, or a class of the file deriving from one at any depth), which reads training
      data, not checkpoints;
    - a load in a test module (`test_*.py`, `*_test.py`, `conftest.py`, or under `tests/`): a
      test reads back what it, a handler it drives or its fixtures wrote, or data committed
      next to it, on the machine that runs it;
    - a load in the branch of `if torch.cuda.is_available():` whose other branch loads with
      `map_location=`: the code already decided where tensors go without a GPU; likewise under
      the program's own device switch (`if args.cuda:`, `if use_gpu:`) when the other branch maps
      to the host (`map_location="cpu"`, `lambda storage, loc: storage`).

    - a file that another module of the project (a script in the same folder, or a module of
      the same package) `torch.save`s from host values under the same file name (a literal
      `"embedding.pt"`, the last literal part of `os.path.join`, `Path /` or an f-string), when
      no module of the project saves that name from anything else (a preprocessing script
      that never names a device counts as saving host values); see the project index.

    - a file that this program itself saves, when the program is one file (a notebook, a
      script with a `__main__` guard, or a file whose top level calls its own functions) that
      never names an accelerator or a move: all it builds is on the CPU. A path handed to a loader or saver helper counts by what every call passes
      (`load_checkpoint("checkpoint.pth")`).

    Files written by other programs, or named only by a variable, are judged unknown, so the
    rule fires.

    A loader helper that hands `torch.load` its own `map_location` parameter, `None` by default
    and never rebound (`def load_checkpoint(path, map_location=None): return torch.load(path,
    map_location=map_location)`), is right as written: the rule reports each call of it that
    leaves that parameter out or hands `None` and hands what it loads (or a part of it) to a
    `load_state_dict` (a checkpoint; such a generic loader also reads samplers and RNG states),
    in the file or in another module of the project (see the project index), with no fix.
    """

    code = "DL501"
    name = "torch-load-without-map-location"
    summary = "`torch.load` without `map_location` restores tensors to the device they were saved on."
    message = (
        "`{call}` {lack}: a checkpoint saved on a GPU fails on a CPU-only machine "
        'or lands on the saving GPU; pass `map_location=device` (or "cpu")'
    )
    fix_availability = "unsafe"

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if is_test_path(ctx.path):
            return  # a test reloads what it or its fixtures wrote on the machine that runs it
        payloads = None
        for call in ctx.index.of_type(cst.Call):
            position = MAP_LOCATION_AT.get(ctx.qualified_name(call.func) or "")
            if position is None:
                continue
            none = _map_location_none(ctx, call) if position == 1 else None
            if none is None and _has_map_location(call.args, position):
                continue
            if _loads_in_memory_buffer(ctx, call) or _guarded_by_cuda(ctx, call):
                continue
            payloads = payloads or Payloads(ctx)
            if payloads.host_only(call):
                continue
            if none is not None:
                lack = (
                    "passes `map_location=None`, which maps nothing"
                    if none == "None"
                    else f"passes `map_location={none}`, which can be `None` (no mapping)"
                )
                yield self.violation(call, call=_short(ctx, call), lack=lack)
                continue
            yield self.violation(
                call, fix=_add_map_location(ctx, call), call=_short(ctx, call), lack="has no `map_location`"
            )
        for found in unmapped_calls(ctx):
            # what the helper's caller does with the payload says what it holds, as for a load
            if _loads_in_memory_buffer(ctx, found.call) or _guarded_by_cuda(ctx, found.call):
                continue
            payloads = payloads or Payloads(ctx)
            if payloads.host_only(found.call):
                continue
            at = f" ({found.where})" if found.where else ""
            lack = f"leaves `{found.param}` `None`, which `{found.helper}`{at} hands to `torch.load` as `map_location`"
            yield self.violation(found.call, fix=None, call=_short(ctx, found.call), lack=lack)


CUDA_AVAILABLE = frozenset({"torch.cuda.is_available"})


def _cuda_test(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    """True for `torch.cuda.is_available()` (also as one side of `and`), False for its negation."""
    return through_not(test, lambda plain: _cuda_plain(ctx, plain))


def _cuda_plain(ctx: FileContext, test: cst.BaseExpression) -> bool | None:
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return True if True in (_cuda_test(ctx, test.left), _cuda_test(ctx, test.right)) else None
    if type(test) is cst.Call and ctx.qualified_name(test.func) in CUDA_AVAILABLE:
        return True
    return None


def _guarded_by_cuda(ctx: FileContext, call: cst.Call) -> bool:
    """`if torch.cuda.is_available(): torch.load(p)` whose other branch loads with
    `map_location=`: the code already chose where tensors go on a machine without a GPU. Under
    a test of the program's own device switch (`if args.cuda:`, `if use_gpu:`), whose sense the
    words do not give, the other branch must map to the host (`"cpu"`, `lambda s, loc: s`)."""
    child: cst.CSTNode = call
    for ancestor in ctx.index.ancestors(call):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            taken = _cuda_test(ctx, ancestor.test)
            in_body = child is ancestor.body
            other = ancestor.orelse if in_body else ancestor.body
            switch = taken is None and is_device_guard(ancestor.test, ctx)
            if (
                (switch or (taken is not None and in_body == taken))
                and other is not None
                and any(
                    type(n) is cst.Call
                    and ctx.qualified_name(n.func) in LOADERS
                    and _has_map_location(n.args)
                    and (not switch or _maps_to_host(ctx, n))
                    for n in ctx.index.walk(other)
                )
            ):
                return True
        child = ancestor
    return False


def _maps_to_host(ctx: FileContext, load: cst.Call) -> bool:
    """The load's `map_location` names no accelerator: `"cpu"`, `torch.device("cpu")`, the
    identity `lambda storage, loc: storage`."""
    value = next((a.value for a in load.args if a.keyword is not None and a.keyword.value == "map_location"), None)
    if value is None and len(load.args) > 1 and load.args[1].keyword is None:
        value = load.args[1].value
    if value is None:
        return False
    text = ctx.code_for(value).lower()
    if _ACCELERATOR_TEXT.search(text):
        return False
    return "cpu" in text or type(value) is cst.Lambda  # (a name such as `device` may be either)


_ACCELERATOR_TEXT = re.compile(r"cuda|gpu|rank|mps|xpu|npu|hpu|xla")


BUFFERS = frozenset({"io.BytesIO", "_io.BytesIO"})
TEMPORARY_FILES = ("tempfile.",)


_TEMPORARY = re.compile(r"(?i)\b\w*(tmp|temp)\w*\b")


def _loads_in_memory_buffer(ctx: FileContext, call: cst.Call) -> bool:
    """`torch.load(io.BytesIO(data))` or `torch.load(tmp.name)`: an in-process round trip
    (pickling a storage, a test that saves and reloads) where restoring the original device
    is what the code wants. Also a stream parameter annotated `BytesIO`, and a file from
    `tempfile`."""
    if not call.args:
        return False
    source = call.args[0].value
    if _TEMPORARY.search(ctx.code_for(source)) or _built_from_temporary(ctx, source, call):
        return True
    if type(source) is cst.Call:
        return ctx.qualified_name(source.func) in BUFFERS
    if type(source) is not cst.Name:
        return False
    function = ctx.index.enclosing_function(call) or ctx.module
    if type(function) is cst.FunctionDef:
        params = function.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.name.value == source.value and param.annotation is not None:
                if ctx.code_for(param.annotation.annotation).rsplit(".", 1)[-1].strip("'\"") == "BytesIO":
                    return True
    for node in ctx.index.walk(function):
        value = None
        if type(node) is cst.Assign and any(_is_name(t.target, source.value) for t in node.targets):
            value = node.value
        elif type(node) is cst.WithItem and node.asname is not None and _is_name(node.asname.name, source.value):
            value = node.item
        if type(value) is cst.Call:
            qualified = ctx.qualified_name(value.func) or ""
            if qualified in BUFFERS or qualified.startswith(TEMPORARY_FILES):
                return True
    return False


def _built_from_temporary(ctx: FileContext, source: cst.BaseExpression, call: cst.Call) -> bool:
    """`save_path = tmp_path / "model.pth"; torch.load(save_path)`: a path built (two
    assignments deep) from a temporary directory, as tests do."""
    function = ctx.index.enclosing_function(call) or ctx.module
    names = {n.value for n in ctx.index.walk(source) if type(n) is cst.Name}
    for _ in range(2):
        found: set[str] = set()
        for node in ctx.index.walk(function):
            if type(node) is cst.Assign and any(
                type(t.target) is cst.Name and t.target.value in names for t in node.targets
            ):
                if _TEMPORARY.search(ctx.code_for(node.value)):
                    return True
                found |= {n.value for n in ctx.index.walk(node.value) if type(n) is cst.Name}
        names = found
    return False


def _unpacked_names(target: cst.BaseExpression) -> list[str | None]:
    """`a, b, c` (or `[a, b, c]`) as a target: its names in order (None for any other part)."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return []
    return [e.value.value if type(e) is cst.Element and type(e.value) is cst.Name else None for e in target.elements]


def _reads_name(ctx: FileContext, node: cst.CSTNode, name: str) -> bool:
    return any(type(n) is cst.Name and n.value == name for n in ctx.index.walk(node))


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return type(node) is cst.Name and node.value == name


def _binds(target: cst.BaseExpression, name: str) -> bool:
    """`name = ...`, or `name` unpacked (`name, _ = pair`)."""
    if type(target) in (cst.Tuple, cst.List):
        return any(_binds(e.value, name) for e in target.elements)  # type: ignore[attr-defined]  # a Tuple or List
    return _is_name(target, name)


def _map_location_value(call: cst.Call) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "map_location":
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[1].value if len(positional) > 1 else None


def _is_none(node: cst.BaseExpression) -> bool:
    if type(node) is cst.IfExp:
        return _is_none(node.body) or _is_none(node.orelse)
    return type(node) is cst.Name and node.value == "None"


_BLOCKS = (cst.If, cst.Else, cst.For, cst.While, cst.Try, cst.ExceptHandler, cst.Finally, cst.Match)


def _map_location_none(ctx: FileContext, call: cst.Call) -> str | None:
    """The load's `map_location` is `None` on some path: the literal, a conditional expression with
    a `None` branch, or a name of the function whose last `None` binding before the load is not
    replaced by a later binding at the same or an outer level (`map_location = None` then
    `if not torch.cuda.is_available(): map_location = "cpu"`). Its source, else None."""
    value = _map_location_value(call)
    if value is None:
        return None
    if _is_none(value):
        return None if _guarded_none(ctx, value) else ctx.code_for(value)
    if type(value) is not cst.Name:
        return None
    scope: cst.CSTNode = ctx.index.enclosing_function(call) or ctx.module
    at = ctx.index.position(call)
    assigned: list[cst.Assign] = []
    for node in ctx.index.walk(scope):
        if ctx.index.position(node) >= at:
            break
        if type(node) is cst.Assign and (ctx.index.enclosing_function(node) or ctx.module) is scope:
            if any(_binds(t.target, value.value) for t in node.targets):
                assigned.append(node)
        elif type(node) in (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr) and _binds_any(node, value.value):
            return None  # bound some other way: left alone
    nones = [a for a in assigned if len(a.targets) == 1 and type(a.targets[0].target) is cst.Name and _is_none(a.value)]
    if nones and _guarded_none(ctx, nones[-1].value):
        return None
    if not nones:
        return None
    last_none = nones[-1]
    outer = _enclosing_blocks(ctx, last_none, scope)
    laters = assigned[assigned.index(last_none) + 1 :]
    for later in laters:
        if _enclosing_blocks(ctx, later, scope) <= outer:
            return None  # replaced on every path from the `None`
    if laters and all(_set_without_gpu(ctx, later, last_none) for later in laters):
        # `m = None` then `if not torch.cuda.is_available(): m = "cpu"`: the guarded load
        # (`if torch.cuda.is_available(): torch.load(p)`, else with `map_location=`) again
        return None
    start = ctx.index.position(last_none)
    for node in ctx.index.walk(scope):
        position = ctx.index.position(node)
        if position >= at:
            break
        if (
            position > start
            and type(node) is cst.If
            and _enclosing_blocks(ctx, node, scope) <= outer
            and _always_binds(node, value.value)
        ):
            return None  # `if ...: m = a` / `else: m = b` replaces it on both paths
    return value.value


def _guarded_none(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`None if torch.cuda.is_available() else "cpu"` (or under the program's own device switch,
    `None if use_gpu else "cpu"`): the guarded load written inline, which DL501 leaves alone."""
    if type(value) is not cst.IfExp:
        return False
    if _cuda_test(ctx, value.test) is not None:
        return True
    other = value.orelse if _is_none(value.body) else value.body
    return is_device_guard(value.test, ctx) and _host_text(ctx, other)


def _host_text(ctx: FileContext, value: cst.BaseExpression) -> bool:
    text = ctx.code_for(value).lower()
    return not _ACCELERATOR_TEXT.search(text) and ("cpu" in text or type(value) is cst.Lambda)


def _set_without_gpu(ctx: FileContext, binding: cst.Assign, start: cst.CSTNode) -> bool:
    """`binding` runs only on a machine without a GPU: in the branch of the nearest `if` (not
    around `start`) that `torch.cuda.is_available()` does not take, or under the program's own
    device switch (`if args.cpu:`) when it maps to the host, as DL501's guarded loads are."""
    child: cst.CSTNode = binding
    around = set(map(id, ctx.index.ancestors(start)))
    for ancestor in ctx.index.ancestors(binding):
        if type(ancestor) is cst.If and id(ancestor) not in around and child is not ancestor.test:
            taken = _cuda_test(ctx, ancestor.test)
            if taken is None:
                return is_device_guard(ancestor.test, ctx) and _host_text(ctx, binding.value)
            return (child is ancestor.body) != taken
        child = ancestor
    return False


def _always_binds(statement: cst.CSTNode, name: str) -> bool:
    """Every path through `statement` (an `if`/`elif`/`else` chain, or a simple statement)
    assigns `name`."""
    if type(statement) is cst.If:
        orelse = statement.orelse
        if orelse is None:
            return False
        if not _block_binds(statement.body, name):
            return False
        return _always_binds(orelse, name) if isinstance(orelse, cst.If) else _block_binds(orelse.body, name)
    if type(statement) is cst.SimpleStatementLine:
        return any(type(s) is cst.Assign and any(_binds(t.target, name) for t in s.targets) for s in statement.body)
    return False


def _block_binds(block: cst.BaseSuite, name: str) -> bool:
    body = block.body if type(block) is cst.IndentedBlock else [block]
    return any(_always_binds(statement, name) for statement in body)


def _binds_any(node: cst.CSTNode, name: str) -> bool:
    target = getattr(node, "target", None)
    return isinstance(target, cst.BaseExpression) and _binds(target, name)


def _enclosing_blocks(ctx: FileContext, node: cst.CSTNode, scope: cst.CSTNode) -> set[int]:
    """The ids of the conditional and loop blocks between `node` and `scope`."""
    blocks: set[int] = set()
    for ancestor in ctx.index.ancestors(node):
        if ancestor is scope:
            break
        if isinstance(ancestor, _BLOCKS):
            blocks.add(id(ancestor))
    return blocks


def _has_map_location(args: Sequence[cst.Arg], position: int = 1) -> bool:
    positional = 0
    for arg in args:
        if arg.star:  # *args or **kwargs may carry it
            return True
        if arg.keyword is None:
            positional += 1
        elif arg.keyword.value == "map_location":
            return True
    return positional > position


def _add_map_location(ctx: FileContext, call: cst.Call) -> FixProposal | None:
    """`map_location=<the device the code uses>`, or `"cpu"` when the payload only feeds
    `load_state_dict` (which copies into wherever the model already is); no fix when a loaded
    whole model is used and no device is in scope (on the CPU it would meet device inputs)."""
    if not call.args:
        return None
    device = device_in_scope(ctx, call)
    if device is None and _used_as_model(ctx, call):
        return None
    where = device or '"cpu"'
    new = with_argument(call, keyword_argument("map_location", where))
    if new is None:
        return None
    return FixProposal(description=f"Add `map_location={where}`", safe=False, replacements=((call, new),))


MODULE_METHODS = frozenset(
    {"eval", "train", "parameters", "named_parameters", "to", "cuda", "forward", "modules", "half"}
)


def _used_as_model(ctx: FileContext, value: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether the loaded object is used as a module: called, or a module method called on it,
    directly, through a key (`ckpt["model"]`) or through names it is assigned to."""
    node: cst.CSTNode = value
    parent = ctx.index.parent(node)
    while type(parent) is cst.Subscript and parent.value is node:
        node, parent = parent, ctx.index.parent(parent)
    if type(parent) is cst.Call and parent.func is node:
        return True
    if type(parent) is cst.Attribute and parent.value is node and parent.attr.value in MODULE_METHODS:
        return True
    if type(parent) is cst.Assign and parent.value is node and depth < 3:
        names = [t.target.value for t in parent.targets if type(t.target) is cst.Name]
        scope = ctx.index.enclosing_function(parent) or ctx.module
        return any(
            _used_as_model(ctx, use, depth + 1)
            for use in ctx.index.walk(scope)
            if type(use) is cst.Name and use.value in names and not ctx.index.in_binding_target(use)
        )
    return False


def _short(ctx: FileContext, call: cst.Call) -> str:
    return f"{ctx.code_for(call.func)}(...)"


# ---------------------------------------------------------------------------- payloads
# What the file shows about what a `torch.load` reads. Only payloads that cannot hold a
# device tensor are let through: the rule stays on for anything unknown.

# Objects whose state holds Python numbers or CPU tensors only, whatever device they serve.
HOST_STATE_WORDS = ("scaler", "scheduler", "sched", "rng")
# Calls that consume a payload on the host: RNG states (always CPU byte tensors), NumPy data.
HOST_CONSUMER_WORDS = ("rng_state", "setstate", "set_state", "from_numpy", "asarray", "array")
HOST_PRODUCER_WORDS = ("rng_state", "getstate", "get_state")
HOST_METHODS = frozenset({"cpu", "numpy", "tolist", "item"})
# Uses of a loaded name that say nothing about its contents.
NEUTRAL_CALLS = frozenset({"len", "isinstance", "print", "type", "sorted", "list"})
SAVERS = frozenset({"torch.save", "torch.serialization.save"})
# Whole words of a name (`train_data`, `val_tokens`; not `metadata`).
DATA_WORDS = frozenset(
    {
        "data",
        "dataset",
        "samples",
        "features",
        "tokens",
        "vectors",
        "inputs",
        "targets",
        "labels",
        "vocab",
        "vocabulary",
    }
)
CHECKPOINT_WORDS = ("ckpt", "checkpoint", "model", "weight", "state", "resume", "pretrained")
_FILE_NAME = re.compile(r"\w\.\w{1,8}$")


def _last_name(node: cst.BaseExpression) -> str:
    """`scaler` for `self.accelerator.scaler`, `load_state_dict` for `model.load_state_dict`."""
    while type(node) is cst.Call:
        node = node.func
    if type(node) is cst.Attribute:
        return node.attr.value
    if type(node) is cst.Name:
        return node.value
    return ""


class Payloads:
    """Decides, per `torch.load`, whether the file shows a payload without device tensors:
    read by host-only consumers, read inside a Dataset, or written by this file from host values."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._saves: list[cst.Call] | None = None
        self._datasets: set[int] | None = None

    def host_only(self, call: cst.Call) -> bool:
        return (
            self._in_dataset(call)
            or self._host_consumed(call)
            or self._saved_from_host(call)
            or self._saved_elsewhere_from_host(call)
            or self._round_trip(call)
            or self._checkpointed_here(call)
            or self._sorted_keys(call)
            or self._training_data(call)
        )

    def _sorted_keys(self, call: cst.Call) -> bool:
        """`sorted(list(torch.load(f)))`: sorting needs comparable items, so the file holds a
        collection of words or numbers (a vocabulary, a set of ids), or only its keys are kept."""
        node: cst.CSTNode = call
        while True:
            arg = self.ctx.index.parent(node)
            consumer = self.ctx.index.parent(arg) if type(arg) is cst.Arg else None
            if type(consumer) is not cst.Call or len(consumer.args) != 1:
                return False
            called = _last_name(consumer.func)
            if called == "sorted" and type(consumer.func) is cst.Name:
                return True
            if called not in ("list", "tuple", "set") or type(consumer.func) is not cst.Name:
                return False
            node = consumer

    def _checkpointed_here(self, call: cst.Call) -> bool:
        """An earlier statement of the same function (or of the same top-level script or
        notebook) writes checkpoints to a place the load names: `torch.save(m, out / "a.pt")` or a
        checkpoint handler built on the same folder (`ModelCheckpoint("./saved", ...)`), then
        `torch.load(last_file("./saved"))`. The program reads back what it trained and wrote on
        this machine."""
        if not call.args:
            return False
        function = self.ctx.index.enclosing_function(call)
        wanted = _path_parts(self.ctx, call.args[0].value)
        if not wanted:
            return False
        position = self._position(call)
        for writer in self.ctx.index.of_type(cst.Call):
            if self.ctx.index.enclosing_function(writer) is not function or self._position(writer) >= position:
                continue
            if self.ctx.qualified_name(writer.func) in SAVERS:
                places = [a.value for a in writer.args[1:2]]
            elif _CHECKPOINT_WRITER.search(_last_name(writer.func)):
                places = [
                    a.value
                    for i, a in enumerate(writer.args)
                    if (a.keyword is None and i == 0) or (a.keyword is not None and _PLACE_WORD.search(a.keyword.value))
                ]
            else:
                continue
            if any(wanted & _path_parts(self.ctx, place) for place in places):
                return True
        return False

    def _training_data(self, call: cst.Call) -> bool:
        """`train_data = torch.load(data_dir / "train.pt")`: a name that says data, a path that
        says nothing of checkpoints, and no use that loads weights."""
        name = self._assigned_name(call)
        if name is None or not DATA_WORDS & set(re.split(r"[_\d]+", name.lower())):
            return False
        if call.args and any(w in self.ctx.code_for(call.args[0].value).lower() for w in CHECKPOINT_WORDS):
            return False
        scope = self.ctx.index.enclosing_function(call) or self.ctx.module
        for node in self.ctx.index.walk(scope):
            if type(node) is cst.Call and any(
                w in _last_name(node.func).lower() for w in ("load_state", "load_weights")
            ):
                if any(type(n) is cst.Name and n.value == name for n in self.ctx.index.walk(node)):
                    return False
        return True

    def _round_trip(self, call: cst.Call) -> bool:
        """The same function saved the file just before: one process writes and reads it back,
        so tensors return to devices that exist. Or the function is a load-or-build cache: it
        saves the very value it loads into (`data = torch.load(f)` ... `torch.save(data, f)`)."""
        if not call.args:
            return False
        function = self.ctx.index.enclosing_function(call)
        source = self.ctx.code_for(call.args[0].value)
        keys = self._path_keys(call.args[0].value, call)
        position = self._position(call)
        loaded = self._assigned_name(call)
        constructor = self._constructor_of(function)
        for site, save in self._saves_with_sites():
            if len(save.args) < 2:
                continue
            saver = self.ctx.index.enclosing_function(site)
            if saver is not function and (constructor is None or saver is not constructor):
                continue
            same_path = save.args[1].value is not None and (
                self.ctx.code_for(save.args[1].value) == source or keys & self._path_keys(save.args[1].value, save)
            )
            if not same_path:
                continue
            if (constructor is not None and saver is constructor) or self._position(site) < position:
                # (or the object wrote it when it was built: `torch.save(model.state_dict(),
                # "init.pt")` in `__init__`, restored by a later method of the same object)
                return True
            saved = save.args[0].value
            if loaded is not None and type(saved) is cst.Name and saved.value == loaded:
                return True  # a cache of this function's own value, not a checkpoint of another run
            if self._saves_the_loaded_parts(call, saved):
                return True
        return False

    def _constructor_of(self, function: cst.FunctionDef | None) -> cst.FunctionDef | None:
        """The `__init__` of the class whose method `function` is (None for `__init__` itself)."""
        if function is None or function.name.value == "__init__":
            return None
        cls = self.ctx.index.enclosing_class(function)
        block = self.ctx.index.parent(function)
        if cls is None or block is None or self.ctx.index.parent(block) is not cls:
            return None  # a function nested in a method is not the class's own method
        return next(
            (s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"),
            None,
        )

    def _saves_the_loaded_parts(self, call: cst.Call, saved: cst.BaseExpression) -> bool:
        """A load-or-build cache that unpacks what it loads and saves the same parts when it
        builds them: `a, b = torch.load(f)` (or `c = torch.load(f)`; `a, b = c`) with
        `torch.save([a, b], f)`, or `x = c["x"]` with `torch.save({"x": x}, f)`."""
        function = self.ctx.index.enclosing_function(call) or self.ctx.module
        parts = [e.value for e in saved.elements] if isinstance(saved, (cst.List, cst.Tuple, cst.Dict)) else []
        facts = file_facts(self.ctx)
        if any(facts.is_device_tensor(part, certain=True) for part in parts):
            return False  # built on the GPU here: a machine without one cannot read the cache back
        if isinstance(saved, (cst.List, cst.Tuple)):
            names = [
                e.value.value if type(e) is cst.Element and type(e.value) is cst.Name else None for e in saved.elements
            ]
            return bool(names) and None not in names and names in self._unpacked_into(call, function)
        if type(saved) is not cst.Dict or not saved.elements:
            return False
        loaded = self._assigned_name(call)
        if loaded is None:
            return False
        read: set[tuple[str, str]] = set()  # (name, key) for `name = loaded["key"]`
        for node in self.ctx.index.walk(function):
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
                value = node.value
                if (
                    type(value) is cst.Subscript
                    and _is_name(value.value, loaded)
                    and len(value.slice) == 1
                    and type(value.slice[0].slice) is cst.Index
                    and type(value.slice[0].slice.value) is cst.SimpleString
                ):
                    key = literal_value(value.slice[0].slice.value)
                    if isinstance(key, str):
                        read.add((node.targets[0].target.value, key))
        return all(
            type(e) is cst.DictElement
            and type(e.value) is cst.Name
            and type(e.key) is cst.SimpleString
            and (e.value.value, literal_value(e.key)) in read
            for e in saved.elements
        )

    def _unpacked_into(self, call: cst.Call, function: cst.CSTNode) -> list[list[str | None]]:
        """The names the loaded value is unpacked into, in order: `a, b = torch.load(f)`, or
        `c = torch.load(f)` then `a, b = c` in the same function."""
        found: list[list[str | None]] = []
        parent = self.ctx.index.parent(call)
        if type(parent) is cst.Assign and len(parent.targets) == 1:
            found.append(_unpacked_names(parent.targets[0].target))
        loaded = self._assigned_name(call)
        if loaded is not None:
            for node in self.ctx.index.walk(function):
                if type(node) is cst.Assign and len(node.targets) == 1 and _is_name(node.value, loaded):
                    found.append(_unpacked_names(node.targets[0].target))
        return [names for names in found if names and None not in names]

    # -- where the load is ---------------------------------------------------------------
    def _in_dataset(self, call: cst.Call) -> bool:
        """Inside a `Dataset` class: the file is training data (features, tokens, arrays). Any
        class deriving from a `...Dataset` base counts (PyG's `InMemoryDataset`, a project's
        own `BaseDataset`): for this rule the question is what the file holds, not the API."""
        if self._datasets is None:
            self._datasets = {id(c) for c in dataset_classes(self.ctx).values()} | {
                id(c) for c in _derived_from_named_datasets(self.ctx)
            }
        return any(id(a) in self._datasets for a in self.ctx.index.ancestors(call))

    # -- how the result is used ----------------------------------------------------------
    def _host_consumed(self, call: cst.Call, depth: int = 0) -> bool:
        consumer = self._consumer(call)
        if consumer is not None:
            return consumer == "host"
        name = self._assigned_name(call)
        function = self.ctx.index.enclosing_function(call)
        if name is None and type(self.ctx.index.parent(call)) is cst.Return and function is not None and depth < 2:
            # `return torch.load(path)` in a helper: what every call of the helper does with it
            sites = calls_of(self.ctx, function)
            return bool(sites) and all(self._host_consumed(site, depth + 1) for site in sites)
        if name is None:
            return False
        scope = self.ctx.index.enclosing_function(call) or self.ctx.module
        order = {id(n): i for i, n in enumerate(self.ctx.index.walk(scope))}
        rebinding = self._rebinding(call, name)
        verdicts = set()
        for node in self.ctx.index.walk(scope):
            if not (type(node) is cst.Name and node.value == name and node is not self._target_of(call)):
                continue
            if rebinding is not None and order.get(id(node), 0) > order.get(id(rebinding), 0):
                # `x = torch.from_numpy(x[k])`: uses after the rebinding read another value
                if not any(a is rebinding.value for a in self.ctx.index.ancestors(node)):
                    continue
                if node is rebinding.targets[0].target:
                    continue
            verdicts.add(self._consumer(node) or "device")
        verdicts.discard("neutral")
        return verdicts == {"host"}

    def _rebinding(self, call: cst.Call, name: str) -> cst.Assign | None:
        """The first later statement of the load's own block that binds `name` again."""
        load = self.ctx.index.parent(call)
        if type(load) is not cst.Assign:
            # read back from a container: the statement that takes it out (`data, _ = box`)
            target = self._target_of(call)
            load = self.ctx.index.enclosing(target, cst.Assign) if target is not None else None
        line = self.ctx.index.parent(load) if type(load) is cst.Assign else None
        block = self.ctx.index.parent(line) if line is not None else None
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)) or line not in body:
            return None
        for later in body[body.index(line) + 1 :]:
            if type(later) is not cst.SimpleStatementLine:
                return None  # a compound statement may bind it on one path only
            for small in later.body:
                if type(small) is cst.Assign and len(small.targets) == 1 and _binds(small.targets[0].target, name):
                    return small
        return None

    def _target_of(self, call: cst.Call) -> cst.CSTNode | None:
        parent = self.ctx.index.parent(call)
        if type(parent) is cst.Assign and len(parent.targets) == 1:
            return parent.targets[0].target
        # put in a container and read back into one name (`data, _ = (torch.load(p), None)`)
        held = holders(self.ctx, call)
        return held[0] if len(held) == 1 else None

    def _assigned_name(self, call: cst.Call) -> str | None:
        target = self._target_of(call)
        return target.value if type(target) is cst.Name else None

    def _consumer(self, node: cst.CSTNode) -> str | None:
        """ "host" when `node` (through subscripts) is handed to a host-only consumer, "neutral"
        for uses that say nothing (`len(x)`, `"cuda" in x`, assignment target), None otherwise."""
        index = self.ctx.index
        current: cst.CSTNode = node
        parent = index.parent(current)
        while isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index)) and (
            type(parent) is not cst.Subscript or parent.value is current
        ):
            current, parent = parent, index.parent(parent)
        if type(parent) in (cst.Comparison, cst.ComparisonTarget, cst.AssignTarget, cst.Del):
            return "neutral"
        if (
            type(parent) is cst.Attribute
            and parent.value is current
            and parent.attr.value in ("keys", "get", "items", "values")
        ):
            return None if parent.attr.value != "keys" else "neutral"
        if type(parent) is not cst.Arg:
            return None
        consumer = index.parent(parent)
        if type(consumer) is not cst.Call:
            return None
        called = _last_name(consumer.func).lower()
        if called in NEUTRAL_CALLS:
            return "neutral"
        if any(word in called for word in HOST_CONSUMER_WORDS):
            return "host"
        if called == "load_state_dict" and type(consumer.func) is cst.Attribute:
            owner = _last_name(consumer.func.value).lower()
            if any(word in owner for word in HOST_STATE_WORDS):
                return "host"
        return None

    # -- who wrote the file --------------------------------------------------------------
    def _saved_from_host(self, call: cst.Call) -> bool:
        """Every `torch.save` in this file that writes the same file (same name constant or file
        name literal) saves host values: `.cpu()` tensors, NumPy data, RNG states, a scaler's or
        scheduler's state, or a state dict taken with `offload_to_cpu=True`."""
        if not call.args:
            return False
        # (only here through the helpers' calls: a file name alone does not tell an input
        # directory from an output one, which the round-trip and cache tests need)
        keys = self._path_keys(call.args[0].value, call, through_calls=True)
        if not keys:
            return self._class_saved_from_host(call)
        writers = [
            s
            for s in self._all_saves()
            if len(s.args) >= 2 and keys & self._path_keys(s.args[1].value, s, through_calls=True)
        ]
        # a notebook or script that never names an accelerator saves what it built on the CPU
        host_program = _cpu_only_program(self.ctx)
        return bool(writers) and all(host_program or self._host_value(s.args[0].value, s, 0) for s in writers)

    def _saved_elsewhere_from_host(self, call: cst.Call) -> bool:
        """Another module of the project (a script of the same folder, a module of the same
        package) `torch.save`s the file this load names from host data, and none saves it from
        anything else: `node2vec.py` writes `embedding.weight.data.cpu()` to `"embedding.pt"`,
        which `gnn.py` loads (the project view's `host_saved`)."""
        if not call.args or not self.ctx.project.host_saved:
            return False
        return bool(self._file_names(call.args[0].value, call) & set(self.ctx.project.host_saved))

    def _file_names(self, node: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> set[str]:
        """The file names a path ends in (`path_key`): `"embedding.pt"`, `os.path.join(d,
        "embedding.pt")`, `f"{d}/embedding.pt"`, also through a name bound to such a path."""
        names: set[str] = set()
        for part in self.ctx.index.walk(node):
            key = None
            if type(part) is cst.SimpleString:
                value = literal_value(part)
                parent = self.ctx.index.parent(part)
                # (`name + "_ckpt.pth"`: joined with `+`, only what follows a `/` is a whole name)
                joined = type(parent) is cst.BinaryOperation and type(parent.operator) is cst.Add
                key = path_key(value, whole=not joined) if isinstance(value, str) else None
            elif type(part) is cst.FormattedString and part.parts and type(part.parts[-1]) is cst.FormattedStringText:
                key = path_key(part.parts[-1].value, whole=len(part.parts) == 1)
            elif type(part) is cst.Name and depth < 1:
                for value in self._assigned_values(part.value, at):
                    names |= self._file_names(value, at, depth + 1)
            if key is not None:
                names.add(key)
        return names

    def _class_saved_from_host(self, call: cst.Call) -> bool:
        """A class's loader and saver methods that take the path as a parameter (`_load(self,
        path)` / `_save(self, path)`): the class reads back what it wrote, so every save of the
        class must write host values."""
        cls = self.ctx.index.enclosing_class(call)
        if cls is None or not self._path_parameter(call.args[0].value, call):
            return False
        writers = [
            s
            for s in self._all_saves()
            if len(s.args) >= 2
            and self.ctx.index.enclosing_class(s) is cls
            and self._path_parameter(s.args[1].value, s)
        ]
        return bool(writers) and all(self._host_value(s.args[0].value, s, 0) for s in writers)

    def _path_parameter(self, node: cst.BaseExpression, at: cst.CSTNode) -> bool:
        function = self.ctx.index.enclosing_function(at)
        if type(node) is not cst.Name or function is None:
            return False
        params = function.params
        return any(p.name.value == node.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))

    def _position(self, node: cst.CSTNode) -> int:
        return self.ctx.index.position(node) if type(node) is cst.Call else -1

    def _saves_with_sites(self) -> list[tuple[cst.Call, cst.Call]]:
        """(where it runs, the save) for each save of the file, and for each call of a helper of
        the file whose one `return` is a save (`_cache(a, b, path)` running `return
        torch.save((a, b), path)`): that save in the caller's words, at the call."""
        found = [(save, save) for save in self._all_saves()]
        savers = {
            function.name.value
            for save in self._all_saves()
            if type(self.ctx.index.parent(save)) is cst.Return
            and (function := self.ctx.index.enclosing_function(save)) is not None
        }
        if not savers:
            return found
        for call in self.ctx.index.of_type(cst.Call):
            func = call.func
            name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
            if name in savers:
                inner = returned_call(self.ctx, call)
                if inner is not None and self.ctx.qualified_name(inner.func) in SAVERS:
                    found.append((call, inner))
        return found

    def _all_saves(self) -> list[cst.Call]:
        if self._saves is None:
            self._saves = [c for c in self.ctx.index.of_type(cst.Call) if self.ctx.qualified_name(c.func) in SAVERS]
        return self._saves

    def _path_keys(
        self, node: cst.BaseExpression, at: cst.CSTNode, depth: int = 0, through_calls: bool = False
    ) -> set[str]:
        """File-name literals (`"rng_state.pth"`) and constant names (`SCALER_NAME`) in a path;
        with `through_calls`, also what every call of the helper passes for a path parameter."""
        keys: set[str] = set()
        for part in self.ctx.index.walk(node):
            if type(part) is cst.SimpleString:
                value = literal_value(part)
                if isinstance(value, str) and _FILE_NAME.search(value):
                    keys.add(value.rsplit("/", 1)[-1])
            elif type(part) is cst.FormattedStringText and _FILE_NAME.search(part.value):
                keys.add(re.split(r"[/_{]", part.value)[-1])
            elif type(part) is cst.Name and part.value.isupper() and len(part.value) > 2:
                keys.add(part.value)
            elif type(part) is cst.Name and depth < 2:
                for value in self._assigned_values(part.value, at):
                    keys |= self._path_keys(value, at, depth + 1, through_calls)
                if through_calls and self._path_parameter(part, at):
                    keys |= self._passed_keys(part.value, at, depth)
        return keys

    def _passed_keys(self, name: str, at: cst.CSTNode, depth: int) -> set[str]:
        """The file names every call of the enclosing helper passes for its parameter `name`
        (`load_checkpoint("checkpoint.pth")`); none where a call passes something unnamed."""
        function = self.ctx.index.enclosing_function(at)
        calls = calls_of(self.ctx, function) if function is not None else []
        keys: set[str] = set()
        for call in calls:
            passed = bound_arguments(self.ctx, function, call)  # type: ignore[arg-type]
            value = passed.get(name) if passed is not None else None
            found = self._path_keys(value, call, depth + 1, through_calls=True) if value is not None else set()
            if not found:
                return set()
            keys |= found
        return keys

    def _assigned_values(self, name: str, at: cst.CSTNode) -> list[cst.BaseExpression]:
        scope = self.ctx.index.enclosing_function(at) or self.ctx.module
        values = []
        for node in self.ctx.index.walk(scope):
            if type(node) is cst.Assign and any(_is_name(t.target, name) for t in node.targets):
                values.append(node.value)
        return values

    def _host_value(self, node: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        if depth > 4:
            return False
        if type(node) in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
            return True
        if type(node) is cst.Name:
            if node.value in ("None", "True", "False"):
                return True
            return self._host_name(node.value, at, depth)
        if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            return all(
                self._host_value(e.value, at, depth + 1) for e in node.elements if isinstance(e, cst.BaseElement)
            )
        if type(node) is cst.Dict:
            return all(type(e) is cst.DictElement and self._host_value(e.value, at, depth + 1) for e in node.elements)
        if isinstance(node, (cst.DictComp,)):
            return self._host_value(node.value, at, depth + 1)
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            return self._host_value(node.elt, at, depth + 1)
        if type(node) is cst.Call:
            return self._host_call(node, at)
        if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self":
            return self._host_attribute(node.attr.value, at, depth)
        return False

    def _host_attribute(self, attr: str, at: cst.CSTNode, depth: int) -> bool:
        """Every value the class stores in `self.<attr>` (also `self.<attr>[key] = ...` and
        `self.<attr>.append(...)`) is host data; an empty container to be filled counts as host."""
        cls = self.ctx.index.enclosing_class(at)
        if cls is None:
            return False
        stores: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        for node in self.ctx.index.walk(cls):
            if (
                type(node) is cst.Call
                and type(node.func) is cst.Attribute
                and node.args
                and node.func.attr.value in ("append", "extend", "insert", "update", "add")
            ):
                holder = node.func.value
                if (
                    type(holder) is cst.Attribute
                    and holder.attr.value == attr
                    and type(holder.value) is cst.Name
                    and holder.value.value == "self"
                ):
                    stores.append((node.args[-1].value, node))  # `self.objective.append(obj)`
                continue
            if type(node) is not cst.Assign:
                continue
            for target in node.targets:
                bound = target.target
                if type(bound) is cst.Subscript:
                    bound = bound.value
                if (
                    type(bound) is cst.Attribute
                    and bound.attr.value == attr
                    and type(bound.value) is cst.Name
                    and bound.value.value == "self"
                ):
                    stores.append((node.value, node))
        stores = [
            (v, w)
            for v, w in stores  # what the class reads back is what it saved
            if not (type(v) is cst.Call and self.ctx.qualified_name(v.func) in LOADERS)
        ]
        return bool(stores) and all(
            (isinstance(v, (cst.Dict, cst.List)) and not v.elements) or self._host_value(v, where, depth + 1)
            for v, where in stores
        )

    def _host_call(self, call: cst.Call, at: cst.CSTNode) -> bool:
        called = _last_name(call.func).lower()
        qualified = self.ctx.qualified_name(call.func) or ""
        if called in HOST_METHODS or qualified.startswith(("numpy.", "random.")):
            return True
        if any(word in called for word in HOST_PRODUCER_WORDS):
            return True
        if called == "state_dict" and type(call.func) is cst.Attribute:
            if _moved_to_host(call.func.value):
                return True  # `model.cpu().state_dict()`: the module is on the host when it is taken
            owner = _last_name(call.func.value).lower()
            if any(word in owner for word in HOST_STATE_WORDS):
                return True
            return self._offloaded(at)
        return False

    def _offloaded(self, at: cst.CSTNode) -> bool:
        """The saving function takes its state dicts with `offload_to_cpu=True` (FSDP)."""
        scope = self.ctx.index.enclosing_function(at) or self.ctx.module
        return any(
            type(n) is cst.Arg
            and n.keyword is not None
            and n.keyword.value in ("offload_to_cpu", "cpu_offload")
            and type(n.value) is cst.Name
            and n.value.value == "True"
            for n in self.ctx.index.walk(scope)
        )

    def _host_name(self, name: str, at: cst.CSTNode, depth: int) -> bool:
        """Every value the saving function binds to `name` (also `name[key] = ...`) is host data."""
        scope = self.ctx.index.enclosing_function(at) or self.ctx.module
        values: list[cst.BaseExpression] = []
        for node in self.ctx.index.walk(scope):
            if type(node) is cst.Assign:
                for target in node.targets:
                    bound = target.target
                    if type(bound) is cst.Subscript:
                        bound = bound.value
                    if _is_name(bound, name):
                        if _is_name(target.target, name) and _reads_name(self.ctx, node.value, name):
                            values.clear()  # `x = torch.tensor(x).cpu()`: earlier values only feed this one
                        values.append(node.value)
        return bool(values) and all(self._host_value(v, at, depth + 1) for v in values)


# A checkpoint handler or saver (`ModelCheckpoint`, `CheckpointSaver`, `save_checkpoint`), not
# a reader (`load_checkpoint`, `latest_checkpoint`).
_CHECKPOINT_WRITER = re.compile(
    r"(?i)^(?!(load|restore|resume|read|get|find|latest|last|best)_?).*checkpoint|^save_(model|pretrained)$"
)
# Names that locate nothing by themselves (`args.output_dir` is kept whole).
_UNSPECIFIC = frozenset({"args", "self", "cfg", "config", "opt", "os", "path", "Path", "True", "False", "None"})
_PLACE_WORD = re.compile(r"(?i)dir|path|folder|file|root")


def _moved_to_host(node: cst.BaseExpression) -> bool:
    """`x.cpu()`, `x.to("cpu")`, `x.to(torch.device("cpu"))`."""
    if not (type(node) is cst.Call and type(node.func) is cst.Attribute):
        return False
    if node.func.attr.value == "cpu":
        return True
    if node.func.attr.value != "to" or not node.args:
        return False
    first = node.args[0].value
    if type(first) is cst.Call and first.args and dotted_name(first.func) in ("torch.device", "device"):
        first = first.args[0].value
    return type(first) is cst.SimpleString and literal_value(first) == "cpu"


def _cpu_only_program(ctx: FileContext) -> bool:
    """A whole program in one file (a notebook, a script with a `__main__` guard, or one whose
    top level calls its own functions) that never names an accelerator or a move: everything it
    builds, and so everything it saves, is on the CPU."""
    return cpu_only_script(ctx)


def _path_parts(ctx: FileContext, node: cst.BaseExpression) -> set[str]:
    """What names a place in a path expression: its string literals that look like paths or
    file names, and the dotted names it is built from (`args.save_dir`, `ckpt_dir`)."""
    parts: set[str] = set()
    for part in ctx.index.walk(node):
        if type(part) is cst.SimpleString:
            value = literal_value(part)
            if isinstance(value, str) and len(value) > 2 and ("/" in value or _FILE_NAME.search(value)):
                parts.add(value.rstrip("/"))
        elif type(part) in (cst.Name, cst.Attribute):
            parent = ctx.index.parent(part)
            if type(parent) is cst.Attribute and parent.value is part:
                continue  # the whole dotted name is taken at its outermost node
            if type(parent) is cst.Call and parent.func is part:
                continue  # a called function says nothing of the place
            dotted = dotted_name(part)
            if dotted and dotted not in _UNSPECIFIC and not dotted.startswith("os.path"):
                parts.add(dotted)
    return parts


def _derived_from_named_datasets(ctx: FileContext) -> list[cst.ClassDef]:
    """The classes named like datasets, and those of this file deriving from one of them,
    however many steps away (`class TrialImages(Images)` where `class Images(BaseDataset)`)."""
    classes = list(ctx.index.of_type(cst.ClassDef))
    found = {c.name.value: c for c in classes if _named_like_dataset(c)}
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name.value not in found and any(
                (dotted_name(base.value) or "").rsplit(".", 1)[-1] in found for base in cls.bases
            ):
                found[cls.name.value] = cls
                changed = True
    return list(found.values())


def _named_like_dataset(cls: cst.ClassDef) -> bool:
    """A class deriving from a base whose name ends in `Dataset` (`InMemoryDataset`,
    `torch_geometric.data.Dataset`), or named so itself: a dataset library's own plain classes
    (`class NodePropPredDataset(object)` reading its split files) hold data just the same."""
    return cls.name.value.endswith("Dataset") or any(
        (dotted_name(base.value) or "").rsplit(".", 1)[-1].endswith("Dataset") for base in cls.bases
    )
