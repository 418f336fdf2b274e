"""Device placement: where each value of a function lives (CPU, device, module, device value).

A small abstract interpretation, one pass per function (and one for the module's top-level
code), in source order. Facts (`placement_facts.Fact`) flow through assignments, tuple
unpacking, augmented assignment, conditional expressions, `if`/`for`/`while`/`with`/`try`
blocks, comprehensions, lists built with `append`, subscript writes and returns. Calls to
methods of the same class (also static and class methods called on the class), to functions
of the same file, to `self(...)` and to submodules whose class is in the file are followed
up to three levels deep (each distinct set of
argument facts once per file). No whole-program analysis: anything unresolved is `unknown`,
and unknown never produces a finding. Checks ask through `facts.file_facts(ctx)`.

Public API (every result memoised per file through `ctx.shared`):

- `file_placement(ctx)`: a `FilePlacement` with every scope's `ScopePlacement`, every
  `Meeting` (a CPU tensor meeting a device tensor or module) and every `Crossing` (values on
  two different stated accelerators meeting) found in the file.

Rules never call this module: they ask `facts.file_facts(ctx)` (`value`, `place_of`,
`device_of`, `scope`, `meetings`, `crossings`).

Statements and plain expressions are interpreted here; the driver, the results and the file's
call-graph questions are in `placement_program.py`; calls (factories, moves, tensor methods,
module calls, followed helpers) in `placement_calls.py`; the values themselves are described in
`placement_facts.py` and combined by `placement_values.py`; module classes are read by
`placement_classes.py`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

import libcst as cst

from devicelint.analysis.branch_splits import (
    Splits,
    always_leaves,
    assume,
    common,
    forget_reads_of,
    reads_of,
    record,
    test_key,
)
from devicelint.analysis.collate_outputs import plain_list_parts
from devicelint.analysis.devices import DeviceId, distinct, literal_device
from devicelint.analysis.held_models import kept_at_import, kept_on_host
from devicelint.analysis.host_modules import (
    captured_names,
    hosted_in,
    is_host_module,
    keeps_arguments_in_place,
    keeps_module_in_place,
    released,
    root_key,
    under_placing_context,
)
from devicelint.analysis.key_tests import any_tensor_test, constant_test
from devicelint.analysis.names import dotted_name
from devicelint.analysis.negation import through_not
from devicelint.analysis.numpy_bound import numpy_bound_parameters
from devicelint.analysis.placement_calls import (
    DEFAULT_DEVICE_KEY,
    DEVICE_LOADER,
    GATHERING_FUNCTIONS,
    LAUNCHER,
    CallEvaluation,
    constant_default,
    is_handed,
    moved_there,
    only_binding,
)
from devicelint.analysis.placement_classes import ClassFacts, self_attribute
from devicelint.analysis.placement_facts import (
    ACCELERATOR,
    CPU,
    DEVICE,
    DEVICE_VALUE,
    FACTORIES,
    FOLLOWS,
    MODULE,
    PARAMETER_FREE_MODULES,
    UNKNOWN,
    UNKNOWN_FACT,
    Fact,
    move_call,
    moves_to_accelerator,
)
from devicelint.analysis.placement_program import Crossing, FileAnalysis, FilePlacement, Meeting, ScopePlacement
from devicelint.analysis.placement_scope import defines_tests
from devicelint.analysis.placement_values import (
    DATA_WORDS,
    LOADER,
    NUMBER,
    PY_DATA,
    Env,
    annotation_is_settings,
    annotation_is_tensor,
    compatible,
    cpu_side,
    data_pipeline_path,
    device_string_fact,
    devicey,
    flatten,
    indexes_every_dimension,
    is_device_guard,
    is_literal_data,
    is_python_data,
    join,
    join_envs,
    kept_device_holder,
    looks_like_device_name,
    module_on_gpu_branch,
    module_wide_accelerator_default,
    moves_what_it_yields,
    sets_default_device_off_cpu,
    string_value,
    tensor_on_gpu_branch,
    tests_availability,
    used_as_settings,
)
from devicelint.analysis.stale_aliases import Aliases, moved_in_place, on_accelerator
from devicelint.analysis.vocabulary import names_a_loss
from devicelint.context import FileContext

__all__ = [
    "CPU",
    "DEVICE",
    "MODULE",
    "DEVICE_VALUE",
    "UNKNOWN",
    "Fact",
    "Meeting",
    "Crossing",
    "ScopePlacement",
    "FilePlacement",
    "file_placement",
    "is_device_guard",
    "join",
]

_MODULE_TENSOR_ATTRS = frozenset({"weight", "bias", "running_mean", "running_var", "in_proj_weight", "pos_embed"})
# Module methods that yield its parts (a loop over them may move each one).
_MODULE_PARTS = frozenset(
    {
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "modules",
        "named_modules",
        "children",
        "named_children",
    }
)
# Attributes that give a tensor where the receiver lives; `values`/`indices` are the fields of
# the (values, indices) results of `topk`, `sort`, `max(dim)`, `kthvalue`..., which the engine
# keeps as one tensor fact (unpacked, `_, idx = x.topk(k)` gives the same place).
_TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad", "values", "indices"})
# `torch.finfo(dtype).min` and its kin are Python numbers (`torch.tensor(...)` of one is 0-dim).
_NUMERIC_INFO = frozenset({"torch.finfo", "torch.iinfo", "numpy.finfo", "numpy.iinfo"})
_NUMERIC_LIMITS = frozenset({"min", "max", "eps", "tiny", "resolution", "bits", "smallest_normal"})
# Decorators that make a method read as an attribute (`self.device`).
_PROPERTY_DECORATORS = frozenset({"property", "functools.cached_property", "cached_property"})
# Fields of a model's output object (transformers' `ModelOutput`, diffusers' `UNet2DOutput`, DETR-style
# heads) that hold what the model computed: a device model's output keeps them on its device.
_OUTPUT_TENSOR_FIELDS = frozenset(
    {
        "logits",
        "last_hidden_state",
        "hidden_states",
        "pooler_output",
        "start_logits",
        "end_logits",
        "logits_per_image",
        "logits_per_text",
        "image_embeds",
        "text_embeds",
        "encoder_last_hidden_state",
        "pred_logits",
        "pred_boxes",
        "sample",
    }
)
# Lightning hooks whose first argument is a batch already on the module's device.
LIGHTNING_STEPS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
_MAX_LOOP_DEPTH = 3
_CONFIG_NAMES = frozenset(
    {
        "args",
        "opt",
        "opts",
        "cfg",
        "config",
        "conf",
        "hparams",
        "hp",
        "params",
        "settings",
        "options",
        "training_args",
        "train_args",
        "model",
        "net",
        "trainer",
        "accelerator",
        "self",
    }
)


# What a name holds where its `isinstance(name, nn.Module)` test fails: nothing known (its own
# object, so a path that binds the name again is told apart).
_NOT_A_MODULE = Fact(UNKNOWN)


class _Interpreter(CallEvaluation):
    def __init__(
        self,
        ctx: FileContext,
        analysis: FileAnalysis,
        scope: cst.CSTNode,
        cls: ClassFacts | None,
        bound: Env | None,
        depth: int,
    ) -> None:
        self.ctx = ctx
        self.analysis = analysis
        self.scope = scope
        self.cls = cls
        self.depth = depth
        name = scope.name.value if type(scope) is cst.FunctionDef else "<module>"
        self.result = ScopePlacement(node=scope, name=name, cls=cls)
        self.env: Env = {}
        # the value expression each plain name or `self.` attribute was last bound to, with the
        # fact it got then (`w = torch.tensor(weights)`), for readers that judge the expression itself
        self.bound_values: dict[str, tuple[cst.BaseExpression, Fact]] = {}
        self.bound = bound
        # a nested function's: what its enclosing function holds in the names it reads
        self.closure: Env = {}
        self.loop_depth = 0
        # how many `if`s on the device enclose the statement being read, and whether a return
        # sat inside one
        self._device_branches = 0
        self._returns_split_on_device = False
        self.seen: set[tuple[int, int, int]] = set()
        # what earlier `if`s left on each path, by test (branch_splits)
        self.splits: Splits = {}
        # each parameter's fact on entry, to tell assumed placements from derived ones
        self.params: Env = {}
        # names bound to another name's value, for `x = x.to(device)` to leave them behind
        self.aliases = Aliases()
        # where the module's own submodules and tensors are: on its device, except in code that
        # runs while the model is being built (nothing has been moved yet)
        building = cls is not None and type(scope) is cst.FunctionDef and analysis.construction_only(cls, scope)
        self.building = building
        # a module class the file only builds as a sample transform runs on host tensors
        self.host_transform = cls is not None and analysis.runs_as_transform(cls)
        self.own_place: str | None = None if building or self.host_transform else FOLLOWS
        # The name that holds the instance whose attributes `self.<attr>` are: `self` in a
        # method; in a helper handed one of a class's instances by every call followed here
        # (`_head(self, h)` into `def _head(model, h)`, a static or class method's `owner`),
        # that parameter, with `receiver_class` the class whose instance it is.
        self.receiver = "self"
        self.receiver_class: cst.ClassDef | None = None

    # -- entry -------------------------------------------------------------------------
    def run(self) -> ScopePlacement:
        scope = self.scope
        if type(scope) is cst.FunctionDef:
            self.env.update(self.closure)
            self._bind_params(scope)
            self.params = dict(self.env)
            accelerator = module_wide_accelerator_default(self.ctx)
            if accelerator is not None:
                # the script makes the accelerator the default for everything it runs
                self.env[DEFAULT_DEVICE_KEY] = Fact(
                    DEVICE_VALUE,
                    where=ACCELERATOR,
                    device_expr=f'"{accelerator}"',
                    device=DeviceId(accelerator, True, accelerator),
                )
            body = scope.body.body if type(scope.body) is cst.IndentedBlock else (scope.body,)
        else:
            body = scope.body  # type: ignore[attr-defined]  # not a function: the module
        self._block(body)
        self.result.facts = self.env
        return self.result

    def _bind_params(self, func: cst.FunctionDef) -> None:
        params = list(func.params.posonly_params) + list(func.params.params) + list(func.params.kwonly_params)
        if self.cls is not None or self._in_class(func):
            if params and params[0].name.value in ("self", "cls"):
                params = params[1:]
        for param in params if self.building and self.bound is None else ():
            # `__init__(self, devices=("cuda:0", "cuda:1"))`: the stages a caller that passes
            # nothing gets (elsewhere a default says too little about what callers pass)
            default = self._eval(param.default) if param.default is not None else UNKNOWN_FACT
            stated = flatten(default, func)
            if stated and all(
                f.kind == DEVICE_VALUE and f.device is not None and f.device.is_accelerator for f, _ in stated
            ):
                self.env[param.name.value] = default
        for param in params if self.bound is None else ():
            # `feature: OutputFeature`: an instance of a plain class of the file, whose methods
            # are followed with their arguments
            annotation = param.annotation.annotation if param.annotation is not None else None
            if type(annotation) is cst.Name and annotation.value in self.analysis.plain_classes:
                self.env[param.name.value] = Fact(UNKNOWN, instance=annotation.value)
            elif type(annotation) is cst.Name and annotation.value in ("int", "float", "bool"):
                self.env[param.name.value] = NUMBER  # `gain: float`: `torch.tensor(gain)` is 0-dim
        if self.bound is not None:
            star = func.params.star_arg
            for param in (*params, *([star] if type(star) is cst.Param else [])):
                self.env[param.name.value] = self.bound.get(param.name.value, UNKNOWN_FACT)
            # a plain instance's attributes as its construction left them (`_constructed_state`)
            self.env.update((key, fact) for key, fact in self.bound.items() if key.startswith("self."))
            return
        if self.building and func.name.value != "__init__":
            # a helper only `__init__` calls: a parameter no call passes holds its default
            always = self.analysis.defaults_always_used(func, skip_self=True)
            for param in params:
                if param.name.value in always and param.default is not None and constant_default(param.default):
                    self.env[param.name.value] = self._eval(param.default)
        if not self._follows_inputs(func):
            return
        if (
            params
            and self.cls is not None
            and func.name.value in LIGHTNING_STEPS
            and self.analysis.is_lightning(self.cls)
        ):
            # Lightning moves each batch to the module's device before `training_step` sees it.
            batch = params[0].name.value
            self.env[batch] = Fact(DEVICE, where=FOLLOWS, device_expr="self.device")
            self.result.device_params.append(batch)
            params = params[1:]
        evidence = self._tensor_evidence(func, {p.name.value for p in params})
        # What the function itself turns into NumPy arrays without a move is a host tensor.
        host = numpy_bound_parameters(self.ctx, func, {p.name.value for p in params})
        for param in params:
            name = param.name.value
            if name in evidence and used_as_settings(self.ctx, func, name):
                evidence.discard(name)  # `device=config.device` reads a setting, not a tensor's device
            if (annotation_is_tensor(param.annotation, self.ctx) or name in evidence) and name not in host:
                self.env[name] = Fact(DEVICE, where=FOLLOWS, device_expr=f"{name}.device")
                self.result.device_params.append(name)

    def _follows_inputs(self, func: cst.FunctionDef) -> bool:
        """Whether the function's tensor parameters may live on the device: module methods and
        plain functions do; methods of other classes (datasets, collators, trainers) and data
        preparation code are left alone."""
        if self.cls is not None:
            return not self.host_transform and not self.analysis.construction_only(self.cls, func)
        if self._in_class(func):
            # a plain loss class (`ComputeLoss.__call__(self, p, targets)`) is handed the model's
            # outputs and the batch's targets; other plain classes hold data, not device tensors
            owner = self.ctx.index.parent(self.ctx.index.parent(func) or func)
            return type(owner) is cst.ClassDef and names_a_loss(owner.name.value)
        if self._test_module():
            return False  # a test's helpers get the tensors the test builds, on the CPU unless it says
        name = func.name.value.lower()
        if any(word in name for word in DATA_WORDS):
            return False
        return not data_pipeline_path(self.ctx.path)

    def _test_module(self) -> bool:
        return self.ctx.shared(("defines_tests",), lambda ctx: defines_tests(ctx.path, ctx.module))

    def _in_class(self, func: cst.FunctionDef) -> bool:
        return type(self.ctx.index.parent(self.ctx.index.parent(func) or func)) is cst.ClassDef

    def _tensor_evidence(self, func: cst.FunctionDef, names: set[str]) -> set[str]:
        """Parameters that the body uses the way only a tensor is used (`x.size(1)`, `x.view(...)`),
        or passes to one of the class's submodules or to a helper that does."""
        return set(self.analysis.tensor_parameters(func, self.cls) & names)

    # -- statements --------------------------------------------------------------------
    def _block(self, body: Sequence[cst.CSTNode]) -> None:
        for stmt in body:
            self._statement(stmt)
            if type(stmt) is cst.If and always_leaves(stmt.body) and self._constant_test(stmt.test) is True:
                break  # `if not isinstance(key, torch.Tensor): continue`: the rest never runs

    def _statement(self, stmt: cst.CSTNode) -> None:
        if type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                self._small(small)
        elif type(stmt) is cst.If:
            self._if(stmt)
        elif isinstance(stmt, (cst.For, cst.While)):
            self._loop(stmt)
        elif type(stmt) is cst.With:
            for item in stmt.items:
                self._eval(item.item)
                if item.asname is not None:
                    self._bind(item.asname.name, UNKNOWN_FACT)
            self._suite(stmt.body)
        elif type(stmt) is cst.Try:
            splits = self.splits
            self._suite(stmt.body)
            for handler in stmt.handlers:
                # a handler may run before the body's `if`s did
                self.splits = common(splits, self.splits)
                self._suite(handler.body)
            if stmt.orelse is not None:
                self._suite(stmt.orelse.body)
            if stmt.finalbody is not None:
                self._suite(stmt.finalbody.body)
        elif type(stmt) is cst.IndentedBlock:
            self._block(stmt.body)

    def _suite(self, suite: cst.BaseSuite) -> None:
        if type(suite) is cst.IndentedBlock:
            self._block(suite.body)
        elif type(suite) is cst.SimpleStatementSuite:
            for small in suite.body:
                self._small(small)

    def _constant_test(self, test: cst.BaseExpression) -> bool | None:
        """The test's answer where it cannot vary: a constant, or a name tested against `None`
        that holds a tensor here (`if type_as is not None:` in a helper every call hands one)."""
        constant = constant_test(self.ctx, test)
        if constant is not None or type(test) is not cst.Comparison or len(test.comparisons) != 1:
            return constant
        target = test.comparisons[0]
        if not (type(target.comparator) is cst.Name and target.comparator.value == "None"):
            return None
        if type(target.operator) not in (cst.Is, cst.IsNot) or type(test.left) is not cst.Name:
            return None
        name = test.left.value
        held = self.env.get(name)
        if held is None or not held.is_tensor or is_handed(held) or held.where == FOLLOWS:
            return None  # (a tensor only presumed where the inputs are may be a caller's None)
        if self.bound is None and name in self._parameter_names():
            return None  # a parameter presumed a tensor in the function's own run: callers may pass None
        return type(target.operator) is cst.IsNot

    def _parameter_names(self) -> set[str]:
        if type(self.scope) is not cst.FunctionDef:
            return set()
        params = self.scope.params
        return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}

    def _if(self, stmt: cst.If) -> None:
        self._eval(stmt.test)
        constant = self._constant_test(stmt.test)
        if constant is None:
            constant = self._module_type_test(stmt.test)
        if constant is None:
            constant = through_not(stmt.test, self._tensor_type_test)
        if constant is None and stmt.orelse is None and _fills_missing_key(self.ctx, stmt):
            constant = True  # `if "buf" not in state: state["buf"] = ...`: after it, the entry is what it sets
        if constant is None and self.own_place is not None:
            constant = self._set_when_built(stmt.test)
        if constant is not None:  # a dict's key tested for a tensor: only one path ever runs
            if constant:
                self._suite(stmt.body)
            elif type(stmt.orelse) is cst.If:
                self._if(stmt.orelse)
            elif type(stmt.orelse) is cst.Else:
                self._suite(stmt.orelse.body)
            return
        strict = is_device_guard(stmt.test, self.ctx)
        if strict:
            self._device_branches += 1
            try:
                self._if_branches(stmt, strict)
            finally:
                self._device_branches -= 1
        else:
            self._if_branches(stmt, strict)

    def _tensor_type_test(self, test: cst.BaseExpression) -> bool | None:
        """`isinstance(n, torch.Tensor)` / `torch.is_tensor(n)` of a name that holds a tensor the
        code placed here (a caller's `torch.tensor(sizes)` handed to a helper that moves it only
        under that test): True; None when the code does not decide (a parameter only presumed a
        tensor may be a caller's list or int)."""
        name = any_tensor_test(self.ctx, test)
        held = self.env.get(name) if name is not None else None
        if name is None or held is None or not held.is_tensor or is_handed(held) or held.where == FOLLOWS:
            return None
        if self.bound is None and name in self._parameter_names():
            return None
        return True

    def _module_type_test(self, test: cst.BaseExpression) -> bool | None:
        """`isinstance(net, nn.Module)` of a value the analysis knows is a module: True (False for
        its `not`); None when the code does not decide."""
        subject = self._module_test_subject(test)
        if subject is None or self.env.get(subject[0], UNKNOWN_FACT).kind != MODULE:
            return None
        return subject[1]

    def _module_test_subject(self, test: cst.BaseExpression) -> tuple[str, bool] | None:
        """(`net`, True) for `isinstance(net, nn.Module)`, (`net`, False) for its `not`."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._module_test_subject(test.expression)
            return None if inner is None else (inner[0], not inner[1])
        if not (
            type(test) is cst.Call
            and type(test.func) is cst.Name
            and test.func.value == "isinstance"
            and len(test.args) == 2
            and type(test.args[0].value) is cst.Name
            and "isinstance" not in self.ctx.imports.bound
            and self.ctx.qualified_name(test.args[1].value) == "torch.nn.Module"
        ):
            return None
        return test.args[0].value.value, True

    def _set_when_built(self, test: cst.BaseExpression) -> bool | None:
        """`hasattr(self, "weights")` in code that runs after the model is built (a method
        `forward` reaches, not `__init__`): True when `__init__`, or a method of the class it
        calls, assigns `self.weights`, so only the path that finds it runs (a table regrown
        from `forward` and moved to the old table's device)."""
        return through_not(test, self._self_hasattr_set_when_built)

    def _self_hasattr_set_when_built(self, test: cst.BaseExpression) -> bool | None:
        if not (
            type(test) is cst.Call
            and type(test.func) is cst.Name
            and test.func.value == "hasattr"
            and len(test.args) == 2
            and type(test.args[0].value) is cst.Name
            and test.args[0].value.value == "self"
            and self.cls is not None
        ):
            return None
        attr = string_value(test.args[1].value)
        methods = self.cls.methods
        init = methods.get("__init__")
        if attr is None or init is None:
            return None
        setters = {
            name
            for name, method in methods.items()
            if any(
                type(n) is cst.AssignTarget
                and type(n.target) is cst.Attribute
                and n.target.attr.value == attr
                and type(n.target.value) is cst.Name
                and n.target.value.value == "self"
                for n in self.ctx.index.walk(method)
            )
        }
        called = {
            n.func.attr.value
            for n in self.ctx.index.walk(init.body)
            if type(n) is cst.Call
            and type(n.func) is cst.Attribute
            and type(n.func.value) is cst.Name
            and n.func.value.value == "self"
        }
        return True if "__init__" in setters or setters & called else None

    def _if_branches(self, stmt: cst.If, strict: bool) -> None:
        # an earlier `if` with the same test decided what this one's paths see (branch_splits)
        key = None if strict else test_key(self.ctx, stmt.test)
        # the path where `isinstance(net, nn.Module)` fails runs with a `net` that is no module:
        # whatever moved value it held elsewhere (`net(X)` there calls a plain function)
        narrowed = self._module_test_subject(stmt.test)
        before, splits_before = dict(self.env), self.splits
        self.splits = dict(splits_before)
        if key is not None:
            assume(self.splits, key[0], key[1], self.env)
        self._not_a_module(narrowed, False)
        self._suite(stmt.body)
        self._restore_unless_rebound(narrowed, False, before)
        after_body, body_splits = self.env, self.splits
        self.env, self.splits = dict(before), dict(splits_before)
        if key is not None:
            assume(self.splits, key[0], not key[1], self.env)
        self._not_a_module(narrowed, True)
        if type(stmt.orelse) is cst.If:
            self._if(stmt.orelse)
        elif type(stmt.orelse) is cst.Else:
            self._suite(stmt.orelse.body)
        self._restore_unless_rebound(narrowed, True, before)
        after_else = self.env
        self.env = join_envs(after_body, after_else, strict, branches=True)
        if strict:
            # `if torch.cuda.is_available(): model.cuda()`, `if args.cuda_device >= 0:
            # model.cuda()`: on the path that moves it the module is on the GPU, where whatever
            # the code hands it unmoved on every path fails; a tensor only under a test that
            # asks the machine (a user's flag may keep tensors apart on purpose)
            available = tests_availability(self.ctx, stmt.test)
            for name in after_body.keys() & after_else.keys():
                before_join = after_body[name], after_else[name]
                on_gpu = module_on_gpu_branch(*before_join) or (
                    tensor_on_gpu_branch(*before_join) if available else None
                )
                if on_gpu is not None:
                    self.env[name] = on_gpu
        self.splits = common(body_splits, self.splits)
        if key is not None:
            self._split(stmt, key, after_body, after_else)

    def _not_a_module(self, narrowed: tuple[str, bool] | None, positive: bool) -> None:
        """Forget what `name` held on the path where its `isinstance(..., nn.Module)` test fails
        (`positive`: the test as written holds on the other path)."""
        if narrowed is not None and narrowed[1] == positive and narrowed[0] in self.env:
            self.env[narrowed[0]] = _NOT_A_MODULE

    def _restore_unless_rebound(self, narrowed: tuple[str, bool] | None, positive: bool, before: Env) -> None:
        """After that path, `name` holds what it held before unless the path bound it again."""
        if narrowed is not None and narrowed[1] == positive and self.env.get(narrowed[0]) is _NOT_A_MODULE:
            self.env[narrowed[0]] = before[narrowed[0]]

    def _split(self, stmt: cst.If, key: tuple[str, bool], after_body: Env, after_else: Env) -> None:
        """Remember what each path of `stmt` left; where one path leaves the block (`if not
        t: return x`), what follows runs on the other: an earlier split of the same test's
        names have that path's facts."""
        text, positive = key
        body_leaves = always_leaves(stmt.body)
        else_leaves = type(stmt.orelse) is cst.Else and always_leaves(stmt.orelse.body)
        if body_leaves != else_leaves:
            earlier = self.splits.pop(text, None)
            staying = after_else if body_leaves else after_body
            for name in earlier.joined if earlier is not None else ():
                self.env[name] = staying.get(name, UNKNOWN_FACT)
            return
        held, failed = (after_body, after_else) if positive else (after_else, after_body)
        record(self.splits, text, reads_of(self.ctx, stmt.test), held, failed, self.env)

    def _loop(self, stmt: cst.For | cst.While) -> None:
        if isinstance(stmt, cst.For):
            iterable = self._eval(stmt.iter)
            self._release_iterated(iterable, stmt.iter)
        else:
            self._eval(stmt.test)
        before, splits = dict(self.env), self.splits
        self.loop_depth += 1
        passes = 2 if self.loop_depth <= _MAX_LOOP_DEPTH else 1
        for _ in range(passes):
            # a split made in one pass says nothing of the next pass's tests, and one whose
            # test the body re-binds says nothing from the second pass on
            self.splits = dict(splits)
            if type(stmt) is cst.For:
                self._bind_loop_target(stmt, iterable)
            self._suite(stmt.body)
            self.env = join_envs(before, self.env, strict=False)
            splits = common(splits, self.splits)
        self.splits = splits
        self.loop_depth -= 1
        if stmt.orelse is not None:
            self._suite(stmt.orelse.body)

    def _bind_loop_target(self, stmt: cst.For | cst.CompFor, iterable: Fact) -> None:
        target = stmt.target
        source = stmt.iter
        # enumerate(loader) / tqdm(loader) / iter(loader)
        if type(source) is cst.Call and isinstance(source.func, (cst.Name, cst.Attribute)) and source.args:
            wrapper = source.func.value if isinstance(source.func, cst.Name) else source.func.attr.value
            if wrapper == "enumerate" and type(target) is cst.Tuple and len(target.elements) == 2:
                self._bind(target.elements[0].value, UNKNOWN_FACT)
                inner = source.args[0].value
                if self._loader_inner(inner):
                    self._bind_batch(target.elements[1].value, True)
                else:  # `enumerate(self.layers)`, `enumerate(tqdm(prepared))`: their elements
                    self._bind(target.elements[1].value, _element_of(self._fact_of(_progress_unwrapped(inner))))
                return
            if wrapper in ("tqdm", "iter"):
                inner = source.args[0].value
                if self._loader_inner(inner):
                    self._bind_batch(target, True)
                else:  # `tqdm(prepared_loader)`: what the loader itself yields
                    self._bind(target, _element_of(self._fact_of(_progress_unwrapped(inner))))
                return
            if wrapper == "zip" and type(target) is cst.Tuple and len(target.elements) == len(source.args):
                # `for seq, length in zip(padded, lengths)`: each target takes an element of its own
                for element, arg in zip(target.elements, source.args):
                    self._bind(element.value, _element_of(self._fact_of(arg.value)))
                return
        if self._is_loader(source, iterable):
            self._bind_batch(target, True, self._plain_parts(source))
            return
        entries = self._mapping_part(source)
        if entries is not None:
            # `for k, t in batch.items()`, `for t in feats.values()` of a dict whose entries agree
            method, part = entries
            if method == "items" and type(target) is cst.Tuple and len(target.elements) == 2:
                self._bind(target.elements[0].value, UNKNOWN_FACT)
                self._bind(target.elements[1].value, part)
                return
            if method == "values":
                self._bind(target, part)
                return
        self._bind(target, _element_of(iterable))

    def _plain_parts(self, source: cst.BaseExpression) -> set[tuple[int, ...]]:
        """The parts of a batch that the loader's `collate_fn` of the file builds as plain lists
        (`collate_outputs.plain_list_parts`), for a loader built by a `DataLoader(...)` call bound
        once to the looped name."""
        loader = only_binding(self.ctx, source.value, source) if type(source) is cst.Name else source
        if type(loader) is not cst.Call:
            return set()
        return plain_list_parts(self.ctx, loader, self.analysis.functions)

    def _mapping_part(self, source: cst.BaseExpression) -> tuple[str, Fact] | None:
        """What every entry of `d.items()`/`d.values()` is, where `d` is a tokenizer's encoding, a
        loader's dict batch, or a dict of string keys whose entries the code states and all are
        alike (host batch tensors, device tensors)."""
        if not (
            type(source) is cst.Call
            and type(source.func) is cst.Attribute
            and source.func.attr.value in ("items", "values")
            and not source.args
        ):
            return None
        method = source.func.attr.value
        mapping = self._fact_of(source.func.value)
        if (mapping.encoded or mapping.batch and mapping.kind == UNKNOWN) and mapping.fields is None:
            # a tokenizer's `return_tensors="pt"` encoding, a loader's dict batch: host tensors
            return method, Fact(CPU, where="cpu", origin=mapping.origin, batch=True, encoded=mapping.encoded)
        parts = [fact for _, fact in mapping.fields or ()]
        if not parts or any(
            (fact.kind, fact.where, fact.batch) != (parts[0].kind, parts[0].where, parts[0].batch) for fact in parts
        ):
            return None
        return (method, parts[0]) if parts[0].is_tensor else None

    def _loader_inner(self, node: cst.BaseExpression) -> bool:
        if type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in ("tqdm", "iter") and node.args:
            return self._loader_inner(node.args[0].value)
        return self._is_loader(node, self._fact_of(node))

    def _is_loader(self, node: cst.BaseExpression, fact: Fact) -> bool:
        if fact == LOADER:
            return True
        if type(node) is cst.Call:
            # Only `DataLoader(...)` itself: wrappers (`DeviceDataLoader(...)`) may move batches.
            return False
        if type(node) is cst.Name and node.value in self.env and not self._handed_input(node.value):
            return False
        if self.analysis.custom_loaders:
            return False
        iterable = node
        while type(node) is cst.Subscript:  # `loaders["train"]`, `self.dataloaders[phase]`
            node = node.value
        last = node.attr.value if type(node) is cst.Attribute else node.value if type(node) is cst.Name else ""
        return "loader" in last.lower() or self._moves_its_targets(iterable)

    def _handed_input(self, name: str) -> bool:
        """A parameter the followed call handed the caller's own untouched input, still as it
        came (`placement_calls.handed_input`): read as the function's own analysis reads it."""
        value = self.env[name]
        return self.bound is not None and is_handed(value) and self.bound.get(name) is value

    def _moves_its_targets(self, iterable: cst.BaseExpression) -> bool:
        """A loop over a value the file does not show that moves what it yields to the
        accelerator (`for a, b in pairs: a, b = a.to(device), b.to(device)`) iterates host
        batches, whatever the iterable is called."""
        loop = self.ctx.index.parent(iterable)
        for _ in range(3):  # `enumerate(pairs)`, `tqdm(pairs)`, `enumerate(tqdm(pairs))`
            if type(loop) is not cst.Arg:
                break
            loop = self.ctx.index.parent(self.ctx.index.parent(loop) or loop)
        return type(loop) is cst.For and moves_what_it_yields(self.ctx, loop)

    def _bind_batch(
        self,
        target: cst.BaseExpression,
        is_batch: bool,
        plain: AbstractSet[tuple[int, ...]] = frozenset(),
        path: tuple[int, ...] = (),
    ) -> None:
        if not is_batch or sets_default_device_off_cpu(self.ctx) or path in plain:
            # (under a default device other than the CPU a loader's batches are what its dataset
            # builds, tensors on that default: not known to be on the host; a part the collate
            # function builds as a plain list is no tensor)
            self._bind(target, UNKNOWN_FACT)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                part = (*path, i)
                if isinstance(element.value, (cst.Tuple, cst.List)) and any(p[: len(part)] == part for p in plain):
                    self._bind_batch(element.value, True, plain, part)
                elif part in plain:
                    self._bind(element.value, UNKNOWN_FACT)
                else:
                    self._bind(element.value, Fact(CPU, where="cpu", origin=element.value, batch=True))
        else:
            # The whole batch may be a dict, a list or a BatchEncoding: only its parts are tensors.
            self._bind(target, Fact(UNKNOWN, origin=target, batch=True))

    def _small(self, small: cst.CSTNode) -> None:
        if type(small) is cst.Assign:
            moved = moved_in_place(small)
            before = self.env.get(moved[0], UNKNOWN_FACT) if moved is not None else UNKNOWN_FACT
            fact = self._eval(small.value)
            stale = {}
            if moved is not None:
                name, move = moved
                placed = fact if move is small.value else self._fact_of(move)
                if on_accelerator(placed) or self._to_own_device(move, placed):
                    stale = self.aliases.stale_after_move(name, before, self.env)
            if (
                type(small.value) is cst.Call
                and self._is_loader(small.value, fact)
                and type(small.value.func) is not cst.Attribute
            ):
                fact = LOADER
            for target in small.targets:
                if type(target.target) is cst.Subscript:
                    self._write(target.target, fact, small.value)
                if not self._tracks(target.target):
                    self.env = released(self.env, hosted_in(fact))  # `trainer.model = model`
                self.env = released(self.env, self._weights_replaced(target.target, fact, small.value))
                self._bind(target.target, fact, small.value)
            self.env.update(stale)  # `prompt = x` before `x = x.to(device)` still holds the CPU copy
            if len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
                name = small.targets[0].target.value
                self.aliases.bind(small, name, self.env.get(name, UNKNOWN_FACT))
        elif type(small) is cst.AnnAssign:
            if small.value is not None:
                self._bind(small.target, self._eval(small.value), small.value)
        elif type(small) is cst.AugAssign:
            self._aug_assign(small)
        elif type(small) is cst.Expr:
            self._expression_statement(small.value)
        elif type(small) is cst.Return:
            if small.value is not None:
                self._return(small.value)
        elif isinstance(small, (cst.Assert,)):
            self._eval(small.test)

    def _weights_replaced(self, target: cst.BaseExpression, fact: Fact, value: cst.BaseExpression) -> list[Fact]:
        """The host module whose weights a store swaps for tensors of unknown place
        (`cell.weight_hh.data = gru.weight_hh_l0.data`, `head.weight = embed.weight`): its
        parameters are then wherever those tensors are, so its place is no longer known. A
        literal (`net.training = False`), a CPU tensor or a module built here on the host
        (`backbone.fc = nn.Identity()`) stored there leaves it on the host."""
        if type(target) is not cst.Attribute or fact.kind == CPU or is_host_module(fact) or _literal(value):
            return []
        if fact.kind == MODULE and fact.factory in PARAMETER_FREE_MODULES:
            return []
        root = root_key(target)
        held = self.env.get(root) if root is not None else None
        return [held] if held is not None and is_host_module(held) else []

    def _to_own_device(self, move: cst.BaseExpression, fact: Fact) -> bool:
        """`x = x.to(self.weight.device)` in a module's method: moved to wherever the module is."""
        if self.cls is None or fact.kind != DEVICE or fact.where != FOLLOWS or type(move) is not cst.Call:
            return False
        return any(
            (arg.keyword is None or arg.keyword.value == "device") and self._fact_of(arg.value).kind == DEVICE_VALUE
            for arg in move.args
        )

    def _expression_statement(self, value: cst.BaseExpression) -> None:
        fact = self._eval(value)
        # `model.to(device)` moves a module in place; for a tensor it does nothing (DL104).
        if move_call(value) is not None:
            receiver = value.func.value  # type: ignore[attr-defined]  # move_call() matched `x.<method>(...)`: func is an Attribute
            key = self._key(receiver)
            held = self._fact_of(receiver)
            if key is not None and not held.is_tensor:
                where = fact.where if fact.where in (ACCELERATOR, "cpu") else None
                # The same module, moved: it keeps what it is (`DataParallel(m)` then `net.cuda()`
                # is still the wrapper that scatters its inputs), only its place changes.
                kept = held if held.kind == MODULE else Fact(MODULE)
                self.env[key] = replace(kept, where=where, device_expr=fact.device_expr, device=fact.device)

    def _write(self, target: cst.Subscript, value: Fact, value_node: cst.BaseExpression) -> None:
        """`scores[rows] = cpu_tensor` into a device tensor: advanced indexing (`index_put_`)
        needs the written values on the destination's device."""
        destination = self._eval(target.value)
        if not devicey(destination):
            return
        if type(target.value) is cst.Name and destination is self.params.get(target.value.value):
            return  # a parameter only assumed to be on the device: copying into it is fine
        # A CPU index tensor or boolean mask is fine (PyTorch moves it); the written values are not.
        advanced = False
        for element in target.slice:
            if type(element.slice) is cst.Index:
                index = self._eval(element.slice.value)
                advanced = advanced or _advanced_index(element.slice.value, index)
        # Basic indexing alone (integers, slices, `...`, `None`) writes through a view with
        # `copy_`, which copies across devices: `out[0, :2] = torch.tensor([1, 2])` is fine.
        if advanced and cpu_side(value, allow_scalar=False) and compatible(value, destination):
            self._record(value, value_node, destination, target.value, target, "op")

    def _return(self, value: cst.BaseExpression) -> None:
        fact = self._eval(value)
        # Returns on paths chosen by the device (`if src.type == "cuda": return copy(t)`) decide
        # together: a CPU tensor returned on one of them is not the helper's answer.
        self._returns_split_on_device = self._returns_split_on_device or self._device_branches > 0
        self.result.returns = (
            fact
            if self.result.returns is None
            else join(self.result.returns, fact, strict=self._returns_split_on_device)
        )
        if (
            self.cls is not None
            and self.result.name == "forward"
            and self.bound is None
            and not self.host_transform
            and (self.cls.submodules or self.cls.registered)
        ):
            moved_here = self._moved_in_scope()
            for element, node in flatten(fact, value):
                # host copies gathered (`torch.cat` of what `.cpu()` made on the forward's own
                # path) are on the host by the forward's choice, as a tensor it moves itself is
                gathered = (element.factory or "").rsplit(".", 1)[-1] in GATHERING_FUNCTIONS
                if element.from_factory and not element.scalar and not gathered and _root_name(node) not in moved_here:
                    self._record(element, node, Fact(DEVICE, where=FOLLOWS), None, value, "return")

    def _moved_in_scope(self) -> set[str]:
        """Names `forward` itself moves to the accelerator, whole or in part
        (`ids[:, 1].long().to(feats.device)`): kept on the host knowingly, so returning them as
        they are is the author's choice (a CPU index table a later step moves)."""
        found: set[str] = set()
        for node in self.ctx.index.walk(self.scope):
            if type(node) is cst.Call and moves_to_accelerator(node):
                root = _root_name(node.func.value)  # type: ignore[attr-defined]  # a move is `x.<method>(...)`
                if root is not None:
                    found.add(root)
        return found

    def _aug_assign(self, node: cst.AugAssign) -> None:
        target = self._eval(node.target)
        value = self._eval(node.value)
        if (
            target.kind == CPU
            and (target.from_factory or target.batch)
            and devicey(value)
            and compatible(target, value)
        ):
            self._record(target, node.target, value, node.value, node, "inplace")
            result = target
        elif devicey(target) and cpu_side(value, allow_scalar=False) and compatible(value, target):
            # `mask &= torch.arange(n) < limit`: the CPU operand meets the device target.
            self._record(value, node.value, target, node.target, node, "op")
            result = target
        elif target == NUMBER and value == NUMBER:
            result = NUMBER  # `correct += (pred == y).sum().item()`: a running count stays a number
        elif (
            type(node.operator) is cst.AddAssign
            and (target == PY_DATA or target.elements == ())
            and (_arithmetic_list(node.value) or is_python_data(value))
        ):
            result = PY_DATA  # `rows = []; rows += [x, y, w, h]`: a list of numbers, host data
        elif target.kind == UNKNOWN and target.where != ACCELERATOR:
            # `r = keep_prob; r += torch.rand(n)`: a number (or any host value) plus a host tensor the
            # code builds is that tensor; a device target would fail at this very line
            built_here = value.kind == CPU and value.from_factory and not value.scalar
            result = value if devicey(value) or built_here else UNKNOWN_FACT
        elif target.kind == CPU and value.kind not in (CPU,) and value != NUMBER:
            result = UNKNOWN_FACT if not devicey(value) else target
        else:
            result = target
        self._bind(node.target, result)

    # -- binding -----------------------------------------------------------------------
    def _key(self, node: cst.BaseExpression) -> str | None:
        if type(node) is cst.Name:
            return node.value
        attr = self.receiver_attribute(node)
        return f"self.{attr}" if attr is not None else None

    def _stated(self, attr: str) -> Fact | None:
        """`self.<attr>` as the class's other methods state it (`__init__` first)."""
        if type(self.scope) is not cst.FunctionDef:
            return None
        return self.analysis.stated_attribute(self.scope, attr, self.receiver_class)

    def _buffer_left_on_host(self, attr: str) -> Fact | None:
        """A buffer made on the CPU by a constructor that ignores the default device
        (`torch.from_numpy(w)`) in a module that a file-wide accelerator default places, which
        nothing in the file moves: the default placed its parameters, not that buffer."""
        cls = self.cls
        registered = cls.buffer_values.get(attr) if cls is not None else None
        if cls is None or registered is None or self.building or module_wide_accelerator_default(self.ctx) is None:
            return None
        value, method = registered
        if method is self.scope or self.analysis.instances_moved():
            return None
        fact = self.analysis.scope(method).expr_facts.get(id(value))
        return fact if fact is not None and fact.kind == CPU and fact.from_factory else None

    def own_submodule(self, attr: str) -> Fact:
        """A submodule of this class: where the module is, on the device `__init__` states."""
        stated = self._stated(attr)
        device = stated.device if stated is not None and stated.kind == MODULE else None
        # `self.dec = Dec().to("cuda:1")` is on cuda:1 even before (or without) the model's move
        where = stated.where if stated is not None and device is not None else self.own_place
        return Fact(MODULE, where=where, factory=self.cls.submodules[attr], device=device)  # type: ignore[union-attr]  # own submodules exist in a class only

    def _placed_inherited(self, attr: str) -> Fact | None:
        stated = self._stated(attr)
        if stated is None or stated.kind != MODULE or stated.device is None:
            return None
        return Fact(MODULE, where=stated.where, device=stated.device, device_expr=stated.device_expr)

    def _module_device(self, name: str) -> Fact | None:
        """A device constant of the module's top-level code (`DEV1 = "cuda:1"`), read in a function;
        also a settings record, a loader, or a host tensor it builds at import."""
        if type(self.scope) is cst.Module:
            return None
        fact = self.analysis.module_env().get(name)
        if fact is not None and fact.fields is not None and fact.kind == UNKNOWN and not fact.batch:
            return fact  # a settings record built at import (`CONFIG = RunConfig()`)
        if fact == LOADER and type(self.scope) is cst.FunctionDef and name not in self.analysis.local_names(self.scope):
            return fact  # a `DataLoader(...)` built at import, whatever it is called: it yields host batches
        if (
            fact is not None
            and fact.kind == CPU
            and fact.from_factory
            and not fact.scalar
            and type(self.scope) is cst.FunctionDef
            and name not in self.analysis.local_names(self.scope)
        ):
            return fact  # `MEAN = torch.tensor([...]).view(3, 1, 1)` built at import, on the host
        if (
            fact is not None
            and is_host_module(fact)
            and type(self.scope) is cst.FunctionDef
            and name not in self.analysis.local_names(self.scope)
            and kept_at_import(self.ctx, name)
        ):
            return fact  # `new_model = AutoModel.from_pretrained(path)` at import, that no function moves
        return fact if fact is not None and fact.kind == DEVICE_VALUE and fact.device is not None else None

    def _imported_constant(self, spelled: str, node: cst.BaseExpression) -> Fact | None:
        """A host tensor another module of the project builds at import (`MEAN` after `from
        .transforms import MEAN`, `T.MEAN` after `import transforms as T`), read in a function
        where the name is not bound again."""
        head = spelled.split(".", 1)[0]
        if type(self.scope) is not cst.FunctionDef or head in self.analysis.local_names(self.scope):
            return None
        factory, _, _ = self.ctx.project.host_constants[spelled]
        return Fact(CPU, origin=node, factory=factory)

    def _settings_param(self, name: str) -> bool:
        """A parameter typed as a settings object (`opts: argparse.Namespace`): its `.device` is a
        setting, not a tensor's device."""
        if type(self.scope) is not cst.FunctionDef or name in self.env:
            return False
        params = self.scope.params
        param = next(
            (p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == name), None
        )
        return param is not None and (
            annotation_is_settings(param.annotation) or used_as_settings(self.ctx, self.scope, name)
        )

    def _device_holder_param(self, name: str) -> bool:
        """A parameter of `__init__` kept whole on the instance and read only for its `.device`
        (`placement_values.kept_device_holder`)."""
        if type(self.scope) is not cst.FunctionDef or name in self.env and self.env[name] != UNKNOWN_FACT:
            return False
        return kept_device_holder(self.ctx, self.scope, name)

    def _module_level(self, name: str) -> bool:
        """A name a function reads from the module's top-level code (a settings object, a
        pipeline, an imported module), not one of its own: it holds no tensor of the function's."""
        if type(self.scope) is not cst.FunctionDef or name in self.env:
            return False
        return name in self.analysis.module_env() and name not in self.analysis.local_names(self.scope)

    def _bind(self, target: cst.BaseExpression, fact: Fact, value: cst.BaseExpression | None = None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = target.elements
            if (
                fact.elements is not None
                and len(fact.elements) == len(elements)
                and not any(type(e) is cst.StarredElement for e in elements)
            ):
                for element, sub in zip(elements, fact.elements):
                    self._bind(element.value, sub)
            elif fact.alike and fact.elements and len(fact.elements) == 1:
                # `h, c = list(state)`, `a, b = pair_list` of like elements: each is one of them
                for element in elements:
                    self._bind(element.value, UNKNOWN_FACT if type(element) is cst.StarredElement else fact.elements[0])
            elif fact.batch:
                self._bind_batch(target, True)
            elif fact.kind == UNKNOWN and fact.where == ACCELERATOR and fact.elements is None and fact.fields is None:
                # a batch of a prepared loader: each part is a tensor on the device
                for element in elements:
                    self._bind(element.value, Fact(DEVICE, where=ACCELERATOR))
            elif fact.is_tensor:
                # `q, k, v = qkv.chunk(3)`: the pieces of a tensor live where it lives
                guessed = self._opaque_call(value)
                for element in elements:
                    self._bind(element.value, replace(fact, scalar=False, guessed=guessed))
            else:
                for element in elements:
                    self._bind(element.value, UNKNOWN_FACT)
            return
        if type(target) is cst.StarredElement:
            self._bind(target.value, UNKNOWN_FACT)
            return
        if type(target) is cst.Subscript:
            self._bind_part(target, fact)
            return
        key = self._key(target)
        if key is not None:
            self.env[key] = fact
            if value is not None:
                self.bound_values[key] = (value, fact)
            else:
                self.bound_values.pop(key, None)
            if self.splits:
                forget_reads_of(self.splits, key)
            self.aliases.rebound(key)

    def _opaque_call(self, value: cst.BaseExpression | None) -> bool:
        """`preds, caps, lengths, order = decoder(x, caps, lens)` where `decoder` is a callable
        the engine cannot place, or a module of no class the file shows (handed in, built by a
        builder): the call is guessed to compute on its inputs' device, but what each part of the
        tuple it returns is (a tensor, a list of lengths, an index) the engine cannot tell: each
        part is placed there as a guess (`Fact.guessed`)."""
        if type(value) is not cst.Call or type(value.func) not in (cst.Name, cst.Attribute):
            return False
        func = value.func
        if self.ctx.qualified_name(func) is not None:
            return False  # an imported or builtin function: its results come from elsewhere
        key = self._key(func)
        callee = self.env.get(key, UNKNOWN_FACT) if key is not None else UNKNOWN_FACT
        if callee.kind == MODULE:
            # a module of no class the file shows (`decoder` handed in, `build_model(cfg)`)
            return callee.factory is None
        placed_only = replace(callee, where=None, device_expr=None, device=None)
        # nothing known of it, or only where it was moved (`decoder = decoder.to(device)`)
        return placed_only == UNKNOWN_FACT and type(func) is cst.Name and func.value not in self.analysis.functions

    def _bind_part(self, target: cst.Subscript, fact: Fact) -> None:
        """`out["mask"] = t` on a dict whose parts are known: that part is now `t`."""
        owner = self._key(target.value)
        current = self.env.get(owner) if owner is not None else None
        if owner is not None and current in (None, UNKNOWN_FACT) and type(target.value) is cst.Name and fact.is_tensor:
            # `state = self.state[p]; state["buf"] = torch.zeros(...)`: a mapping the code holds
            # nothing else about now has this entry (any other key stays unknown)
            key = _single_string_key(target)
            if key is not None:
                self.env[owner] = Fact(UNKNOWN, fields=((key, fact),))
            return
        if owner is None or current is None:
            return
        if (
            (current.encoded or current.batch and current.kind == UNKNOWN)
            and current.fields is None
            and current.elements is None
            and devicey(fact)
        ):
            # `inputs[key] = inputs[key].to(dev)` (in a loop over its keys, or its one key by name):
            # a batch whose entries the code moves one by one is no longer a whole unmoved batch.
            self.env[owner] = UNKNOWN_FACT
            return
        index = target.slice[0].slice if len(target.slice) == 1 else None
        if current.batch and current.fields is None and current.elements is None:
            # `batch["image"] = batch["image"].to(device)`, `batch[k] = batch[k].cuda()` over its
            # keys: the loader's batch is changed in place, its parts are no longer as they came
            key = string_value(index.value) if type(index) is cst.Index else None
            self.env[owner] = Fact(UNKNOWN, fields=((key, fact),)) if key is not None else UNKNOWN_FACT
            return
        if current.elements is not None and current.fields is None:
            # `outs[0] = t` into a list whose elements are known: that element is now `t`
            self.env[owner] = _written_element(current, index.value if type(index) is cst.Index else None, fact)
            return
        if current.fields is None:
            return
        key = string_value(index.value) if type(index) is cst.Index else None
        self.env[owner] = current.with_field(key, fact) if key is not None else UNKNOWN_FACT

    # -- expressions -------------------------------------------------------------------
    def _fact_of(self, node: cst.CSTNode) -> Fact:
        return self.result.expr_facts.get(id(node), UNKNOWN_FACT)

    def _eval(self, node: cst.CSTNode) -> Fact:
        fact = self._eval_inner(node)
        if fact is not UNKNOWN_FACT and fact != UNKNOWN_FACT:
            self.result.expr_facts[id(node)] = fact
        return fact

    def _eval_inner(self, node: cst.CSTNode) -> Fact:
        if type(node) is cst.Name:
            if node.value in self.env:
                return self.env[node.value]
            constant = self._module_device(node.value)
            if constant is None and node.value in self.ctx.project.host_constants:
                constant = self._imported_constant(node.value, node)
            if constant is not None:
                return constant
            if looks_like_device_name(node.value) or (
                type(self.scope) is cst.FunctionDef and node.value in self.analysis.device_parameters(self.scope)
            ):
                return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=node.value)
            return UNKNOWN_FACT
        if type(node) is cst.Call:
            fact = self._call(node)
            self._release_handed(node, fact)
            if is_host_module(fact) and under_placing_context(self.ctx, node, self.scope):
                fact = Fact(MODULE, factory=fact.factory)  # `with torch.device("cuda"): model = build()`
            if fact == UNKNOWN_FACT and _returns_torch_tensors(node):
                return Fact(UNKNOWN, origin=node, encoded=True)  # `tokenizer(texts, return_tensors="pt")`
            return fact
        if type(node) is cst.Attribute:
            return self._attribute(node)
        if type(node) in (cst.Integer, cst.Float, cst.Imaginary):
            return NUMBER
        if type(node) is cst.SimpleString:
            text = string_value(node)
            return (device_string_fact(text) if text else None) or UNKNOWN_FACT
        if type(node) is cst.FormattedString:
            device = literal_device(self.ctx, node)  # `f"cuda:{rank}"`: a CUDA device, index unknown
            return (
                Fact(
                    DEVICE_VALUE,
                    where=ACCELERATOR,
                    device_expr=self.ctx.code_for(node),
                    device=device,
                    spelled="string",
                )
                if device is not None
                else UNKNOWN_FACT
            )
        if type(node) is cst.BinaryOperation:
            return self._binary(node, self._eval(node.left), self._eval(node.right), node.left, node.right)
        if type(node) is cst.Comparison:
            return self._comparison(node)
        if type(node) is cst.UnaryOperation:
            fact = self._eval(node.expression)
            if type(node.operator) is cst.Not:
                return UNKNOWN_FACT
            return fact if fact.is_tensor or fact == NUMBER else UNKNOWN_FACT
        if type(node) is cst.BooleanOperation:
            left, right = self._eval(node.left), self._eval(node.right)
            if type(node.operator) is cst.Or and right.kind == DEVICE_VALUE and left.kind in (DEVICE_VALUE, UNKNOWN):
                # `device or ("cuda:0" if ... else "cpu")`: the caller's device, else the default,
                # as `device if device is not None else ...` reads
                return join(left, right, False, branches=True)
            return UNKNOWN_FACT
        if type(node) is cst.Subscript:
            return self._subscript(node)
        if type(node) is cst.IfExp:
            self._eval(node.test)
            body, orelse = self._eval(node.body), self._eval(node.orelse)
            moved = _tensor_branch(self.ctx, node, body, orelse)
            if moved is not None:
                return moved
            guarded = is_device_guard(node.test, self.ctx)
            if guarded and (on_gpu := _moved_under_flag(node, body, orelse)) is not None:
                return on_gpu
            return join(body, orelse, guarded, branches=True)
        if isinstance(node, (cst.Tuple, cst.List)):
            facts = tuple(
                self._eval(e.value) if type(e) is not cst.StarredElement else UNKNOWN_FACT for e in node.elements
            )
            last = node.elements[-1] if node.elements else None
            if type(last) is cst.StarredElement and not any(type(e) is cst.StarredElement for e in node.elements[:-1]):
                # `(prompt, *sampled)`: a list of known parts spread at the end adds its parts (the
                # positions before it stay right)
                spread = self._eval(last.value).elements
                if spread:
                    facts = facts[:-1] + spread
            return Fact(UNKNOWN, elements=facts)
        if isinstance(node, (cst.ListComp, cst.DictComp, cst.GeneratorExp)):
            return self._comprehension(node)
        if type(node) is cst.Dict:
            parts = []
            for element in node.elements:
                fact = self._eval(element.value)
                key = string_value(element.key) if type(element) is cst.DictElement else None
                parts.append((key, fact))
            if all(key is not None for key, _ in parts):
                return Fact(UNKNOWN, fields=tuple(parts))  # type: ignore[arg-type]  # all() above: no key is None
            return UNKNOWN_FACT
        if type(node) is cst.NamedExpr:
            fact = self._eval(node.value)
            self._bind(node.target, fact)
            return fact
        return UNKNOWN_FACT

    def _comprehension(self, node: cst.ListComp | cst.DictComp | cst.GeneratorExp) -> Fact:
        """A list of tensors where the element is one (`[torch.arange(n) for n in sizes]`,
        `{k: v.to(device) for k, v in batch.items()}`), else plain Python data. The loop
        variables shadow the function's names only inside."""
        outer = self.env
        self.env = dict(outer)
        try:
            clause: cst.CompFor | None = node.for_in
            while clause is not None:
                iterable = self._eval(clause.iter)
                self._release_iterated(iterable, clause.iter)
                # `[self.model(b) for b in batches]`: the loop variable is what a `for` gives
                self._bind_loop_target(clause, iterable)
                for condition in clause.ifs:
                    self._eval(condition.test)
                clause = clause.inner_for_in
            element = self._eval(node.value if isinstance(node, cst.DictComp) else node.elt)
        finally:
            self.env = outer
        if type(node) is cst.DictComp and moved_there(element):
            # `{k: v.to(device) for k, v in batch.items()}`: a batch whose every entry was moved,
            # each a tensor there
            element = Fact(DEVICE, where=ACCELERATOR, device_expr=element.device_expr, device=element.device)
        if element.is_tensor or devicey(element):
            return Fact(UNKNOWN, elements=(element,), alike=True)
        return PY_DATA if type(node) is cst.ListComp else UNKNOWN_FACT

    def _plain_instance_tensor(self, receiver: Fact, attr: str) -> Fact | None:
        """`fetcher.y_test` of `fetcher = Fetcher(...)`, a plain class of the file whose
        `__init__` alone sets `self.y_test` to a host tensor it builds and nothing in the class
        moves or rewrites it: that tensor, on the CPU wherever the instance is read."""
        methods = self.analysis.plain_classes.get(receiver.instance or "") if receiver.kind == UNKNOWN else None
        if not methods or "to" in methods or "cuda" in methods:
            return None
        init = methods.get("__init__")
        if init is None or init is self.scope or not self.analysis.only_init_assigns(init, attr):
            return None
        stated = self.analysis.scope(init).facts.get(f"self.{attr}")
        return stated if stated is not None and stated.kind == CPU and stated.from_factory else None

    def _attribute(self, node: cst.Attribute) -> Fact:
        attr = node.attr.value
        key = self._key(node)
        if key is not None and key in self.env:
            return self.env[key]
        if self.is_receiver(node.value):
            read = self._property_read(attr)
            if read is not None:
                return read
        if attr in _NUMERIC_LIMITS and type(node.value) is cst.Call:
            if (self.ctx.qualified_name(node.value.func) or "") in _NUMERIC_INFO:
                return NUMBER  # `torch.finfo(x.dtype).min`: a Python float
        if self.ctx.project.host_constants and type(node.value) is cst.Name:
            spelled = f"{node.value.value}.{attr}"
            if spelled in self.ctx.project.host_constants and node.value.value not in self.env:
                constant = self._imported_constant(spelled, node)
                if constant is not None:
                    return constant
        if self.cls is not None and self.is_receiver(node.value):
            if attr in self.cls.registered:
                left = self._buffer_left_on_host(attr)
                if left is not None:
                    return left
                return (
                    Fact(DEVICE, where=FOLLOWS, device_expr=f"self.{attr}.device") if self.own_place else UNKNOWN_FACT
                )
            if attr in self.cls.submodules:
                return self.own_submodule(attr)
            stated = self._stated(attr)
            if stated is not None and stated.kind == DEVICE_VALUE and stated.where == ACCELERATOR:
                return stated
            if stated is not None and stated.kind == UNKNOWN and stated.instance in self.analysis.plain_classes:
                # `self.triples = triples` of a plain class of the file: `.to()` does not reach it
                return stated
            if attr == "device":
                if (
                    self.building
                    and self.analysis.is_lightning(self.cls)
                    and "device" not in self.cls.methods
                    and not any(assigned == "device" for assigned, _, _ in self.cls.assignments)
                ):
                    # a LightningModule's own `device` while it is built: the trainer has not moved
                    # it yet, so it is still the CPU
                    return Fact(DEVICE_VALUE, where="cpu", device_expr="self.device", spelled="object")
                return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr="self.device")
            return UNKNOWN_FACT
        if self.is_receiver(node.value):
            if attr == "param_groups" and self._in_optimizer():
                # an optimizer's own groups: their "params" are the model's, wherever it is
                params = Fact(UNKNOWN, elements=(Fact(DEVICE, where=FOLLOWS, device_expr="p.device"),), alike=True)
                return Fact(UNKNOWN, elements=(Fact(UNKNOWN, fields=(("params", params),)),), alike=True)
            # a trainer's `self.device = torch.device("cuda:1")`, `self.model = model.to(device)`,
            # `self.accelerator = Accelerator()`
            stated = self._stated(attr)
            if (
                stated is not None
                and self._in_optimizer()
                and _host_state(stated)
                and type(self.scope) is cst.FunctionDef
                and self.analysis.only_init_assigns(self.scope, attr)
            ):
                return stated  # state the optimizer keeps from `__init__`, on the CPU
            if stated is not None and _factory_state(stated) and self._fed_device_values(attr):
                # a metric bank's `self.correct = torch.zeros(n)`, a hand-made network's list of
                # weights drawn by an init helper, read with device values
                return stated
            if stated is not None and is_host_module(stated) and self._kept_on_host(attr):
                return stated  # `self.model = resnet18()` that no code of the file moves
            if stated is not None and stated.kind == UNKNOWN and stated.instance in self.analysis.plain_classes:
                return stated  # `self.policy = TinyPolicy()`: an instance of a plain class of the file
            if (
                stated is not None
                and stated.kind == UNKNOWN
                and stated.fields
                and not stated.batch
                and type(self.scope) is cst.FunctionDef
                and self.analysis.only_init_assigns(self.scope, attr, filled_in_init=True)
            ):
                return stated  # `self.state = {"h": torch.zeros(n)}` filled in `__init__` only, read later
            if stated is not None and (
                stated.where == ACCELERATOR
                and stated.kind in (DEVICE_VALUE, MODULE, UNKNOWN)
                or stated.device is not None
                and stated.where == ACCELERATOR
                or stated == LAUNCHER
                or stated.kind == MODULE
                and stated.fields
            ):
                return stated
        receiver = self._eval(node.value)
        if receiver.fields is not None:
            return receiver.field(attr)  # a dataclass or NamedTuple instance's field
        kept = self._plain_instance_tensor(receiver, attr)
        if kept is not None:
            return kept
        if attr == "DEVICE" and type(node.value) in (cst.Attribute, cst.Name):
            # a settings tree's or module's device (`cfg.MODEL.DEVICE`, `config.DEVICE`): where
            # the author means to run
            return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=self.ctx.code_for(node))
        if attr == "device" and self._on_host(node.value):
            return Fact(DEVICE_VALUE, where="cpu", spelled="object")  # `model.device` of a model on the CPU
        if attr == "device":
            if receiver.kind == CPU:
                return Fact(DEVICE_VALUE, where="cpu", spelled="object")
            spelled = "object"  # a tensor's or module's `.device` is a `torch.device`
            if receiver.kind in (DEVICE, MODULE) or receiver.where:
                where = receiver.where if receiver.where in (FOLLOWS, ACCELERATOR) else None
            elif type(node.value) is cst.Name and self._module_level(node.value.value):
                return UNKNOWN_FACT  # a module-level object the file does not show: no claim either way
            elif (
                type(node.value) is cst.Name
                and node.value.value not in _CONFIG_NAMES
                and not self._settings_param(node.value.value)
                and not self._device_holder_param(node.value.value)
            ):
                where = FOLLOWS  # a local tensor of unknown placement: wherever it is
            else:
                where, spelled = ACCELERATOR, None  # `cfg.device`, `args.device`, `self.trainer.device`
            return Fact(
                DEVICE_VALUE, where=where, device_expr=self.ctx.code_for(node), device=receiver.device, spelled=spelled
            )
        if receiver.is_tensor and attr in _TENSOR_VIEW_ATTRS:
            return replace(receiver, scalar=False)
        if _moved_value(receiver) and attr in _TENSOR_VIEW_ATTRS:
            # `masks.cuda().data`, `h.to(device).T` of a value of unknown kind: only tensors (and
            # PackedSequence, whose `.data` goes with it) have these views: a tensor where the move sent it
            return replace(receiver, kind=DEVICE, scalar=False)
        if receiver.kind == DEVICE and attr in _OUTPUT_TENSOR_FIELDS:
            # `model(ids).logits`: no tensor has the field, so the receiver is the model's output object
            return Fact(DEVICE, where=receiver.where, device_expr=receiver.device_expr, device=receiver.device)
        if receiver.kind == MODULE and receiver.where in (FOLLOWS, ACCELERATOR) and attr in _MODULE_TENSOR_ATTRS:
            return Fact(DEVICE, where=receiver.where, device_expr=f"{self.ctx.code_for(node)}.device")
        return UNKNOWN_FACT

    def _property_read(self, attr: str) -> Fact | None:
        """`self.<attr>` where the class defines `attr` as a property (`device`,
        `_execution_device` reading its model's parameters): what the getter returns, when the
        engine knows."""
        if type(self.scope) is not cst.FunctionDef:
            return None
        owner = self.receiver_class or self.analysis.owner_class(self.scope)
        if owner is None or type(owner.body) is not cst.IndentedBlock:
            return None
        getter = next(
            (
                s
                for s in owner.body.body
                if type(s) is cst.FunctionDef
                and s.name.value == attr
                and any(dotted_name(d.decorator) in _PROPERTY_DECORATORS for d in s.decorators)
            ),
            None,
        )
        if getter is None or getter is self.scope:
            return None
        returned = self.analysis.returns_of(getter)
        return returned if returned is not None and returned != UNKNOWN_FACT else None

    def _kept_on_host(self, attr: str) -> bool:
        """Whether a plain class's `self.<attr>`, a module `__init__` left on the CPU, stays there
        for every method (`analysis/held_models.py`)."""
        if type(self.scope) is not cst.FunctionDef or not self.analysis.set_up_once(self.scope, attr):
            return False
        cls = self.ctx.index.enclosing_class(self.scope)
        return cls is not None and kept_on_host(self.ctx, cls, attr, self.scope)

    def _fed_device_values(self, attr: str) -> bool:
        """A method of a plain class (its own run, or followed with a device tensor among its
        arguments) reading an attribute that every assignment in the class builds with a torch factory on the host
        (`self.correct = torch.zeros(n)` in `__init__` and `reset()`, updated in place with `+=`)
        and that nothing in the file moves: the host state meets the caller's device values."""
        if self.bound is not None and not any(devicey(fact) for fact in self.bound.values()):
            return False  # (a method's own run reads it too: device values it makes itself meet it)
        cls = self.ctx.index.enclosing_class(self.scope) if type(self.scope) is cst.FunctionDef else None
        if cls is None or re.search(r"\." + re.escape(attr) + r"\s*\.\s*(to|cuda)\(", self.ctx.source):
            return False
        functions = self.analysis.functions
        appended = False
        for call in self.ctx.index.within(cls, cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "append" and self_attribute(func.value) == attr:
                if len(call.args) != 1 or not _host_built(self.ctx, functions, call.args[0].value):
                    return False
                appended = True
        for assign in self.ctx.index.within(cls, cst.Assign):
            for target in assign.targets:
                if self_attribute(target.target) != attr:
                    continue
                value = assign.value
                empty_list = type(value) is cst.List and not value.elements
                if empty_list and appended:
                    continue
                if type(value) is cst.ListComp:
                    built = _host_built(self.ctx, functions, value.elt)
                elif type(value) is cst.List:
                    built = all(_host_built(self.ctx, functions, e.value) for e in value.elements)
                else:
                    built = _host_built(self.ctx, functions, value)
                if not built:
                    return False
        return True

    def _in_optimizer(self) -> bool:
        """Whether this is a method of a `torch.optim.Optimizer` subclass."""
        cls = self.ctx.index.enclosing_class(self.scope) if type(self.scope) is cst.FunctionDef else None
        return cls is not None and any(
            (self.ctx.qualified_name(base.value) or "").startswith("torch.optim.")
            and (dotted_name(base.value) or "").endswith("Optimizer")
            for base in cls.bases
        )

    def _subscript(self, node: cst.Subscript) -> Fact:
        value = self._eval(node.value)
        by_tensor = False  # `table[ids]`: the result has the index tensor's shape, not 0 dims
        for element in node.slice:
            if type(element.slice) is cst.Index:
                by_tensor = self._eval(element.slice.value).is_tensor or by_tensor
        single = node.slice[0].slice if len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index else None
        if value.fields is not None and single is not None:
            key = string_value(single.value)
            return value.field(key) if key is not None else UNKNOWN_FACT
        if value.elements is not None and single is not None:
            index = single.value
            if type(index) is cst.Integer:
                position = int(index.value, 0)
                if -len(value.elements) <= position < len(value.elements):
                    return value.elements[position]
                return value.elements[0] if value.alike and value.elements else UNKNOWN_FACT
            # `hs[i]`, `batch["ids"]` of a comprehension: every element alike, any index gives it
            return value.elements[0] if value.elements and len(set(value.elements)) == 1 else UNKNOWN_FACT
        key = string_value(single.value) if single is not None else None
        if key is not None and "device" in key.lower() and not value.is_tensor and value.kind != MODULE:
            # a settings mapping's device (`cfg["device"]`, `opts["train"]["DEVICE"]`), as `cfg.device`
            return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=self.ctx.code_for(node))
        if value.batch:
            return Fact(CPU, where="cpu", origin=node, batch=True)
        if value.is_tensor:
            return replace(value, scalar=not by_tensor and indexes_every_dimension(value, node))
        if value.kind == MODULE:
            return value
        return UNKNOWN_FACT

    def _binary(
        self, node: cst.CSTNode, left: Fact, right: Fact, left_node: cst.CSTNode, right_node: cst.CSTNode
    ) -> Fact:
        if (
            type(node) is cst.BinaryOperation
            and type(node.operator) is cst.Multiply
            and type(left_node) is cst.List
            and left.elements is not None
            and len(set(left.elements)) == 1
            and not right.is_tensor
        ):
            return Fact(UNKNOWN, elements=left.elements[:1], alike=True)  # `[None] * n`: n like slots
        for a, a_node, b, b_node in ((left, left_node, right, right_node), (right, right_node, left, left_node)):
            if cpu_side(a, allow_scalar=False) and devicey(b) and compatible(a, b):
                self._record(a, a_node, b, b_node, node, "op")
                return b if b.kind == DEVICE else Fact(DEVICE, where=b.where, device_expr=b.device_expr)
        if devicey(left) and devicey(right):
            self._cross(right, right_node, left, left_node, node, "op")
        for fact in (left, right):
            if devicey(fact):
                return Fact(DEVICE, where=fact.where, device_expr=fact.device_expr, device=fact.device)
        if left == NUMBER and right == NUMBER:
            return NUMBER
        if (
            type(node) is cst.BinaryOperation
            and type(node.operator) is cst.FloorDivide
            and {left, right} <= {NUMBER, UNKNOWN_FACT}
            and all(_number_like(side) or type(side) is cst.Integer for side in (left_node, right_node))
        ):
            return NUMBER  # `self.dim // self.heads`: integer arithmetic on settings
        if {left, right} <= {NUMBER, PY_DATA} and PY_DATA in (left, right):
            return PY_DATA  # arithmetic on arrays and lists stays host data
        # A CPU tensor combined with anything that is not a device tensor stays on the CPU: were
        # the other operand on the device, the operation itself would already be the bug.
        for a, b, b_node in ((left, right, right_node), (right, left, left_node)):
            if a.kind == CPU:
                other_cpu = b.kind == CPU
                if a.scalar and not other_cpu and not b.is_tensor and b != NUMBER and not _number_like(b_node):
                    return UNKNOWN_FACT  # `scale * torch.bmm(a, b)`: the other side decides
                return replace(
                    a,
                    scalar=a.scalar and (b.scalar if other_cpu else not b.is_tensor),
                    batch=a.batch and (b.batch if other_cpu else True),
                    conflict=a.conflict or (other_cpu and b.conflict),
                )
        return UNKNOWN_FACT

    def _comparison(self, node: cst.Comparison) -> Fact:
        left_node: cst.CSTNode = node.left
        left = self._eval(node.left)
        result = left
        for target in node.comparisons:
            right = self._eval(target.comparator)
            if type(target.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn):
                result = UNKNOWN_FACT
            else:
                result = self._binary(node, left, right, left_node, target.comparator)
            left, left_node = right, target.comparator
        return replace(result, mask=True) if result.is_tensor else UNKNOWN_FACT

    # -- modules on the host -----------------------------------------------------------
    def _tracks(self, target: cst.BaseExpression) -> bool:
        """Whether binding to `target` keeps track of the value (a name, `self.x`, a part of a
        dict whose parts are known, a tuple of those)."""
        if isinstance(target, (cst.Tuple, cst.List)):
            return all(self._tracks(e.value) for e in target.elements)
        if type(target) is cst.StarredElement:
            return self._tracks(target.value)
        if type(target) is cst.Subscript:
            owner = self._key(target.value)
            return owner is not None and owner in self.env and self.env[owner].fields is not None
        return self._key(target) is not None

    def _on_host(self, node: cst.BaseExpression) -> bool:
        """Whether an expression reads a part of a module on the host (`model.fc.weight`,
        `next(model.parameters())`, `list(model.buffers())[0]`)."""
        while type(node) is not cst.Name and self.receiver_attribute(node) is None:
            if isinstance(node, (cst.Attribute, cst.Subscript)):
                node = node.value
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                node = node.func.value
            elif type(node) is cst.Call and type(node.func) is cst.Name and node.args:
                node = node.args[0].value
            else:
                return False
        key = root_key(node)
        return key is not None and is_host_module(self.env.get(key, UNKNOWN_FACT))

    def _release_handed(self, call: cst.Call, result: Fact) -> None:
        """Forget that a module is on the host once the call may have moved it: handed to a
        function, a wrapper or a launcher, a method that is not known to leave it in place, a
        move of a part of it (`model.backbone.cuda()`), or code that reaches it by name."""
        if not self.analysis.host_modules_made:
            return
        func = call.func
        handed: list[Fact] = []
        if type(func) is cst.Attribute:
            key = root_key(func.value)
            held = self.env.get(key, UNKNOWN_FACT) if key is not None else UNKNOWN_FACT
            direct = self._key(func.value) == key and is_host_module(held)
            stays = direct and (keeps_module_in_place(func.attr.value) or (move_call(call) and is_host_module(result)))
            if not stays:
                handed += hosted_in(held)
            if self.is_receiver(func.value) and not is_host_module(
                self.env.get(f"self.{func.attr.value}", UNKNOWN_FACT)
            ):
                handed += self._held_by_self()  # `self.setup()` may move `self.model`
        if not keeps_arguments_in_place(self.ctx, call):
            left_alone = self._left_alone_by_imported(call)
            for position, arg in enumerate(call.args):
                if position in left_alone:
                    continue  # a project function that runs the model and never moves it
                handed += hosted_in(self._fact_of(arg.value))
                key = root_key(arg.value)
                if key is not None:
                    handed += hosted_in(self.env.get(key, UNKNOWN_FACT))
                if self.is_receiver(arg.value):
                    handed += self._held_by_self()
            calls_module = type(func) is cst.Name and is_host_module(self.env.get(func.value, UNKNOWN_FACT))
            if not calls_module:
                for name in captured_names(self.ctx, self.scope):
                    if not kept_at_import(self.ctx, name):  # functions that only run it leave it
                        handed += hosted_in(self.env.get(name, UNKNOWN_FACT))
        if handed:
            self.env = released(self.env, handed)

    def _left_alone_by_imported(self, call: cst.Call) -> set[int]:
        """The positions of `call`'s arguments that the imported project function it runs
        neither moves, rebinds nor hands on (`ParameterUses.runs_unmoved`)."""
        helpers = self.ctx.project.helpers
        spelled = dotted_name(call.func) if helpers else None
        helper = helpers.get(spelled) if spelled is not None else None
        if helper is None or not helper.uses.runs_unmoved:
            return set()
        unmoved = {param for param, _ in helper.uses.runs_unmoved}
        return {
            position
            for position, arg in enumerate(call.args)
            if not arg.star
            and helper.uses.parameter_at(position, arg.keyword.value if arg.keyword is not None else None) in unmoved
        }

    def _release_iterated(self, iterable: Fact, node: cst.BaseExpression) -> None:
        """`for m in models: m.to(device)`: the loop variable may be any of the modules held;
        `for p in model.parameters(): p.data = p.data.cuda()` moves the model part by part."""
        if not self.analysis.host_modules_made:
            return
        handed = [] if is_host_module(_element_of(iterable)) else hosted_in(iterable)
        for call in self.ctx.index.walk(node):
            if type(call) is cst.Call and type(call.func) is cst.Attribute and call.func.attr.value in _MODULE_PARTS:
                key = root_key(call.func.value)
                handed += hosted_in(self.env.get(key, UNKNOWN_FACT)) if key is not None else []
        self.env = released(self.env, handed)

    def _held_by_self(self) -> list[Fact]:
        return [m for key, fact in self.env.items() if key.startswith("self.") for m in hosted_in(fact)]

    # -- calls -------------------------------------------------------------------------
    def _cross(
        self, value: Fact, value_node: cst.CSTNode, other: Fact, other_node: cst.CSTNode, node: cst.CSTNode, how: str
    ) -> None:
        """Record two accelerators the code states as different meeting at `node`."""
        if (
            value.device is not None
            and other.device is not None
            and value.device.is_accelerator
            and other.device.is_accelerator
            and distinct(value.device, other.device)
        ):
            self.result.crossings.append(Crossing(value, value_node, other, other_node, node, how, self.scope))

    def _record(
        self,
        cpu: Fact,
        cpu_node: cst.CSTNode,
        device: Fact,
        device_node: cst.CSTNode | None,
        node: cst.CSTNode,
        how: str,
    ) -> None:
        key = (id(node), id(cpu_node), id(cpu.origin))
        if key not in self.seen:
            self.seen.add(key)
            self.result.meetings.append(Meeting(cpu, cpu_node, device, device_node, node, how, self.scope))


def file_placement(ctx: FileContext) -> FilePlacement:
    """Every scope's placement facts and every CPU/device meeting of the file (memoised)."""
    return ctx.shared("placement", lambda c: FileAnalysis(c, _Interpreter).run())


def _returns_torch_tensors(call: cst.Call) -> bool:
    """`tokenizer(texts, return_tensors="pt")`, `processor(images=img, return_tensors="pt")`."""
    return any(
        arg.keyword is not None and arg.keyword.value == "return_tensors" and string_value(arg.value) == "pt"
        for arg in call.args
    )


def _number_like(node: cst.CSTNode) -> bool:
    """An operand that is usually a Python number when nothing else is known of it: a name or
    an attribute (`self.beta`, `cfg.weight`), not a call's or an index's result."""
    return type(node) in (cst.Name, cst.Attribute)


def _progress_unwrapped(node: cst.BaseExpression) -> cst.BaseExpression:
    """`loader` in `tqdm(loader)`, `iter(tqdm(loader))`: a progress bar yields what it wraps."""
    while type(node) is cst.Call and type(node.func) is cst.Name and node.func.value in ("tqdm", "iter") and node.args:
        node = node.args[0].value
    return node


def _element_of(iterable: Fact) -> Fact:
    """What iterating a value yields: a module container's modules, a list's elements where
    they are alike."""
    if iterable.kind == MODULE:
        return Fact(MODULE, where=iterable.where)
    if iterable == DEVICE_LOADER:
        return Fact(UNKNOWN, where=ACCELERATOR, batch=False)
    if iterable.elements and len(set(iterable.elements)) == 1:
        return iterable.elements[0]
    if iterable.is_tensor and not iterable.batch and not iterable.scalar:
        # the rows of a tensor live where it does; a CPU tensor's rows may be 0-dim (a 1-D
        # tensor's are), which PyTorch lets meet device tensors
        return replace(iterable, mask=False, scalar=iterable.kind == CPU)
    return UNKNOWN_FACT


def _written_element(current: Fact, index: cst.BaseExpression | None, fact: Fact) -> Fact:
    """A list after `xs[index] = fact`: the element at a literal position of a list of known
    parts; every element of a list of like ones (slots left empty, `[None] * n`, take it)."""
    elements = current.elements or ()
    if current.alike and elements:
        old = elements[0]
        written = fact if old == UNKNOWN_FACT or old == fact else join(old, fact)
        return replace(current, elements=(written,))
    if type(index) is cst.Integer:
        position = int(index.value, 0)
        if -len(elements) <= position < len(elements):
            updated = list(elements)
            updated[position] = fact
            return replace(current, elements=tuple(updated))
    return UNKNOWN_FACT


def _host_factory(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`torch.zeros(n)`, `torch.tensor(0.0)`: a torch factory call with no `device=`."""
    if type(value) is not cst.Call or any(a.keyword is not None and a.keyword.value == "device" for a in value.args):
        return False
    qualified = ctx.qualified_name(value.func) or ""
    return qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in FACTORIES


# Tensor methods whose result stays where the tensor is (a factory's result they are called on
# is still the factory's host tensor).
_PLACE_KEEPING_METHODS = frozenset(
    {"requires_grad_", "float", "double", "half", "long", "int", "bool", "contiguous", "clone", "detach"}
    | {"view", "reshape", "t", "unsqueeze", "squeeze", "permute", "transpose"}
)


def _host_built(
    ctx: FileContext, functions: dict[str, cst.FunctionDef], value: cst.BaseExpression, depth: int = 0
) -> bool:
    """A tensor a torch factory builds with no `device=`: the call itself, through methods that
    keep it in place (`torch.normal(...).requires_grad_()`) or arithmetic (`torch.randn(n, m) * s`),
    or the call of a function of the file whose every `return` is one (`xavier_init(n, m)`). The
    caller also checks the engine's fact of the attribute, so arithmetic with a device operand is
    no host state."""
    while (
        type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value in _PLACE_KEEPING_METHODS
    ):
        value = value.func.value
    if _host_factory(ctx, value):
        return True
    if type(value) is cst.BinaryOperation:  # `torch.randn(n, m) / n**0.5`: the fact says where the result is
        return _host_built(ctx, functions, value.left, depth) or _host_built(ctx, functions, value.right, depth)
    if depth >= 2 or type(value) is not cst.Call or type(value.func) is not cst.Name:
        return False
    function = functions.get(value.func.value)
    if function is None:
        return False
    returns = [r for r in ctx.index.within(function, cst.Return) if ctx.index.enclosing_function(r) is function]
    return bool(returns) and all(
        r.value is not None and _host_built(ctx, functions, r.value, depth + 1) for r in returns
    )


def _factory_state(fact: Fact) -> bool:
    """A host tensor a torch factory built, or a list of them."""
    if fact.from_factory:
        return True
    return bool(fact.elements) and all(e.from_factory for e in fact.elements or ())


def _moved_value(fact: Fact) -> bool:
    """A value of unknown kind that a move sent to the accelerator (`x.cuda()` of a parameter):
    no batch, record or container the engine tracks by parts."""
    return (
        fact.kind == UNKNOWN
        and fact.where == ACCELERATOR
        and not fact.batch
        and fact.fields is None
        and fact.elements is None
        and fact.instance is None
    )


def _host_state(fact: Fact) -> bool:
    """A CPU tensor, or a list of them."""
    if fact.kind == CPU:
        return True
    return bool(fact.elements) and all(e.kind == CPU for e in fact.elements or ())


def _advanced_index(node: cst.BaseExpression, index: Fact) -> bool:
    """An index that makes `t[...] = v` an `index_put_` rather than a view's `copy_`: a tensor,
    a list or tuple of indices, or Python data (`rows = [0, 2]`)."""
    if type(node) in (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp):
        return True
    return index.is_tensor or index == PY_DATA


def _literal(node: cst.BaseExpression) -> bool:
    """A value that cannot be a tensor: a number, a string, `True`/`False`/`None`, a list of numbers."""
    if isinstance(node, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    return (type(node) is cst.Name and node.value in ("True", "False", "None")) or is_literal_data(node)


def _root_name(node: cst.CSTNode) -> str | None:
    """`ids` in `ids`, `ids[:, 1]`, `ids.long()`, `ids[:, 0].long()`: the name a tensor expression
    reads its value from through indexing and method calls."""
    while True:
        if type(node) is cst.Name:
            return node.value
        if type(node) is cst.Subscript:
            node = node.value
        elif type(node) is cst.Call and type(node.func) is cst.Attribute:
            node = node.func.value
        else:
            return None


def _single_string_key(target: cst.Subscript) -> str | None:
    index = target.slice[0].slice if len(target.slice) == 1 else None
    return string_value(index.value) if type(index) is cst.Index else None


def _missing_entry_test(ctx: FileContext, test: cst.BaseExpression) -> tuple[str, str | None] | None:
    """The mapping (and key) an `if` tests for a missing entry: `"k" not in d` gives `(d, "k")`;
    an emptiness test, `len(d) == 0` or `not d` (an optimizer's first step), gives `(d, None)`."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return (ctx.code_for(test.expression), None) if isinstance(test.expression, (cst.Name, cst.Attribute)) else None
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    key = string_value(test.left)
    if type(target.operator) is cst.NotIn and key is not None:
        return ctx.code_for(target.comparator), key
    left = test.left
    if (
        type(target.operator) is cst.Equal
        and type(target.comparator) is cst.Integer
        and target.comparator.value == "0"
        and type(left) is cst.Call
        and type(left.func) is cst.Name
        and left.func.value == "len"
        and len(left.args) == 1
    ):
        return ctx.code_for(left.args[0].value), None
    return None


def _fills_missing_key(ctx: FileContext, stmt: cst.If) -> bool:
    """`if "k" not in d:` whose body only stores `d["k"]` (a lazily made entry), or `if
    len(state) == 0:` / `if not state:` whose body only stores string-keyed entries of `state`:
    whichever path ran, the entries afterwards are what the body stores."""
    tested = _missing_entry_test(ctx, stmt.test)
    if tested is None:
        return False
    holder, key = tested
    body = stmt.body.body if type(stmt.body) is cst.IndentedBlock else ()
    stores = [
        small
        for line in body
        for small in (line.body if type(line) is cst.SimpleStatementLine else ())
        if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Subscript
    ]
    if not body or len(stores) != len(body):
        return False

    def stores_entry(store: cst.Assign) -> bool:
        target = store.targets[0].target
        if type(target) is not cst.Subscript or ctx.code_for(target.value) != holder:
            return False
        stored = _single_string_key(target)
        return stored == key if key is not None else stored is not None

    return all(stores_entry(store) for store in stores)


def _arithmetic_list(node: cst.BaseExpression) -> bool:
    """`[x, y, (c + 0.5) / cols, s]`: a list or tuple of numbers, names and arithmetic on them
    (no call, no subscript): the numbers a loop appends to a table it builds."""

    def plain(value: cst.BaseExpression) -> bool:
        if is_literal_data(value) or type(value) is cst.Name:
            return True
        if type(value) is cst.BinaryOperation:
            return plain(value.left) and plain(value.right)
        if type(value) is cst.UnaryOperation:
            return plain(value.expression)
        return False

    return isinstance(node, (cst.List, cst.Tuple)) and all(
        type(e) is not cst.StarredElement and plain(e.value) for e in node.elements
    )


def _moved_under_flag(node: cst.IfExp, body: Fact, orelse: Fact) -> Fact | None:
    """`c.cuda().half() if use_gpu else c.float()`: one value, moved to the accelerator on the
    path of a device test and kept (or cast) on the other: as for a module moved under
    `torch.cuda.is_available()`, the device the author means is the GPU."""
    for moved, kept, fact in ((node.body, node.orelse, body), (node.orelse, node.body, orelse)):
        root = _value_root(moved)
        if (
            root is not None
            and root == _value_root(kept)
            and fact.where == ACCELERATOR
            and fact.kind in (DEVICE, UNKNOWN)
            and fact.elements is None
            and fact.fields is None
            and not fact.batch
        ):
            return Fact(DEVICE, where=ACCELERATOR, device_expr=fact.device_expr, device=fact.device)
    return None


def _value_root(node: cst.BaseExpression) -> str | None:
    """`c` of `c`, `c.float()`, `c.cuda().half()`: the name a chain of method calls starts from."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute:
        node = node.func.value
    return node.value if type(node) is cst.Name else None


def _tensor_branch(ctx: FileContext, node: cst.IfExp, body: Fact, orelse: Fact) -> Fact | None:
    """`v.to(device) if torch.is_tensor(v) else v` (or `v if not isinstance(v, torch.Tensor) else
    v.cuda()`): the other branch hands back a value that is no tensor unchanged, so where the
    value is a tensor it is what the tensor branch makes of it."""
    test, other_side, tensor_fact = node.test, node.orelse, body
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test, other_side, tensor_fact = test.expression, node.body, orelse
    tested = any_tensor_test(ctx, test)
    if tested is None or not (type(other_side) is cst.Name and other_side.value == tested):
        return None
    return tensor_fact if tensor_fact.is_tensor or devicey(tensor_fact) else None
