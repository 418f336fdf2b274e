from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from devicelint.analysis.device_tests import CUDA_DEFAULT_TYPE, flag_rebuilt_devices, type_string_cuda_tests
from devicelint.analysis.facts import file_facts
from devicelint.analysis.instance_parameters import instance_class
from devicelint.analysis.model_events import scope_facts, statement_of
from devicelint.analysis.modules import methods
from devicelint.analysis.names import SETTINGS_NAMES, dotted_name, literal_value
from devicelint.analysis.placement_facts import DEVICE_VALUE, Fact
from devicelint.analysis.placement_scope import is_test_path
from devicelint.analysis.placement_values import annotation_is_settings, configured_defaults
from devicelint.context import FileContext
from devicelint.rule_base import FixProposal, Rule, Violation, register

DEVICE_STRING = re.compile(r"^(cpu|cuda|mps|xpu|hip|npu|hpu|xla|meta|mtia|ipu|vulkan|lazy)(:\d+)?$")


def _string_value(node: cst.BaseExpression) -> str | None:
    if type(node) is cst.SimpleString and "b" not in node.prefix.lower():
        value = literal_value(node)
        return value if isinstance(value, str) else None
    return None


def _device_attribute(node: cst.BaseExpression) -> cst.Attribute | None:
    if type(node) is cst.Attribute and node.attr.value == "device":
        return node
    return None


def _looks_like_config(receiver: cst.BaseExpression) -> bool:
    names = []
    while type(receiver) is cst.Attribute:
        names.append(receiver.attr.value)
        receiver = receiver.value
    if type(receiver) is cst.Name:
        names.append(receiver.value)
    if not names:
        return False
    # `self.device` is often a config string in trainers; `self.args.device` certainly is.
    return names[-1] == "self" and len(names) == 1 or any(n.lower() in SETTINGS_NAMES for n in names)


def _settings_typed(ctx: FileContext, receiver: cst.BaseExpression) -> bool:
    """A parameter annotated as a settings object (`opts: argparse.Namespace`)."""
    if type(receiver) is not cst.Name:
        return False
    function = ctx.index.enclosing_function(receiver)
    param = _param(function, receiver.value) if function is not None else None
    return param is not None and annotation_is_settings(param.annotation)


# ---------------------------------------------------------------------------- device values
# What the file shows about a value that is compared with a device. Only `OBJECT` is
# certain; the other kinds need the evidence they carry before a comparison is reported.
OBJECT = "object"  # certainly a `torch.device` (built with `torch.device(...)`, `x.device`, annotated)
STRING = "string"  # a device string whose text the file shows (`"cuda"`, `f"cuda:{rank}"`)
PARAMETER = "parameter"  # an unannotated `device` parameter: whatever the caller passes
CONFIGURED = "configured"  # a configuration field or `str` parameter: usually a device string
INDEXED = "cuda:<n>"  # the text of an f-string or concatenation that adds an index


@dataclass(frozen=True)
class DeviceValue:
    kind: str
    # The device text when known: "cuda", "cuda:0", INDEXED; for OBJECT, what it was built from.
    text: str | None = None
    # A tensor's or module's `.device`: on a GPU it always carries an index.
    tensor: bool = False
    # Why a PARAMETER/CONFIGURED value may be a `torch.device` or indexed, for the message.
    evidence: str | None = None
    # The evidence shows a `torch.device` (not only an indexed string) reaching the value.
    may_be_object: bool = False


# Base classes whose `device` property returns a `torch.device`.
DEVICE_PROPERTY_BASES = ("LightningModule", "PreTrainedModel", "ModelMixin")
_EXCLUDED_NAME_WORDS = ("type", "name", "str", "map", "count", "ids", "index", "kind", "mesh", "capab", "prop")


def device_like_name(name: str) -> bool:
    """`device`, `dev`, `data_device`: names that hold a device (not `device_type`, `device_ids`)."""
    name = name.lower()
    if any(word in name for word in _EXCLUDED_NAME_WORDS):
        return False
    return name in ("device", "dev") or name.endswith("_device") or name.startswith("device_")


def _is_torch_device_annotation(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """ "object" for `torch.device` (optionally `| None`/`Optional[...]`), "union" when a `str` is
    also allowed, "str" for `str`, else None."""
    text = ctx.code_for(node).replace(" ", "").strip("'\"")
    parts = [
        p
        for p in re.split(r"[\[\],|]", text)
        if p and p not in ("Optional", "Union", "None", "typing.Optional", "typing.Union")
    ]
    devices = [
        p
        for p in parts
        if p == "torch.device"
        or ctx.imports.bound.get(p.split(".", 1)[0], "") + p[len(p.split(".", 1)[0]) :] == "torch.device"
    ]
    if not parts:
        return None
    if devices and len(devices) == len(parts):
        return "object"
    if devices:
        return "union"
    if parts == ["str"]:
        return "str"
    return None


# (order of the binding in its scope, the value bound, the statement that binds it)
_Binding = tuple[int, cst.BaseExpression, cst.CSTNode]


class DeviceValues:
    """Resolves the device-ness of expressions in one file, flow-sensitively inside a function
    (the latest assignment that dominates the use) and through `self.<attr>`, module names and
    same-file callers of a function."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._assignments: dict[int, dict[str, list[_Binding]]] = {}
        self._type_reads: set[str] | None = None

    # -- entry -------------------------------------------------------------------------
    def value(self, node: cst.BaseExpression, depth: int = 0) -> DeviceValue | None:
        if depth > 5:
            return None
        ctx = self.ctx
        text = _string_value(node)
        if text is not None:
            return DeviceValue(STRING, text) if DEVICE_STRING.match(text) else None
        if type(node) is cst.FormattedString or (type(node) is cst.BinaryOperation and type(node.operator) is cst.Add):
            code = ctx.code_for(node)
            if re.match(r"^[fF]?['\"](cuda|xpu|npu|hpu|mps):", code):
                return DeviceValue(STRING, INDEXED)
            return None
        if type(node) is cst.IfExp:
            return _on_gpu(self.value(node.body, depth + 1), self.value(node.orelse, depth + 1))
        if type(node) is cst.Call:
            if ctx.qualified_name(node.func) == "torch.device":
                return DeviceValue(OBJECT, self._built_from(node, depth))
            return None
        if type(node) is cst.Attribute and node.attr.value == "device":
            receiver = node.value
            plain = self._plain_instance(receiver)
            if plain is not None:
                # an instance of a plain class of the file: its `device` is what its methods store
                stored = {
                    self.value(e[1], depth + 1)
                    for method in methods(plain).values()
                    for e in self._assignments_of(method, "self.device")
                }
                if stored and all(v is not None and v.kind == OBJECT for v in stored):
                    return DeviceValue(OBJECT)
                found = self._self_attribute(plain, "device", depth + 1)
                return found if found is not None and found.kind == OBJECT else None
            if (
                self._instance_of(receiver) is not None
                or _looks_like_config(receiver)
                or _settings_typed(ctx, receiver)
                or self._module_sets_string(node, depth)
            ):
                return self._named(node, depth)
            return DeviceValue(OBJECT, tensor=True)
        if type(node) in (cst.Name, cst.Attribute):
            return self._named(node, depth)
        return None

    # -- torch.device(...) -------------------------------------------------------------
    def _built_from(self, call: cst.Call, depth: int) -> str | None:
        """The device text `torch.device(...)` is built from, when the file shows it."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        inner = self.value(call.args[0].value, depth + 1)
        if inner is None or inner.kind not in (STRING, OBJECT, CONFIGURED):
            return None
        return inner.text

    # -- names, self attributes, configuration fields ----------------------------------
    def _named(self, node: cst.BaseExpression, depth: int) -> DeviceValue | None:
        key = dotted_name(node)
        if key is None:
            return None
        function = self.ctx.index.enclosing_function(node)
        scope: cst.FunctionDef | cst.Module = function or self.ctx.module
        if "." in key and scope is not self.ctx.module and not self._bound_in(function, key.split(".", 1)[0]):
            # `defaults.device = "cpu"` in the script's top-level code (under `__main__`), read
            # in a function of the file through the module-level object: a string on that path,
            # whatever the object was built with
            strings = [
                v
                for v in (self.value(e[1], depth + 1) for e in self._assignments_of(self.ctx.module, key))
                if v is not None and v.kind == STRING
            ]
            if strings:
                return strings[0]
        engine = file_facts(self.ctx).value(node)
        if engine.kind == DEVICE_VALUE and engine.spelled is not None:
            return _from_engine(engine)
        found = self._from_assignments(scope, key, node, depth)
        if found is not None:
            return found[0]
        if function is not None and "." not in key:
            param = _param(function, key)
            if param is not None:
                return self._parameter(function, param, depth)
        owner = self._instance_of(node.value) if type(node) is cst.Attribute else None
        if owner is not None and key.count(".") == 1:
            attribute = self._self_attribute(owner, key.split(".", 1)[1], depth)
            if attribute is not None:
                return attribute
        if "." not in key and scope is not self.ctx.module:
            module = self._from_assignments(self.ctx.module, key, None, depth)
            if module is not None:
                return module[0]
        if key in self.ctx.project.device_constants:
            return DeviceValue(OBJECT)  # `settings.DEVICE`: another module binds it to `torch.device(...)`
        if function is not None and "." in key:
            handed = self._through_handed_object(function, key, depth)
            if handed is not None:
                return handed
        if "." in key and key.rsplit(".", 1)[-1] == "device":
            return self._configured(key, depth)
        return None

    def _module_sets_string(self, node: cst.Attribute, depth: int) -> bool:
        """The file's top-level code sets this field of a module-level object to a device string
        (`defaults.device = "cpu"`): not a tensor's device."""
        key = dotted_name(node)
        if key is None or type(node.value) is not cst.Name:
            return False
        values = {self.value(e[1], depth + 1) for e in self._assignments_of(self.ctx.module, key)}
        return any(v is not None and v.kind == STRING for v in values)

    def _bound_in(self, function: cst.FunctionDef | None, name: str) -> bool:
        """`name` is a parameter of `function` or bound in it (not the module's object)."""
        if function is None or name == "self":
            return True
        return _param(function, name) is not None or bool(self._assignments_of(function, name))

    def _from_assignments(
        self, scope: cst.FunctionDef | cst.Module, key: str, use: cst.CSTNode | None, depth: int
    ) -> tuple[DeviceValue | None] | None:
        """(value,) from the assignments to `key` in `scope` before `use` (all of them when `use`
        is None): the latest one whose block holds `use`, else all that agree. None when the
        scope never assigns `key`."""
        entries = self._assignments_of(scope, key)
        if not entries:
            return None
        order = scope_facts(self.ctx, scope).order
        if use is not None:
            position = order.get(id(use))
            if position is None:
                return None
            # (an assignment's own value is read before it binds: `d = torch.device("cpu" if d ==
            # "cpu" else ...)` compares what `d` held before)
            around = {id(a) for a in self.ctx.index.ancestors(use) if type(a) is cst.SimpleStatementLine}
            entries = [e for e in entries if e[0] < position and id(e[2]) not in around]
            if not entries:
                return None
            latest = entries[-1]
            block = self.ctx.index.parent(latest[2])
            if block is not None and any(a is block for a in self.ctx.index.ancestors(use)):
                return (self.value(latest[1], depth + 1),)
        values = {self.value(e[1], depth + 1) for e in entries}
        return (values.pop(),) if len(values) == 1 else (None,)

    def _assignments_of(self, scope: cst.FunctionDef | cst.Module, key: str) -> list[_Binding]:
        by_key = self._assignments.get(id(scope))
        if by_key is None:
            by_key = self._assignments[id(scope)] = self._index_assignments(scope)
        return by_key.get(key, [])

    def _index_assignments(self, scope: cst.FunctionDef | cst.Module) -> dict[str, list[_Binding]]:
        """Every binding of the scope, by the dotted name it binds, in one pass."""
        facts = scope_facts(self.ctx, scope)
        by_key: dict[str, list[_Binding]] = {}
        for node in facts.nodes:
            if type(node) is cst.Assign:
                for key in {k for k in (dotted_name(t.target) for t in node.targets) if k is not None}:
                    by_key.setdefault(key, []).append((facts.order[id(node)], node.value, statement_of(self.ctx, node)))
            elif type(node) is cst.AnnAssign and node.value is not None:
                key = dotted_name(node.target)
                if key is not None:
                    by_key.setdefault(key, []).append((facts.order[id(node)], node.value, statement_of(self.ctx, node)))
            elif type(node) in (cst.For, cst.WithItem, cst.AugAssign, cst.NamedExpr):
                target = (
                    node.asname.name if type(node) is cst.WithItem and node.asname else getattr(node, "target", None)
                )
                key = dotted_name(target) if target is not None else None
                if key is not None:  # rebound to something unknown
                    by_key.setdefault(key, []).append(
                        (facts.order[id(node)], cst.Name("__rebound__"), statement_of(self.ctx, node))
                    )
        return by_key

    def _parameter(self, function: cst.FunctionDef, param: cst.Param, depth: int) -> DeviceValue | None:
        name = param.name.value
        if param.annotation is not None:
            annotated = _is_torch_device_annotation(self.ctx, param.annotation.annotation)
            if annotated == "object":
                return DeviceValue(OBJECT, evidence=f"`{name}` is annotated `torch.device`")
            if annotated == "union":
                # `str | torch.device`: strings such as "cpu" and "meta" are what callers usually
                # pass, so only an index-less accelerator (or a caller's torch.device) is reported.
                return self._from_callers(function, param, depth) or DeviceValue(
                    PARAMETER, evidence=f"`{name}` is annotated to accept a `torch.device`"
                )
            if annotated == "str":
                return DeviceValue(CONFIGURED, _string_value(param.default) if param.default is not None else None)
        if param.default is not None:
            default = self.value(param.default, depth + 1)
            if default is not None and default.kind == OBJECT:
                return DeviceValue(PARAMETER, evidence=f"`{name}` defaults to a `torch.device`", may_be_object=True)
            if default is not None and default.kind == STRING:
                return DeviceValue(CONFIGURED, default.text)
        if not device_like_name(name) or _pytest_test(self.ctx, function):
            return None  # a test function's parameters are fixtures, whose values this file does not show
        return self._from_callers(function, param, depth) or DeviceValue(PARAMETER)

    def _from_callers(self, function: cst.FunctionDef, param: cst.Param, depth: int) -> DeviceValue | None:
        """What same-file callers show about a parameter: a `torch.device` or an indexed string,
        or, when every caller passes an index-less device string, a configured string."""
        passed_strings: list[str | None] = []
        for caller, passed in self._callers(function, param, depth):
            if passed.kind == OBJECT:
                return DeviceValue(PARAMETER, evidence=f"`{caller}` passes a `torch.device`", may_be_object=True)
            if passed.kind == STRING and passed.text is not None and ":" in passed.text:
                return DeviceValue(PARAMETER, evidence=f"`{caller}` passes an indexed device")
            passed_strings.append(passed.text if passed.kind == STRING else None)
        if passed_strings and None not in passed_strings and self._all_calls_seen(function, len(passed_strings)):
            return DeviceValue(CONFIGURED)  # `run("cuda")`, `run("cpu")`: the strings the callers pass
        return None

    def _all_calls_seen(self, function: cst.FunctionDef, seen: int) -> bool:
        """Every same-file call of `function` by name passed a value that was resolved."""
        name = function.name.value
        calls = 0
        for call in self.ctx.index.of_type(cst.Call):
            func = call.func
            called = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
            calls += called == name
        return calls == seen

    def _callers(self, function: cst.FunctionDef, param: cst.Param, depth: int) -> Iterator[tuple[str, DeviceValue]]:
        """(caller name, value passed for `param`) for the same-file calls of `function`."""
        if depth > 3:
            return
        for call, passed in self._passed(function, param):
            value = self.value(passed, depth + 1)
            if value is not None:
                caller = self.ctx.index.enclosing_function(call)
                yield (caller.name.value if caller is not None else "module code"), value

    def _passed(self, function: cst.FunctionDef, param: cst.Param) -> Iterator[tuple[cst.Call, cst.BaseExpression]]:
        """(call, argument) for what each same-file call of `function` passes for `param`; a
        class's `__init__` is called by the class's name (`Tracker(args)`)."""
        params = [*function.params.posonly_params, *function.params.params]
        owner = self.ctx.index.parent(self.ctx.index.parent(function) or function)
        is_method = type(owner) is cst.ClassDef
        if is_method and params and params[0].name.value in ("self", "cls"):
            params = params[1:]
        position = next((i for i, p in enumerate(params) if p is param), None)
        name = function.name.value
        constructor = owner.name.value if type(owner) is cst.ClassDef and name == "__init__" else None
        for call in self.ctx.index.of_type(cst.Call):
            func = call.func
            called = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else None
            if constructor is not None:
                if called != constructor:
                    continue
            elif called != name or ((type(func) is cst.Name) == is_method):
                continue
            passed = None
            for index, arg in enumerate(call.args):
                if arg.star:
                    break
                if (
                    arg.keyword is not None
                    and arg.keyword.value == param.name.value
                    or arg.keyword is None
                    and index == position
                ):
                    passed = arg.value
            if passed is not None:
                yield call, passed

    def _through_handed_object(self, function: cst.FunctionDef, key: str, depth: int) -> DeviceValue | None:
        """`args.device` where `args` is a parameter: a `torch.device` that the object each
        same-file caller hands in holds there (`args.device = torch.device(...)` under
        `__main__`, then `Tracker(args)`)."""
        root, rest = key.split(".", 1)
        param = _param(function, root)
        if param is None or depth > 3 or self._assignments_of(function, root):
            return None
        for call, passed in self._passed(function, param):
            if type(passed) is not cst.Name:
                continue
            caller = self.ctx.index.enclosing_function(call)
            scope: cst.FunctionDef | cst.Module = caller or self.ctx.module
            found = self._from_assignments(scope, f"{passed.value}.{rest}", call, depth + 1)
            if found is not None and found[0] is not None and found[0].kind == OBJECT:
                where = caller.name.value if caller is not None else "module code"
                return DeviceValue(OBJECT, evidence=f"`{passed.value}.{rest}` is a `torch.device` in {where}")
        return None

    def _instance_of(self, node: cst.BaseExpression) -> cst.ClassDef | None:
        """The class whose instance a name holds: `self` in a method, or a helper's parameter
        that every call in the file hands a method's `self` (`def _uses_cpu(owner)`)."""
        if type(node) is not cst.Name:
            return None
        function = self.ctx.index.enclosing_function(node)
        while function is not None and _param(function, node.value) is None:
            function = self.ctx.index.enclosing_function(function)  # a closure reads its outer `self`
        return instance_class(self.ctx, function, node.value) if function is not None else None

    def _plain_instance(self, node: cst.BaseExpression) -> cst.ClassDef | None:
        """The class, when every binding of the name in its scope builds an instance of one
        class of the file that derives from nothing (`fake = FakeModel()`): an object whose
        attributes the file shows, not a tensor or a library model."""
        if type(node) is not cst.Name:
            return None
        scope: cst.FunctionDef | cst.Module = self.ctx.index.enclosing_function(node) or self.ctx.module
        entries = self._assignments_of(scope, node.value)
        called = {e[1].func.value if type(e[1]) is cst.Call and type(e[1].func) is cst.Name else None for e in entries}
        if len(called) != 1:
            return None
        name = called.pop()
        cls = next((c for c in self.ctx.index.of_type(cst.ClassDef) if c.name.value == name), None)
        if cls is None or any(dotted_name(b.value) != "object" for b in cls.bases):
            return None
        return cls

    def _self_attribute(self, cls: cst.ClassDef, attr: str, depth: int) -> DeviceValue | None:
        """`self.<attr>` from the class: a `torch.device` annotation or property, or the values its
        methods assign (all of them must agree)."""
        body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
        for stmt in body:
            if type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:
                    if type(small) is cst.AnnAssign and dotted_name(small.target) == attr:
                        if _is_torch_device_annotation(self.ctx, small.annotation.annotation) == "object":
                            return DeviceValue(OBJECT)
        method = methods(cls).get(attr)
        if method is not None:
            returns = method.returns
            if returns is not None and _is_torch_device_annotation(self.ctx, returns.annotation) == "object":
                return DeviceValue(OBJECT)
            found = {
                self.value(r.value, depth + 1)
                for r in self.ctx.index.walk(method.body)
                if type(r) is cst.Return and r.value is not None
            }
            return found.pop() if len(found) == 1 else None
        values = set()
        for method in methods(cls).values():
            entries = self._assignments_of(method, f"self.{attr}")
            values |= {self.value(e[1], depth + 1) for e in entries}
        if not values and attr == "device":
            base = next(
                (b for b in (dotted_name(b.value) or "" for b in cls.bases) if b.endswith(DEVICE_PROPERTY_BASES)), None
            )
            if base is not None:
                return DeviceValue(OBJECT, evidence=f"`{base.rsplit('.', 1)[-1]}.device` is a `torch.device`")
        return values.pop() if len(values) == 1 else None

    def _configured(self, key: str, depth: int) -> DeviceValue:
        """A configuration field such as `args.device`: a string unless the file reads its `.type`
        (then it is a `torch.device`), with the text of a default the file declares."""
        if key in self.type_reads():
            return DeviceValue(OBJECT, evidence=f"the file reads `{key}.type`")
        defaults = {self.value(v, depth + 1) for v in configured_defaults(self.ctx, key.rsplit(".", 1)[-1])}
        default = defaults.pop() if len(defaults) == 1 else None
        if default is not None and default.kind == STRING and default.text is not None:
            evidence = f"it defaults to `{default.text}`" if ":" in default.text else None
            return DeviceValue(CONFIGURED, default.text, evidence=evidence)
        return DeviceValue(CONFIGURED)

    def type_reads(self) -> set[str]:
        """Dotted receivers whose `.type`/`.index` the file reads (`args.device.type`)."""
        if self._type_reads is None:
            self._type_reads = {
                key
                for node in self.ctx.index.of_type(cst.Attribute)
                if node.attr.value in ("type", "index")
                and (key := dotted_name(node.value)) is not None
                and key.rsplit(".", 1)[-1] == "device"
                and "." in key
            }
        return self._type_reads


def _from_engine(fact: Fact) -> DeviceValue:
    """A device value whose spelling the placement engine followed to its source."""
    device = fact.device
    if fact.spelled == "object":
        return DeviceValue(OBJECT, device.text if device is not None and device.literal else None)
    if device is not None and not device.literal:
        return DeviceValue(STRING, INDEXED if device.type is not None else None)
    return DeviceValue(STRING, device.text if device is not None else None)


def _pytest_test(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """`def test_x(available_device):` in a test module: pytest fills the parameters from fixtures."""
    return function.name.value.startswith("test") and is_test_path(ctx.path)


def _param(function: cst.FunctionDef, name: str) -> cst.Param | None:
    params = function.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.name.value == name:
            return param
    return None


def _on_gpu(first: DeviceValue | None, second: DeviceValue | None) -> DeviceValue | None:
    """`"cuda" if torch.cuda.is_available() else "cpu"`: on a GPU machine, the GPU branch."""
    if first is None or second is None or first.kind != second.kind:
        return None
    if first == second:
        return first
    if second.text == "cpu":
        return first
    if first.text == "cpu":
        return second
    return DeviceValue(first.kind)


def _str_of(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """`x` for `str(x)`, else None."""
    if (
        type(node) is cst.Call
        and type(node.func) is cst.Name
        and node.func.value == "str"
        and ctx.imports.bound.get("str") is None
        and len(node.args) == 1
        and node.args[0].keyword is None
        and not node.args[0].star
    ):
        return node.args[0].value
    return None


def _accelerator(text: str | None) -> bool:
    """An index-less accelerator device string: `"cuda"`, `"mps"` (not `"cpu"`, not `"cuda:0"`)."""
    return text is not None and ":" not in text and text not in ("cpu", "meta") and bool(DEVICE_STRING.match(text))


@register
class DeviceComparedToStringOrBareType(Rule):
    """
    ## What it does
    Flags device comparisons that cannot work the way they are written:

    - a `torch.device` compared with a string: `x.device == "cuda"`, `device != "cpu"` where
      `device` is annotated `torch.device` or built with `torch.device(...)`, `self.device`
      of a `LightningModule`/`PreTrainedModel`, a dataclass field whose default is a
      `torch.device` (`opts.device` where `opts = Options()`). A `torch.device` never equals a string, not
      even `"cpu"`;
    - a tensor's device compared with an index-less device object: `x.device ==
      torch.device("cuda")`, also through a name or a setting the file resolves to
      `"cuda"` (`torch.device(cfg.device)` where `cfg.device` defaults to `"cuda"`). It is
      false for `cuda:0`, because the index differs;
    - a `torch.device` built from a setting or handed in (`self.device =
      torch.device(cfg.device)`, a `dev: torch.device` parameter) compared with the literal
      index-less `torch.device("cuda")`: false whenever the setting names an index;
    - `str(x.device) == "cuda"` (the string is `"cuda:0"`), and `str(x.device) != device`
      where `device` is a `torch.device` (a string never equals a device);
    - a name or setting that holds a device string compared with a `torch.device`: `device =
      "cpu"` then `device == torch.device("cpu")`, a class attribute `device = "cuda"`, or a
      module-level object's field the script sets to a string (`defaults.device = "cpu"` under
      `__main__`) read in a function of the file. A parameter's value comes from the file's calls,
      a constructor's (`Tracker(args)`) too, and a field of a parameter (`args.device`) from what
      the object each caller hands in holds there (`args.device = torch.device(...)` before
      `Tracker(args)`);
    - a `device` parameter compared with an index-less accelerator string: `device ==
      "cuda"` is false when the caller passes `"cuda:0"` (DDP ranks do) or a `torch.device`;
    - a legacy type used as a CUDA test: `t.type() == "torch.cuda.FloatTensor"` or
      `isinstance(t, torch.cuda.FloatTensor)` also tests the dtype, so a double or half CUDA
      tensor is taken for a CPU one;
    - a device rebuilt from a tensor's CUDA flag and then used to place something:
      `torch.zeros(n, device="cuda" if x.is_cuda else "cpu")` (also `x.device.type ==
      "cuda"`, or an `if`/`else` assigning the two strings). `"cuda"` has no index, so it is
      the current GPU rather than `x`'s, and an MPS or XPU tensor gets the CPU.

    ## Why it is a bug on a GPU
    On a CUDA machine tensors live on `cuda:0`, `cuda:1`..., never on an index-less `cuda`,
    and `torch.device("cpu") == "cpu"` is `False`. The comparison is silently false, so the
    GPU branch never runs (or the CPU fallback always does): a fused kernel is never used,
    fp16 is chosen on the CPU, data is moved again with a warning on every call. A device
    rebuilt as `"cuda"` from `x.is_cuda` places new tensors on `cuda:0` while `x` is on
    `cuda:1`, and the next op that meets them fails.

    ## Example
    ```python
    if logits.device == "cuda":
        torch.cuda.synchronize()
    if str(x.device) == "cuda":
        x = x.half()

    def configure(model, device):
        return torch.optim.AdamW(model.parameters(), fused=device == "cuda")

    state = torch.zeros(n, device="cuda" if x.is_cuda else "cpu")
    ```

    ## Use instead
    ```python
    if logits.device.type == "cuda":
        torch.cuda.synchronize()
    if x.is_cuda:
        x = x.half()

    def configure(model, device):
        return torch.optim.AdamW(model.parameters(), fused=torch.device(device).type == "cuda")

    state = torch.zeros(n, device=x.device)
    ```

    ## Fix safety
    The fix rewrites the comparison to compare the device type. It is safe for
    `torch.device("cuda")` and `str(x.device)` comparisons, where the receiver must be a
    `torch.device`. It is unsafe where the file only suggests that a value is a
    `torch.device` (an annotation, `x.device == "cuda"`) or wraps a parameter in
    `torch.device(...)`, which fails if the caller passes `None`. Comparisons with an
    indexed device (`"cuda:0"`) get no fix, nor do type-string tests and rebuilt devices.

    ## Known limits
    Configuration fields (`args.device`, `cfg.device`, `self.device` set from a `str`
    parameter) are usually device strings, and a string compared with `"cuda"` or `"cpu"`
    is right unless someone passes an index: they are reported only when the file shows
    otherwise (it reads `args.device.type`, or a default such as `"cuda:0"`). A `device`
    parameter compared with `"cpu"` or `"meta"` is reported only when the file shows a
    `torch.device` reaching it (a `torch.device` default, a same-file caller); a `str |
    torch.device` annotation alone is not enough, since callers mostly pass those strings. A string compared with an
    exact indexed device (`device == "cuda:0"`) is taken as deliberate, as is a condition
    that also tests an indexed form (`str(d) == "cuda:0" or str(d) == "cuda"`). Values are
    followed through assignments in one function, `self` attributes and same-file callers,
    not across files; the `device` of an instance of a plain class of the file (one deriving from
    nothing) is what its own methods store, so a test double whose `to()` keeps the string it is
    handed is rightly compared with a string. A `device` parameter that every same-file call passes an index-less string
    (`run("cuda")`) holds those strings; the parameters of a test function in a test module are
    pytest fixtures, whose values the file does not show, and are not judged. A function that
    also names another CUDA type (`torch.cuda.HalfTensor`) dispatches on the dtype on purpose, and
    its type tests are not reported, nor are type tests in an `assert`, in an `if` that only
    raises, or returned by a predicate named for the dtype (`is_cuda_float`). A device rebuilt from `is_cuda` is reported only where it
    reaches `device=`, `.to(...)` or `torch.device(...)` in the same function; as
    `autocast(device_type=...)` it is right.
    """

    code = "DL502"
    name = "device-compared-to-string-or-bare-type"
    summary = "A `torch.device` compared with a string or an index-less device is never equal."
    message = "`{expr}` is {verdict}: {why}; {advice}"
    fix_availability = "sometimes"
    tokens = ("device", "torch.cuda.FloatTensor", "is_cuda")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        yield from self._type_string_tests(ctx)
        yield from self._flag_rebuilt_devices(ctx)
        values = None
        for comparison in ctx.index.of_type(cst.Comparison):
            if len(comparison.comparisons) != 1:
                continue
            target = comparison.comparisons[0]
            if type(target.operator) not in (cst.Equal, cst.NotEqual):
                continue
            if not (_mentions_device(ctx, comparison.left) or _mentions_device(ctx, target.comparator)):
                continue
            if (
                _indexed_form_also_tested(ctx, comparison)
                or _normalises_value(ctx, comparison)
                or _tested_to_be_a_string(ctx, comparison)
            ):
                continue
            values = values or DeviceValues(ctx)
            sides = (comparison.left, target.comparator)
            for this, other in (sides, sides[::-1]):
                violation = self._check_pair(ctx, values, comparison, this, other, type(target.operator) is cst.Equal)
                if violation is not None:
                    yield violation
                    break

    def _type_string_tests(self, ctx: FileContext) -> Iterator[Violation]:
        for test in type_string_cuda_tests(ctx):
            tensor = ctx.code_for(test.tensor)
            yield self.violation(
                test.node,
                expr=ctx.code_for(test.node),
                verdict=f"{'True' if test.negated else 'False'} for a CUDA tensor of any other dtype",
                why=f"`{CUDA_DEFAULT_TYPE}` names float32 as well as CUDA, so a double or half CUDA tensor "
                "is not taken for a CUDA tensor",
                advice=f"test `{'not ' if test.negated else ''}{tensor}.is_cuda` instead",
            )

    def _flag_rebuilt_devices(self, ctx: FileContext) -> Iterator[Violation]:
        for rebuilt in flag_rebuilt_devices(ctx):
            tensor = ctx.code_for(rebuilt.tensor)
            yield self.violation(
                rebuilt.node,
                expr=ctx.code_for(rebuilt.node),
                verdict=f"an index-less device rebuilt from `{tensor}`'s CUDA flag",
                why=f'`"cuda"` is the current GPU, not `{tensor}`\'s (`cuda:1` becomes `cuda:0`), and an MPS or '
                "XPU tensor gets the CPU",
                advice=f"use `{tensor}.device` instead",
            )

    def _report(
        self, ctx: FileContext, comparison: cst.Comparison, verdict: str, why: str, fixed: str, safe: bool | None
    ) -> Violation:
        fix = _rewrite(comparison, fixed, safe=bool(safe)) if safe is not None else None
        return self.violation(
            comparison,
            fix=fix,
            expr=ctx.code_for(comparison),
            verdict=verdict,
            why=why,
            advice=f"compare `{fixed}` instead",
        )

    def _check_pair(
        self,
        ctx: FileContext,
        values: DeviceValues,
        comparison: cst.Comparison,
        this: cst.BaseExpression,
        other: cst.BaseExpression,
        equal: bool,
    ) -> Violation | None:
        op = "==" if equal else "!="
        always = "always False" if equal else "always True"
        code = ctx.code_for(this)
        text = _string_value(other)
        inner = _str_of(ctx, this)
        if inner is not None:
            return self._check_str_of(ctx, values, comparison, inner, other, text, op, always)
        if text is not None and not DEVICE_STRING.match(text):
            return None
        mine = values.value(this)
        if mine is None:
            return None
        if text is not None:
            return self._check_string(ctx, comparison, mine, code, text, op, always)
        if mine.kind == OBJECT and mine.tensor:
            theirs = values.value(other)
            if theirs is not None and theirs.kind == OBJECT and not theirs.tensor and _accelerator(theirs.text):
                spelled = ctx.code_for(other)
                why = f"devices on a GPU are `{theirs.text}:0`, `{theirs.text}:1`..."
                literal = type(other) is cst.Call and _string_value(other.args[0].value) is not None
                if literal:
                    return self._report(
                        ctx,
                        comparison,
                        always,
                        f"`{spelled}` has no index and {why}",
                        f'{code}.type {op} "{theirs.text}"',
                        True,
                    )
                # Resolved through a name or a setting: on a CPU-only machine it may be "cpu".
                return self._report(
                    ctx,
                    comparison,
                    f"{always} on a GPU",
                    f'`{spelled}` is built from `"{theirs.text}"`, which has no index, and {why}',
                    f"{code}.type {op} {spelled}.type",
                    False,
                )
        if mine.kind == OBJECT and not mine.tensor and (mine.text is None or ":" in mine.text):
            return self._check_configured_object(ctx, values, comparison, mine, code, other, op)
        if mine.kind == STRING and type(this) is not cst.Call:
            # a name or setting that holds a device string, compared with a `torch.device`
            theirs = values.value(other)
            if theirs is not None and theirs.kind == OBJECT:
                spelled = ctx.code_for(other)
                shown = "an indexed device string" if mine.text == INDEXED else f'`"{mine.text}"`'
                why = f"`{code}` is set to {shown} and `{spelled}` is a `torch.device`, which never equals a string"
                return self._report(ctx, comparison, always, why, f"torch.device({code}) {op} {spelled}", False)
        return None

    def _check_configured_object(
        self,
        ctx: FileContext,
        values: DeviceValues,
        comparison: cst.Comparison,
        mine: DeviceValue,
        code: str,
        other: cst.BaseExpression,
        op: str,
    ) -> Violation | None:
        """`self.device == torch.device("cuda")` where `self.device` is a `torch.device` built
        from a setting or handed in: equal only when that setting names no index."""
        theirs = values.value(other)
        literal = type(other) is cst.Call and len(other.args) == 1 and _string_value(other.args[0].value) is not None
        if theirs is None or theirs.kind != OBJECT or theirs.tensor or not literal or not _accelerator(theirs.text):
            return None
        if mine.text is not None:  # built from an indexed device: never equal
            why = f"`{code}` is `{mine.text}` and `{ctx.code_for(other)}` has no index"
            return self._report(
                ctx,
                comparison,
                "always False" if op == "==" else "always True",
                why,
                f'{code}.type {op} "{theirs.text}"',
                False,
            )
        verdict = "False" if op == "==" else "True"
        why = (
            f"`{ctx.code_for(other)}` has no index, but `{code}` is a `torch.device` from a setting "
            f"or a caller, which may name one (`{theirs.text}:0`, `{theirs.text}:1`)"
        )
        return self._report(
            ctx, comparison, f"{verdict} for any indexed device", why, f'{code}.type {op} "{theirs.text}"', False
        )

    def _check_string(
        self,
        ctx: FileContext,
        comparison: cst.Comparison,
        mine: DeviceValue,
        code: str,
        text: str,
        op: str,
        always: str,
    ) -> Violation | None:
        if mine.kind == OBJECT:
            why = "a `torch.device` never equals a string" + (f" ({mine.evidence})" if mine.evidence else "")
            if ":" in text:
                return self._report(ctx, comparison, always, why, f'{code} {op} torch.device("{text}")', None)
            return self._report(ctx, comparison, always, why, f'{code}.type {op} "{text}"', False)
        if mine.kind not in (PARAMETER, CONFIGURED):
            return None
        if mine.may_be_object:
            fixed = (
                f'torch.device({code}) {op} torch.device("{text}")'
                if ":" in text
                else f'torch.device({code}).type {op} "{text}"'
            )
            verdict = "False" if op == "==" else "True"
            return self._report(
                ctx,
                comparison,
                f"{verdict} whenever a `torch.device` is passed",
                f"a `torch.device` never equals a string ({mine.evidence})",
                fixed,
                None,
            )
        if not _accelerator(text) or mine.kind == CONFIGURED and mine.evidence is None:
            return None
        verdict = "False" if op == "==" else "True"
        why = f'an indexed device (`"{text}:0"`, `torch.device("{text}", 0)`) never equals `"{text}"`'
        if mine.evidence:
            why += f" ({mine.evidence})"
        return self._report(
            ctx, comparison, f"{verdict} for any indexed device", why, f'torch.device({code}).type {op} "{text}"', False
        )

    def _check_str_of(
        self,
        ctx: FileContext,
        values: DeviceValues,
        comparison: cst.Comparison,
        inner: cst.BaseExpression,
        other: cst.BaseExpression,
        text: str | None,
        op: str,
        always: str,
    ) -> Violation | None:
        device = values.value(inner)
        if device is None or device.kind != OBJECT:
            return None
        code = ctx.code_for(inner)
        if text is not None:
            if not _accelerator(text) or not device.tensor:
                return None
            return self._report(
                ctx,
                comparison,
                always,
                f'`str()` of a {text} device includes its index (`"{text}:0"`)',
                f'{code}.type {op} "{text}"',
                _device_attribute(inner) is not None,
            )
        theirs = values.value(other)
        if theirs is None or theirs.kind != OBJECT:
            return None
        return self._report(
            ctx,
            comparison,
            always,
            f"a string never equals a `torch.device` (`{ctx.code_for(other)}` is one)",
            f"{code} {op} {ctx.code_for(other)}",
            False,
        )


def _mentions_device(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """Whether one side of a comparison can be about a device at all: a device string, or a name
    or attribute that speaks of devices. Every rule finding needs one such side."""
    for part in ctx.index.walk(node):
        if type(part) is cst.SimpleString:
            if any(word in part.value for word in _DEVICE_STRING_WORDS) and DEVICE_STRING.match(
                _string_value(part) or ""
            ):
                return True
        elif type(part) is cst.Name and any(word in part.value.lower() for word in _DEVICE_WORDS):
            return True
    return False


_DEVICE_WORDS = ("dev", "cuda", "cpu", "gpu", "mps", "xpu", "accelerator", "rank")
# Cheap test on a string literal's raw text before evaluating it against DEVICE_STRING.
_DEVICE_STRING_WORDS = (
    "cpu",
    "cuda",
    "mps",
    "xpu",
    "hip",
    "npu",
    "hpu",
    "xla",
    "meta",
    "mtia",
    "ipu",
    "vulkan",
    "lazy",
)


def _indexed_form_also_tested(ctx: FileContext, comparison: cst.Comparison) -> bool:
    """`str(d) == "cuda:0" or str(d) == "cuda"`: the author knows devices carry an index and
    is handling index-less ones (fake and meta tensors have them) on purpose."""
    outer = None
    for ancestor in ctx.index.ancestors(comparison):
        if type(ancestor) is cst.BooleanOperation:
            outer = ancestor
        elif type(ancestor) not in (cst.Comparison,) and outer is not None:
            break
    if outer is None:
        return False
    sides = {ctx.code_for(comparison.left), ctx.code_for(comparison.comparisons[0].comparator)}
    for node in ctx.index.walk(outer):
        value = _string_value(node) if type(node) is cst.SimpleString else None
        if value is not None and ":" in value and DEVICE_STRING.match(value):
            return True
        # `dev == "meta" or dev == torch.device("meta")`: both spellings handled on purpose.
        if type(node) is cst.Comparison and node is not comparison and len(node.comparisons) == 1:
            pair = (node.left, node.comparisons[0].comparator)
            for this, other in (pair, pair[::-1]):
                if (
                    ctx.code_for(this) in sides
                    and type(other) is cst.Call
                    and ctx.qualified_name(other.func) == "torch.device"
                ):
                    return True
    return False


def _tested_to_be_a_string(ctx: FileContext, comparison: cst.Comparison) -> bool:
    """`isinstance(d, str) and d == "meta"`, or `d == "cpu"` under `if isinstance(d, str):`: the
    compared value has just been tested to be a string, so the string comparison is right."""
    compared = {ctx.code_for(comparison.left), ctx.code_for(comparison.comparisons[0].comparator)}
    node: cst.CSTNode = comparison
    for parent in ctx.index.ancestors(comparison):
        guard: cst.BaseExpression | None = None
        if type(parent) is cst.BooleanOperation and type(parent.operator) is cst.And and node is parent.right:
            guard = parent.left
        elif (type(parent) is cst.If or type(parent) is cst.IfExp) and node is parent.body:
            guard = parent.test
        if guard is not None and any(_is_str_test(ctx, t, compared) for t in _conjuncts(guard)):
            return True
        if type(parent) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        node = parent
    return False


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return [*_conjuncts(test.left), *_conjuncts(test.right)]
    return [test]


def _is_str_test(ctx: FileContext, test: cst.BaseExpression, compared: set[str]) -> bool:
    """`isinstance(x, str)` or `isinstance(x, (str, ...))` of one of the compared values."""
    if not (type(test) is cst.Call and type(test.func) is cst.Name and test.func.value == "isinstance"):
        return False
    if len(test.args) != 2 or ctx.code_for(test.args[0].value) not in compared:
        return False
    kinds = test.args[1].value
    names = [e.value for e in kinds.elements] if type(kinds) is cst.Tuple else [kinds]
    return any(type(n) is cst.Name and n.value == "str" for n in names)


def _normalises_value(ctx: FileContext, comparison: cst.Comparison) -> bool:
    """`if device == "npu": device = "npu:0"`: the branch rewrites the value it compared, so
    the exact string is what the author means to catch."""
    parent = ctx.index.parent(comparison)
    if type(parent) is not cst.If or parent.test is not comparison:
        return False
    compared = {ctx.code_for(comparison.left), ctx.code_for(comparison.comparisons[0].comparator)}
    for node in ctx.index.walk(parent.body):
        if type(node) is cst.Assign and any(ctx.code_for(t.target) in compared for t in node.targets):
            return True
    return False


def _rewrite(comparison: cst.Comparison, fixed: str, safe: bool) -> FixProposal:
    # A node's reported span excludes its own parentheses, so they stay in place.
    return FixProposal(description=f"Compare `{fixed}`", safe=safe, replacements=((comparison, fixed),))
