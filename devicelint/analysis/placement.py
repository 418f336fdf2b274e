"""Device placement: where each value of a function lives (CPU, device, module, device value).

A small abstract interpretation, one pass per function (and one for the module's top-level
code), in source order. Facts (`placement_facts.Fact`) flow through assignments, tuple
unpacking, augmented assignment, conditional expressions, `if`/`for`/`while`/`with`/`try`
blocks and returns. Calls to methods of the same class and to functions of the same file are
followed one level deep. No whole-program analysis: anything unresolved is `unknown`, and
unknown never produces a finding.

Public API (every result memoised per file through `ctx.shared`):

- `file_placement(ctx)`: a `FilePlacement` with every scope's `ScopePlacement` and every
  `Meeting` (a CPU tensor meeting a device tensor or module) found in the file.
- `placement_of_function(ctx, funcdef)`: the `ScopePlacement` of one function (or of the
  `cst.Module` for top-level code): `.facts` (name -> Fact at the end), `.returns`, `.meetings`.
- `value_kind(ctx, expr)`: the `Fact` of one expression where it was evaluated
  (`UNKNOWN_FACT` when the analysis has nothing to say).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.placement_classes import ClassFacts, class_facts, module_constructor, self_attribute
from devicelint.analysis.placement_facts import (
    ACCELERATOR, ACCELERATOR_STRINGS, CPU, CROSS_DEVICE_FUNCTIONS, DATA_FACTORIES, DEVICE,
    DEVICE_GUARD_WORDS, DEVICE_VALUE, FACTORIES, FOLLOWS, INPLACE_METHODS, LEGACY_CONSTRUCTORS,
    LIKE_FACTORIES, LOSS_CALLABLE_NAMES, MEETING_METHODS, MODULE, MOVE_METHODS, NEW_METHODS,
    NON_TENSOR_FUNCTIONS, PARAMETER_FREE_MODULES, PRESERVING_METHODS, TENSOR_ANNOTATIONS,
    TENSOR_NAMESPACES, TENSOR_ONLY_METHODS, UNKNOWN, UNKNOWN_FACT, Fact,
)
from devicelint.context import FileContext

__all__ = [
    "CPU", "DEVICE", "MODULE", "DEVICE_VALUE", "UNKNOWN", "Fact", "Meeting", "ScopePlacement",
    "FilePlacement", "file_placement", "placement_of_function", "value_kind",
]

NUMBER = Fact(UNKNOWN, where="number")
LOADER = Fact(UNKNOWN, factory="<loader>")
_CAST_METHODS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "bool", "clone", "detach"})
_MODULE_TENSOR_ATTRS = frozenset({"weight", "bias", "running_mean", "running_var", "in_proj_weight", "pos_embed"})
_TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
_MAX_LOOP_DEPTH = 3
# Function and file names of data preparation, where CPU tensors are right.
_DATA_WORDS = ("collat", "preprocess", "processing", "processor", "tokeniz", "feature_extract", "dataset", "transform")
_CONFIG_NAMES = frozenset(
    {"args", "opt", "opts", "cfg", "config", "conf", "hparams", "hp", "params", "settings", "options",
     "training_args", "train_args", "model", "net", "trainer", "accelerator", "self"}
)
Env = dict[str, Fact]


@dataclass(frozen=True)
class Meeting:
    """A CPU tensor meets a device tensor (or a module on a device) at `node`.

    `how` is "op" (an operator, a torch function or a tensor method), "module" (passed to a
    module), "return" (returned from `forward`) or "inplace" (the CPU tensor is the target of
    an in-place update with a device value).
    """

    cpu: Fact
    cpu_node: cst.CSTNode
    device: Fact
    device_node: cst.CSTNode | None
    node: cst.CSTNode
    how: str
    scope: cst.CSTNode


@dataclass
class ScopePlacement:
    """The placement facts of one function (or of a module's top-level code)."""

    node: cst.CSTNode
    name: str
    cls: ClassFacts | None
    facts: Env = field(default_factory=dict)
    returns: Fact | None = None
    meetings: list[Meeting] = field(default_factory=list)
    # id(expression) -> its Fact, for expressions whose fact is not unknown
    expr_facts: dict[int, Fact] = field(default_factory=dict)
    device_params: list[str] = field(default_factory=list)


@dataclass
class FilePlacement:
    scopes: dict[int, ScopePlacement]
    meetings: list[Meeting]


def _annotation_is_tensor(annotation: cst.Annotation | None) -> bool:
    if annotation is None:
        return False
    node = annotation.annotation
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value if isinstance(node.evaluated_value, str) else ""
    else:
        text = dotted_name(node) or ""
        if isinstance(node, cst.Subscript) and (dotted_name(node.value) or "").endswith("Optional"):
            inner = node.slice[0].slice if node.slice else None
            text = dotted_name(inner.value) if isinstance(inner, cst.Index) else ""
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
            text = dotted_name(node.left) or ""
    text = (text or "").replace("Optional[", "").rstrip("]")
    return text in TENSOR_ANNOTATIONS


def _string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _device_string_fact(text: str) -> Fact | None:
    base = text.split(":", 1)[0]
    if base == "cpu":
        return Fact(DEVICE_VALUE, where="cpu")
    if base in ACCELERATOR_STRINGS:
        return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=repr(text).replace("'", '"'))
    return None


def _looks_like_device_name(name: str) -> bool:
    lowered = name.lower()
    return "device" in lowered or lowered in ("dev", "rank", "local_rank", "gpu", "gpu_id", "gpu_ids")


def is_device_guard(test: cst.CSTNode, ctx: FileContext) -> bool:
    """Whether an `if` test depends on the device (`x.is_cuda`, `torch.cuda.is_available()`)."""
    for node in ctx.index.walk(test):
        if isinstance(node, cst.Name):
            text = node.value
        elif isinstance(node, cst.Attribute):
            text = node.attr.value
        elif isinstance(node, cst.SimpleString):
            text = node.value
        else:
            continue
        text = text.lower()
        if any(word in text for word in DEVICE_GUARD_WORDS):
            return True
    return False


def join(a: Fact | None, b: Fact | None, strict: bool = False) -> Fact:
    """The fact after two paths meet. A factory's CPU tensor on one path stays CPU (it meets
    whatever the other path meets), unless the paths split on the device (`strict`)."""
    if a is None:
        return b or UNKNOWN_FACT
    if b is None or a == b:
        return a
    if not strict:
        if a.from_factory and not b.batch:
            return a
        if b.from_factory and not a.batch:
            return b
    if a.kind == b.kind and a.kind in (DEVICE, MODULE, DEVICE_VALUE) and not a.batch and not b.batch:
        # `"cuda" if torch.cuda.is_available() else "cpu"`: the device the author means is the GPU.
        where = a.where if a.where == b.where else (FOLLOWS if a.kind == DEVICE else ACCELERATOR if a.kind == DEVICE_VALUE else None)
        return Fact(a.kind, where=where, device_expr=a.device_expr if a.device_expr == b.device_expr else None)
    return UNKNOWN_FACT


def _join_envs(a: Env, b: Env, strict: bool) -> Env:
    out: Env = {}
    for key in a.keys() | b.keys():
        out[key] = join(a.get(key, UNKNOWN_FACT), b.get(key, UNKNOWN_FACT), strict)
    return out


def _flatten(fact: Fact, node: cst.CSTNode) -> list[tuple[Fact, cst.CSTNode]]:
    if fact.elements is not None:
        out = []
        if isinstance(node, (cst.Tuple, cst.List)):
            for element, item in zip(fact.elements, node.elements):
                out.extend(_flatten(element, item.value))
        else:
            for element in fact.elements:
                out.extend(_flatten(element, node))
        return out
    return [(fact, node)]


def _devicey(fact: Fact) -> bool:
    """A device tensor, or a moved value that may be a tensor or a module."""
    return fact.kind == DEVICE or (fact.kind == UNKNOWN and fact.where == ACCELERATOR)


def _cpu_side(fact: Fact, allow_scalar: bool) -> bool:
    if fact.kind != CPU or (fact.scalar and not allow_scalar):
        return False
    return fact.from_factory or fact.batch


def _compatible(cpu: Fact, device: Fact) -> bool:
    # A batch that was never moved only clashes with what is certainly on the accelerator.
    return not cpu.batch or device.where == ACCELERATOR


class _Interpreter:
    def __init__(self, ctx: FileContext, analysis: "_FileAnalysis", scope: cst.CSTNode,
                 cls: ClassFacts | None, bound: Env | None, depth: int) -> None:
        self.ctx = ctx
        self.analysis = analysis
        self.scope = scope
        self.cls = cls
        self.depth = depth
        name = scope.name.value if isinstance(scope, cst.FunctionDef) else "<module>"
        self.result = ScopePlacement(node=scope, name=name, cls=cls)
        self.env: Env = {}
        self.bound = bound
        self.loop_depth = 0
        self.seen: set[tuple[int, int, int]] = set()

    # -- entry -------------------------------------------------------------------------
    def run(self) -> ScopePlacement:
        scope = self.scope
        if isinstance(scope, cst.FunctionDef):
            self._bind_params(scope)
            body = scope.body.body if isinstance(scope.body, cst.IndentedBlock) else (scope.body,)
        else:
            body = scope.body  # type: ignore[attr-defined]
        self._block(body)
        self.result.facts = self.env
        return self.result

    def _bind_params(self, func: cst.FunctionDef) -> None:
        params = list(func.params.posonly_params) + list(func.params.params) + list(func.params.kwonly_params)
        if self.cls is not None or self._in_class(func):
            if params and params[0].name.value in ("self", "cls"):
                params = params[1:]
        if self.bound is not None:
            for param in params:
                self.env[param.name.value] = self.bound.get(param.name.value, UNKNOWN_FACT)
            return
        if not self._follows_inputs(func):
            return
        evidence = self._tensor_evidence(func, {p.name.value for p in params})
        for param in params:
            name = param.name.value
            if _annotation_is_tensor(param.annotation) or name in evidence:
                self.env[name] = Fact(DEVICE, where=FOLLOWS, device_expr=f"{name}.device")
                self.result.device_params.append(name)

    def _follows_inputs(self, func: cst.FunctionDef) -> bool:
        """Whether the function's tensor parameters may live on the device: module methods and
        plain functions do; methods of other classes (datasets, collators, trainers) and data
        preparation code are left alone."""
        if self.cls is not None:
            return True
        if self._in_class(func):
            return False
        name = func.name.value.lower()
        if any(word in name for word in _DATA_WORDS):
            return False
        path = self.ctx.path.replace("\\", "/").rsplit("/", 1)[-1].lower()
        return not any(word in path for word in _DATA_WORDS)

    def _in_class(self, func: cst.FunctionDef) -> bool:
        return isinstance(self.ctx.index.parent(self.ctx.index.parent(func) or func), cst.ClassDef)

    def _tensor_evidence(self, func: cst.FunctionDef, names: set[str]) -> set[str]:
        """Parameters that the body uses the way only a tensor is used (`x.size(1)`, `x.view(...)`),
        or passes to one of the class's submodules."""
        uses = self.analysis.tensor_uses.get(id(func), ())
        submodules = self.cls.submodules if self.cls is not None else {}
        return {name for name, attr in uses if name in names and (attr is None or attr in submodules)}

    # -- statements --------------------------------------------------------------------
    def _block(self, body) -> None:  # type: ignore[no-untyped-def]
        for stmt in body:
            self._statement(stmt)

    def _statement(self, stmt: cst.CSTNode) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self._small(small)
        elif isinstance(stmt, cst.If):
            self._if(stmt)
        elif isinstance(stmt, (cst.For, cst.While)):
            self._loop(stmt)
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                self._eval(item.item)
                if item.asname is not None:
                    self._bind(item.asname.name, UNKNOWN_FACT)
            self._suite(stmt.body)
        elif isinstance(stmt, cst.Try):
            self._suite(stmt.body)
            for handler in stmt.handlers:
                self._suite(handler.body)
            if stmt.orelse is not None:
                self._suite(stmt.orelse.body)
            if stmt.finalbody is not None:
                self._suite(stmt.finalbody.body)
        elif isinstance(stmt, cst.IndentedBlock):
            self._block(stmt.body)

    def _suite(self, suite: cst.BaseSuite) -> None:
        if isinstance(suite, cst.IndentedBlock):
            self._block(suite.body)
        elif isinstance(suite, cst.SimpleStatementSuite):
            for small in suite.body:
                self._small(small)

    def _if(self, stmt: cst.If) -> None:
        self._eval(stmt.test)
        strict = is_device_guard(stmt.test, self.ctx)
        before = dict(self.env)
        self._suite(stmt.body)
        after_body = self.env
        self.env = dict(before)
        if isinstance(stmt.orelse, cst.If):
            self._if(stmt.orelse)
        elif isinstance(stmt.orelse, cst.Else):
            self._suite(stmt.orelse.body)
        self.env = _join_envs(after_body, self.env, strict)

    def _loop(self, stmt: cst.For | cst.While) -> None:
        if isinstance(stmt, cst.For):
            iterable = self._eval(stmt.iter)
        else:
            self._eval(stmt.test)
        before = dict(self.env)
        self.loop_depth += 1
        passes = 2 if self.loop_depth <= _MAX_LOOP_DEPTH else 1
        for _ in range(passes):
            if isinstance(stmt, cst.For):
                self._bind_loop_target(stmt, iterable)
            self._suite(stmt.body)
            self.env = _join_envs(before, self.env, strict=False)
        self.loop_depth -= 1
        if stmt.orelse is not None:
            self._suite(stmt.orelse.body)

    def _bind_loop_target(self, stmt: cst.For, iterable: Fact) -> None:
        target = stmt.target
        source = stmt.iter
        # enumerate(loader) / tqdm(loader) / iter(loader)
        if isinstance(source, cst.Call) and isinstance(source.func, (cst.Name, cst.Attribute)) and source.args:
            wrapper = source.func.value if isinstance(source.func, cst.Name) else source.func.attr.value
            if wrapper == "enumerate" and isinstance(target, cst.Tuple) and len(target.elements) == 2:
                self._bind(target.elements[0].value, UNKNOWN_FACT)
                inner = self._loader_inner(source.args[0].value)
                self._bind_batch(target.elements[1].value, inner)
                return
            if wrapper in ("tqdm", "iter"):
                self._bind_batch(target, self._loader_inner(source.args[0].value))
                return
        if self._is_loader(source, iterable):
            self._bind_batch(target, True)
            return
        if iterable.kind == MODULE:
            self._bind(target, Fact(MODULE, where=iterable.where))
            return
        self._bind(target, UNKNOWN_FACT)

    def _loader_inner(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("tqdm", "iter") and node.args:
            return self._loader_inner(node.args[0].value)
        return self._is_loader(node, self._fact_of(node))

    def _is_loader(self, node: cst.BaseExpression, fact: Fact) -> bool:
        if fact == LOADER:
            return True
        if isinstance(node, cst.Call):
            if self.ctx.qualified_name(node.func) in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
                return True
            node = node.func
        if isinstance(node, cst.Name) and node.value in self.env and self.env[node.value] != LOADER:
            return False
        last = node.attr.value if isinstance(node, cst.Attribute) else node.value if isinstance(node, cst.Name) else ""
        return "loader" in last.lower()

    def _bind_batch(self, target: cst.BaseExpression, is_batch: bool) -> None:
        if not is_batch:
            self._bind(target, UNKNOWN_FACT)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value, Fact(CPU, where="cpu", origin=element.value, batch=True))
        else:
            # The whole batch may be a dict, a list or a BatchEncoding: only its parts are tensors.
            self._bind(target, Fact(UNKNOWN, origin=target, batch=True))

    def _small(self, small: cst.CSTNode) -> None:
        if isinstance(small, cst.Assign):
            fact = self._eval(small.value)
            if isinstance(small.value, cst.Call) and self._is_loader(small.value, fact) and not isinstance(small.value.func, cst.Attribute):
                fact = LOADER
            for target in small.targets:
                self._bind(target.target, fact, small.value)
        elif isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self._bind(small.target, self._eval(small.value), small.value)
        elif isinstance(small, cst.AugAssign):
            self._aug_assign(small)
        elif isinstance(small, cst.Expr):
            self._expression_statement(small.value)
        elif isinstance(small, cst.Return):
            if small.value is not None:
                self._return(small.value)
        elif isinstance(small, (cst.Assert,)):
            self._eval(small.test)

    def _expression_statement(self, value: cst.BaseExpression) -> None:
        fact = self._eval(value)
        # `model.to(device)` moves a module in place; for a tensor it does nothing (DL104).
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in MOVE_METHODS:
            receiver = value.func.value
            key = self._key(receiver)
            if key is not None and not self._fact_of(receiver).is_tensor:
                where = fact.where if fact.where in (ACCELERATOR, "cpu") else None
                self.env[key] = Fact(MODULE, where=where, device_expr=fact.device_expr)

    def _return(self, value: cst.BaseExpression) -> None:
        fact = self._eval(value)
        self.result.returns = fact if self.result.returns is None else join(self.result.returns, fact)
        if self.cls is not None and self.result.name == "forward" and self.bound is None and (self.cls.submodules or self.cls.registered):
            for element, node in _flatten(fact, value):
                if element.from_factory and not element.scalar:
                    self._record(element, node, Fact(DEVICE, where=FOLLOWS), None, value, "return")

    def _aug_assign(self, node: cst.AugAssign) -> None:
        target = self._eval(node.target)
        value = self._eval(node.value)
        if target.kind == CPU and (target.from_factory or target.batch) and _devicey(value) and _compatible(target, value):
            self._record(target, node.target, value, node.value, node, "inplace")
            result = target
        elif target.kind == UNKNOWN and target.where != ACCELERATOR:
            result = value if _devicey(value) else UNKNOWN_FACT
        elif target.kind == CPU and value.kind not in (CPU,) and value != NUMBER:
            result = UNKNOWN_FACT if not _devicey(value) else target
        else:
            result = target
        self._bind(node.target, result)

    # -- binding -----------------------------------------------------------------------
    def _key(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Name):
            return node.value
        attr = self_attribute(node)
        return f"self.{attr}" if attr is not None else None

    def _bind(self, target: cst.BaseExpression, fact: Fact, value: cst.BaseExpression | None = None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = target.elements
            if fact.elements is not None and len(fact.elements) == len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements):
                for element, sub in zip(elements, fact.elements):
                    self._bind(element.value, sub)
            elif fact.batch:
                self._bind_batch(target, True)
            elif fact.is_tensor:
                # `q, k, v = qkv.chunk(3)`: the pieces of a tensor live where it lives
                for element in elements:
                    self._bind(element.value, replace(fact, scalar=False))
            else:
                for element in elements:
                    self._bind(element.value, UNKNOWN_FACT)
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, UNKNOWN_FACT)
            return
        key = self._key(target)
        if key is not None:
            self.env[key] = fact

    # -- expressions -------------------------------------------------------------------
    def _fact_of(self, node: cst.CSTNode) -> Fact:
        return self.result.expr_facts.get(id(node), UNKNOWN_FACT)

    def _eval(self, node: cst.CSTNode) -> Fact:
        fact = self._eval_inner(node)
        if fact is not UNKNOWN_FACT and fact != UNKNOWN_FACT:
            self.result.expr_facts[id(node)] = fact
        return fact

    def _eval_inner(self, node: cst.CSTNode) -> Fact:
        if isinstance(node, cst.Name):
            if node.value in self.env:
                return self.env[node.value]
            if _looks_like_device_name(node.value):
                return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=node.value)
            return UNKNOWN_FACT
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.Attribute):
            return self._attribute(node)
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary)):
            return NUMBER
        if isinstance(node, cst.SimpleString):
            text = _string_value(node)
            return (_device_string_fact(text) if text else None) or UNKNOWN_FACT
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node, self._eval(node.left), self._eval(node.right), node.left, node.right)
        if isinstance(node, cst.Comparison):
            return self._comparison(node)
        if isinstance(node, cst.UnaryOperation):
            fact = self._eval(node.expression)
            return fact if fact.is_tensor or fact == NUMBER else UNKNOWN_FACT
        if isinstance(node, cst.BooleanOperation):
            self._eval(node.left)
            self._eval(node.right)
            return UNKNOWN_FACT
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.IfExp):
            self._eval(node.test)
            return join(self._eval(node.body), self._eval(node.orelse), is_device_guard(node.test, self.ctx))
        if isinstance(node, (cst.Tuple, cst.List)):
            facts = tuple(self._eval(e.value) if not isinstance(e, cst.StarredElement) else UNKNOWN_FACT for e in node.elements)
            return Fact(UNKNOWN, elements=facts)
        if isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement):
                    self._eval(element.value)
            return UNKNOWN_FACT
        if isinstance(node, cst.NamedExpr):
            fact = self._eval(node.value)
            self._bind(node.target, fact)
            return fact
        return UNKNOWN_FACT

    def _attribute(self, node: cst.Attribute) -> Fact:
        attr = node.attr.value
        key = self._key(node)
        if key is not None and key in self.env:
            return self.env[key]
        if self.cls is not None and isinstance(node.value, cst.Name) and node.value.value == "self":
            if attr in self.cls.registered:
                return Fact(DEVICE, where=FOLLOWS, device_expr=f"self.{attr}.device")
            if attr in self.cls.submodules:
                return Fact(MODULE, where=FOLLOWS, factory=self.cls.submodules[attr])
            if attr == "device":
                return Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr="self.device")
            return UNKNOWN_FACT
        receiver = self._eval(node.value)
        if attr == "device":
            if receiver.kind == CPU:
                return Fact(DEVICE_VALUE, where="cpu")
            if receiver.kind in (DEVICE, MODULE) or receiver.where:
                where = receiver.where if receiver.where in (FOLLOWS, ACCELERATOR) else None
            elif isinstance(node.value, cst.Name) and node.value.value not in _CONFIG_NAMES:
                where = FOLLOWS  # a local tensor of unknown placement: wherever it is
            else:
                where = ACCELERATOR  # `cfg.device`, `args.device`, `self.trainer.device`
            return Fact(DEVICE_VALUE, where=where, device_expr=self.ctx.code_for(node))
        if receiver.is_tensor and attr in _TENSOR_VIEW_ATTRS:
            return replace(receiver, scalar=False)
        if receiver.kind == MODULE and receiver.where in (FOLLOWS, ACCELERATOR) and attr in _MODULE_TENSOR_ATTRS:
            return Fact(DEVICE, where=receiver.where, device_expr=f"{self.ctx.code_for(node)}.device")
        return UNKNOWN_FACT

    def _subscript(self, node: cst.Subscript) -> Fact:
        value = self._eval(node.value)
        for element in node.slice:
            if isinstance(element.slice, cst.Index):
                self._eval(element.slice.value)
        if value.elements is not None and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            index = node.slice[0].slice.value
            if isinstance(index, cst.Integer):
                position = int(index.value, 0)
                if -len(value.elements) <= position < len(value.elements):
                    return value.elements[position]
            return UNKNOWN_FACT
        if value.batch:
            return Fact(CPU, where="cpu", origin=node, batch=True)
        if value.is_tensor:
            return replace(value, scalar=False)
        if value.kind == MODULE:
            return value
        return UNKNOWN_FACT

    def _binary(self, node: cst.CSTNode, left: Fact, right: Fact, left_node: cst.CSTNode, right_node: cst.CSTNode) -> Fact:
        for a, a_node, b, b_node in ((left, left_node, right, right_node), (right, right_node, left, left_node)):
            if _cpu_side(a, allow_scalar=False) and _devicey(b) and _compatible(a, b):
                self._record(a, a_node, b, b_node, node, "op")
                return b if b.kind == DEVICE else Fact(DEVICE, where=b.where, device_expr=b.device_expr)
        for fact in (left, right):
            if _devicey(fact):
                return Fact(DEVICE, where=fact.where, device_expr=fact.device_expr)
        if left.kind == CPU and (right.kind == CPU or right == NUMBER):
            return replace(left, scalar=left.scalar and (right.scalar or right == NUMBER), batch=left.batch and right.batch)
        if right.kind == CPU and left == NUMBER:
            return right
        if left == NUMBER and right == NUMBER:
            return NUMBER
        return UNKNOWN_FACT

    def _comparison(self, node: cst.Comparison) -> Fact:
        left_node: cst.CSTNode = node.left
        left = self._eval(node.left)
        result = left
        for target in node.comparisons:
            right = self._eval(target.comparator)
            if isinstance(target.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)):
                result = UNKNOWN_FACT
            else:
                result = self._binary(node, left, right, left_node, target.comparator)
            left, left_node = right, target.comparator
        return result if result.is_tensor else UNKNOWN_FACT

    # -- calls -------------------------------------------------------------------------
    def _args(self, call: cst.Call) -> list[tuple[Fact, cst.CSTNode]]:
        out = []
        for arg in call.args:
            fact = self._eval(arg.value)
            if not arg.star:
                out.extend(_flatten(fact, arg.value))
        return out

    def _call(self, call: cst.Call) -> Fact:
        func = call.func
        qualified = self.ctx.qualified_name(func)
        if qualified is not None and qualified.startswith("torch."):
            return self._torch_call(call, qualified)
        if isinstance(func, cst.Attribute):
            return self._method_call(call, func)
        if isinstance(func, cst.Name):
            return self._name_call(call, func)
        self._args(call)
        return UNKNOWN_FACT

    def _device_argument(self, call: cst.Call) -> tuple[bool, Fact, cst.CSTNode | None]:
        for arg in call.args:
            if arg.star == "**":
                return True, UNKNOWN_FACT, None
            if arg.keyword is not None and arg.keyword.value == "device":
                return True, self._eval(arg.value), arg.value
            if arg.keyword is not None and arg.keyword.value == "out":
                return True, UNKNOWN_FACT, None
        return False, UNKNOWN_FACT, None

    def _placed(self, device: Fact, node: cst.CSTNode | None) -> Fact:
        """The fact of a tensor created on `device`."""
        if device.kind == DEVICE_VALUE:
            if device.where == "cpu":
                return Fact(CPU, where="cpu")
            return Fact(DEVICE, where=device.where or ACCELERATOR, device_expr=device.device_expr or (self.ctx.code_for(node) if node is not None else None))
        if device.kind == DEVICE:
            return Fact(DEVICE, where=device.where, device_expr=device.device_expr)
        if device.kind == CPU:
            return Fact(CPU, where="cpu")
        if device.where == ACCELERATOR:
            return Fact(DEVICE, where=ACCELERATOR, device_expr=self.ctx.code_for(node) if node is not None else None)
        return UNKNOWN_FACT

    def _torch_call(self, call: cst.Call, qualified: str) -> Fact:
        short = qualified[len("torch."):]
        if short in FACTORIES or short in LIKE_FACTORIES:
            return self._factory(call, short)
        if qualified == "torch.device":
            args = self._args(call)
            if call.args and not call.args[0].keyword:
                text = _string_value(call.args[0].value)
                if text is not None:
                    return _device_string_fact(text) or Fact(DEVICE_VALUE)
            return Fact(DEVICE_VALUE, where=ACCELERATOR if args else None, device_expr=self.ctx.code_for(call))
        if qualified in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
            self._args(call)
            return LOADER
        constructed = module_constructor(self.ctx, call)
        if constructed is not None:
            self._args(call)
            return Fact(MODULE, factory=constructed)
        last = qualified.rsplit(".", 1)[-1]
        namespace = qualified[: len(qualified) - len(last)]
        if namespace not in TENSOR_NAMESPACES or last in NON_TENSOR_FUNCTIONS or last[:1].isupper() or last.startswith("_"):
            self._args(call)
            return UNKNOWN_FACT
        args = self._args(call)
        if qualified in CROSS_DEVICE_FUNCTIONS:
            return UNKNOWN_FACT
        return self._combine(call, args, allow_scalar=False)

    def _combine(self, call: cst.CSTNode, args: list[tuple[Fact, cst.CSTNode]], allow_scalar: bool,
                 receiver: tuple[Fact, cst.CSTNode] | None = None) -> Fact:
        """Tensor arguments of one op must share a device: record a meeting if they do not."""
        facts = ([receiver] if receiver is not None else []) + args
        device = next(((f, n) for f, n in facts if _devicey(f)), None)
        if device is not None:
            for fact, node in facts:
                if _cpu_side(fact, allow_scalar) and _compatible(fact, device[0]):
                    self._record(fact, node, device[0], device[1], call, "op")
                    break
            return Fact(DEVICE, where=device[0].where, device_expr=device[0].device_expr)
        tensors = [(f, n) for f, n in facts if f != NUMBER]
        if tensors and all(f.kind == CPU for f, _ in tensors):
            return replace(tensors[0][0], scalar=False)
        return UNKNOWN_FACT

    def _factory(self, call: cst.Call, short: str) -> Fact:
        args = self._args(call)
        has_device, device, device_node = self._device_argument(call)
        if has_device:
            return self._placed(device, device_node)
        if short in LIKE_FACTORIES:
            return replace(args[0][0], scalar=False, origin=args[0][0].origin) if args and args[0][0].is_tensor else UNKNOWN_FACT
        if short in DATA_FACTORIES or short in LEGACY_CONSTRUCTORS or short == "from_numpy":
            first = call.args[0].value if call.args and not call.args[0].keyword else None
            if short == "from_numpy":
                pass
            elif first is None or not _is_literal_data(first):
                data = args[0][0] if args else UNKNOWN_FACT
                return data if data.is_tensor and short != "Tensor" else UNKNOWN_FACT
        if self._under_device_guard(call) or _is_empty_placeholder(call, short):
            return UNKNOWN_FACT
        scalar = short in ("tensor", "as_tensor", "scalar_tensor") and bool(call.args) and _is_number(call.args[0].value)
        if short in ("zeros", "ones", "empty", "full", "rand", "randn") and call.args and isinstance(call.args[0].value, (cst.Tuple, cst.List)) and not call.args[0].value.elements:
            scalar = True
        return Fact(CPU, where="cpu", origin=call, factory=f"torch.{short}", scalar=scalar)

    def _under_device_guard(self, node: cst.CSTNode) -> bool:
        for ancestor in self.ctx.index.ancestors(node):
            if ancestor is self.scope:
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.While)) and is_device_guard(ancestor.test, self.ctx):
                return True
        return False

    def _move(self, call: cst.Call, receiver: Fact, method: str) -> Fact:
        target: Fact | None = None
        node: cst.CSTNode | None = None
        if method == "cpu":
            target = Fact(DEVICE_VALUE, where="cpu")
        elif method in ("cuda", "xpu", "mps"):
            self._args(call)
            target = Fact(DEVICE_VALUE, where=ACCELERATOR, device_expr=f'"{method}"')
            if call.args:
                node = call.args[0].value
                target = replace(target, device_expr=self.ctx.code_for(node))
        else:
            dtype_only = True
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in ("non_blocking", "copy", "memory_format", "dtype"):
                    self._eval(arg.value)
                    continue
                fact = self._eval(arg.value)
                spelled = dotted_name(arg.value) or ""
                if fact.kind == DEVICE_VALUE:
                    target, node = fact, arg.value
                elif fact.is_tensor or _devicey(fact):
                    target, node = self._placed(fact, arg.value), arg.value
                    target = Fact(DEVICE_VALUE, where=target.where if target.kind == DEVICE else "cpu", device_expr=target.device_expr)
                elif "dtype" in spelled or (self.ctx.qualified_name(arg.value) or "").startswith("torch.") and arg.keyword is None:
                    continue
                else:
                    dtype_only = False
                    continue
                dtype_only = False
            if target is None:
                if dtype_only and call.args:
                    return replace(receiver, scalar=receiver.scalar)
                return Fact(MODULE) if receiver.kind == MODULE else UNKNOWN_FACT
        if receiver.kind == MODULE:
            return Fact(MODULE, where=target.where, factory=receiver.factory, device_expr=target.device_expr)
        if target.where == "cpu":
            return Fact(CPU, where="cpu")
        if receiver.is_tensor or receiver.batch:
            return Fact(DEVICE, where=target.where or ACCELERATOR, device_expr=target.device_expr)
        if target.where == ACCELERATOR:
            return Fact(UNKNOWN, where=ACCELERATOR, device_expr=target.device_expr)
        return UNKNOWN_FACT

    def _method_call(self, call: cst.Call, func: cst.Attribute) -> Fact:
        method = func.attr.value
        # self.helper(...) and self.submodule(...)
        if self.cls is not None and isinstance(func.value, cst.Name) and func.value.value == "self":
            attr_key = f"self.{method}"
            if attr_key in self.env:
                callee = self.env[attr_key]
                if callee.kind == MODULE or (callee.kind == UNKNOWN and callee.where == ACCELERATOR):
                    return self._module_call(call, callee, func)
            elif method in self.cls.submodules:
                return self._module_call(call, Fact(MODULE, where=FOLLOWS, factory=self.cls.submodules[method]), func)
            elif method in self.cls.methods:
                args = self._args(call)
                return self._follow(self.cls.methods[method], call, args, skip_self=True)
        receiver_node = func.value
        receiver = self._eval(receiver_node)
        if receiver.kind == MODULE and method == "forward":
            return self._module_call(call, receiver, func)
        if method in MOVE_METHODS:
            return self._move(call, receiver, method)
        if method == "type_as" and call.args:
            target = self._eval(call.args[0].value)
            if receiver.is_tensor and target.is_tensor:
                return replace(target, origin=receiver.origin if target.kind == CPU else None, factory=receiver.factory if target.kind == CPU else None)
            return UNKNOWN_FACT
        if method in NEW_METHODS:
            self._args(call)
            has_device, device, device_node = self._device_argument(call)
            if has_device:
                return self._placed(device, device_node)
            return replace(receiver, scalar=False) if receiver.is_tensor else UNKNOWN_FACT
        if not receiver.is_tensor and not receiver.batch:
            self._args(call)
            if method in ("parameters", "buffers") and receiver.kind == MODULE and receiver.where:
                return Fact(UNKNOWN)
            return UNKNOWN_FACT
        args = self._args(call)
        if method in INPLACE_METHODS and receiver.kind == CPU:
            device = next(((f, n) for f, n in args if _devicey(f)), None)
            if device is not None and (receiver.from_factory or receiver.batch) and _compatible(receiver, device[0]):
                self._record(receiver, receiver_node, device[0], device[1], call, "inplace")
                return receiver
        if method in MEETING_METHODS:
            scalar_ok = method not in ("matmul", "mm", "bmm", "gather", "index_select", "masked_select")
            result = self._combine(call, args, allow_scalar=not scalar_ok, receiver=(receiver, receiver_node))
            return result if result.kind != UNKNOWN else replace(receiver, scalar=False)
        if receiver.batch and receiver.kind != CPU:
            return UNKNOWN_FACT
        if method in PRESERVING_METHODS:
            return replace(receiver, scalar=receiver.scalar and method in _CAST_METHODS)
        return UNKNOWN_FACT

    def _name_call(self, call: cst.Call, func: cst.Name) -> Fact:
        name = func.value
        if name in self.env:
            callee = self.env[name]
            if callee.kind == MODULE or (callee.kind == UNKNOWN and callee.where == ACCELERATOR):
                return self._module_call(call, callee, func)
            if name.lower() in LOSS_CALLABLE_NAMES or callee.kind in (CPU, DEVICE):
                return self._combine(call, self._args(call), allow_scalar=True)
        elif name.lower() in LOSS_CALLABLE_NAMES:
            return self._combine(call, self._args(call), allow_scalar=True)
        if name == "next" and call.args:
            inner = call.args[0].value
            self._eval(inner)
            if (isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute)
                    and inner.func.attr.value in ("parameters", "buffers")):
                owner = self._eval(inner.func.value) if not (isinstance(inner.func.value, cst.Name) and inner.func.value.value == "self") else Fact(MODULE, where=FOLLOWS)
                if owner.kind == MODULE and owner.where in (FOLLOWS, ACCELERATOR):
                    return Fact(DEVICE, where=owner.where, device_expr=f"{self.ctx.code_for(call)}.device")
            return UNKNOWN_FACT
        functions = self.analysis.functions
        if name in functions:
            args = self._args(call)
            return self._follow(functions[name], call, args, skip_self=False)
        constructed = module_constructor(self.ctx, call)
        if constructed is not None:
            self._args(call)
            return Fact(MODULE, factory=constructed)
        self._args(call)
        return UNKNOWN_FACT

    def _module_call(self, call: cst.Call, callee: Fact, func: cst.CSTNode) -> Fact:
        args = self._args(call)
        on_device = callee.where in (FOLLOWS, ACCELERATOR) and (callee.factory or "") not in PARAMETER_FREE_MODULES
        if on_device:
            for fact, node in args:
                if _cpu_side(fact, allow_scalar=True) and _compatible(fact, callee):
                    self._record(fact, node, callee, func, call, "module")
            expr = next((f.device_expr for f, _ in args if f.kind == DEVICE and f.device_expr), None)
            return Fact(DEVICE, where=callee.where, device_expr=expr)
        return self._combine(call, args, allow_scalar=True)

    def _follow(self, func: cst.FunctionDef, call: cst.Call, args: list, skip_self: bool) -> Fact:
        """Analyse a same-file function with the call's argument facts (one level deep)."""
        if self.depth >= 1 or func is self.scope:
            return UNKNOWN_FACT
        params = list(func.params.posonly_params) + list(func.params.params)
        if skip_self and params:
            params = params[1:]
        bound: Env = {}
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if any(a.star for a in call.args):
            return UNKNOWN_FACT
        for param, arg in zip(params, positional):
            bound[param.name.value] = self._fact_of(arg.value) if arg.value is not None else UNKNOWN_FACT
        for arg in call.args:
            if arg.keyword is not None:
                bound[arg.keyword.value] = self._fact_of(arg.value)
        if not any(f.kind != UNKNOWN or f.where for f in bound.values()) and params:
            # Nothing known flows in: the function's own analysis already covers it.
            summary = self.analysis.scope(func)
            return summary.returns or UNKNOWN_FACT
        key = (id(func), tuple(sorted((k, v.kind, v.where, id(v.origin)) for k, v in bound.items())))
        cached = self.analysis.followed.get(key)
        if cached is None:
            interpreter = _Interpreter(self.ctx, self.analysis, func, self.cls if skip_self else None, bound, self.depth + 1)
            cached = interpreter.run()
            self.analysis.followed[key] = cached
            self.analysis.extra_meetings.extend(cached.meetings)
        return cached.returns or UNKNOWN_FACT

    def _record(self, cpu: Fact, cpu_node: cst.CSTNode, device: Fact, device_node: cst.CSTNode | None,
                node: cst.CSTNode, how: str) -> None:
        key = (id(node), id(cpu_node), id(cpu.origin))
        if key not in self.seen:
            self.seen.add(key)
            self.result.meetings.append(Meeting(cpu, cpu_node, device, device_node, node, how, self.scope))


def _is_number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, (cst.Integer, cst.Float)) or isinstance(node, cst.Name) and node.value in ("True", "False"):
        return True
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("float", "int")
            and len(node.args) == 1 and isinstance(node.args[0].value, cst.SimpleString))


def _is_empty_placeholder(call: cst.Call, short: str) -> bool:
    """`torch.empty(0)`, `torch.zeros([0])`: a size-0 placeholder that no kernel reads."""
    if short not in ("empty", "zeros", "ones", "tensor") or not call.args:
        return False
    first = call.args[0].value
    if isinstance(first, (cst.List, cst.Tuple)):
        if short == "tensor":
            return not first.elements
        if len(first.elements) != 1:
            return False
        first = first.elements[0].value
    return short != "tensor" and isinstance(first, cst.Integer) and first.value == "0"


def _is_literal_data(node: cst.BaseExpression) -> bool:
    """Numbers and (nested) lists/tuples of numbers or names: data that cannot be a tensor."""
    if _is_number(node):
        return True
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(
            not isinstance(e, cst.StarredElement) and (_is_literal_data(e.value) or isinstance(e.value, cst.Name))
            for e in node.elements
        ) and bool(node.elements)
    if isinstance(node, cst.ListComp):
        return True
    return False


class _FileAnalysis:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.classes = class_facts(ctx)
        self.functions: dict[str, cst.FunctionDef] = {
            stmt.name.value: stmt for stmt in ctx.module.body if isinstance(stmt, cst.FunctionDef)
        }
        self.scopes: dict[int, ScopePlacement] = {}
        self.followed: dict[tuple, ScopePlacement] = {}
        self.extra_meetings: list[Meeting] = []
        # id(function) -> (name, None) for `name.size(...)`-style uses, (name, attr) for `self.attr(name)`
        self.tensor_uses: dict[int, list[tuple[str, str | None]]] = {}
        index = ctx.index
        for node in index.of_type(cst.Attribute):
            if node.attr.value in TENSOR_ONLY_METHODS and isinstance(node.value, cst.Name):
                func = index.enclosing_function(node)
                if func is not None:
                    self.tensor_uses.setdefault(id(func), []).append((node.value.value, None))
        if self.classes:
            for call in index.of_type(cst.Call):
                attr = self_attribute(call.func)
                if attr is None:
                    continue
                names = [a.value.value for a in call.args if isinstance(a.value, cst.Name) and not a.star]
                if names:
                    func = index.enclosing_function(call)
                    if func is not None:
                        self.tensor_uses.setdefault(id(func), []).extend((n, attr) for n in names)
        self._class_of: dict[int, ClassFacts] = {}
        for facts in self.classes.values():
            for method in facts.methods.values():
                self._class_of[id(method)] = facts

    def scope(self, node: cst.CSTNode) -> ScopePlacement:
        found = self.scopes.get(id(node))
        if found is None:
            # Placeholder first: a recursive call reaching this scope sees an empty summary.
            self.scopes[id(node)] = ScopePlacement(node=node, name="", cls=None)
            found = _Interpreter(self.ctx, self, node, self._class_of.get(id(node)), None, 0).run()
            self.scopes[id(node)] = found
        return found

    def run(self) -> FilePlacement:
        self.scope(self.ctx.module)
        for func in self.ctx.index.of_type(cst.FunctionDef):
            self.scope(func)
        meetings = [m for s in self.scopes.values() for m in s.meetings] + self.extra_meetings
        return FilePlacement(scopes=self.scopes, meetings=meetings)


def file_placement(ctx: FileContext) -> FilePlacement:
    """Every scope's placement facts and every CPU/device meeting of the file (memoised)."""
    return ctx.shared("placement", lambda c: _FileAnalysis(c).run())


def placement_of_function(ctx: FileContext, node: cst.CSTNode) -> ScopePlacement:
    """The placement facts of one function (or of the module's top-level code for a `cst.Module`)."""
    return file_placement(ctx).scopes[id(node)]


def value_kind(ctx: FileContext, expr: cst.CSTNode) -> Fact:
    """The fact of one expression, as the analysis of its enclosing scope evaluated it."""
    scope: cst.CSTNode = ctx.index.enclosing_function(expr) or ctx.module
    placement = file_placement(ctx).scopes.get(id(scope))
    if placement is None:
        return UNKNOWN_FACT
    return placement.expr_facts.get(id(expr), UNKNOWN_FACT)
