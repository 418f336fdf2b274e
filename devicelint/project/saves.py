"""What one module `torch.save`s, read with Python's own parser (`ast`): for each file name a save
writes (`path_key`), whether every save of it writes host data.

A payload is host data when it certainly holds no device tensor: `.cpu()`, `.numpy()`,
`.tolist()` or `.item()` of anything, `torch.from_numpy(...)`, NumPy or pandas values, a torch
factory without `device=`, numbers and strings, and dicts, lists and tuples of those (also
filled later: `d["x"] = ...`, `d["xs"].append(...)`). In a module whose text never names a
device (`cuda`, `device`, `gpu`, ...) and loads nothing (a preprocessing script), every tensor
it builds is on the host, so anything counts but a parameter (what callers pass), a model's
`state_dict()` or what a builder returns (`build_model(cfg)`, which another module may place).
Other calls that save (`save_checkpoint(state, "best.pt")`) write a file name with a payload
nobody can see: not host.
"""

from __future__ import annotations

import ast
import re

from devicelint.analysis.vocabulary import PRESERVING_METHODS
from devicelint.project.summary import _NESTED_SCOPES, _descendants, _place, _Qualifier
from devicelint.project.view import path_key

SAVERS = frozenset({"torch.save", "torch.serialization.save"})
LOADERS = frozenset({"torch.load", "torch.serialization.load"})
_HOST_METHODS = frozenset({"cpu", "numpy", "tolist", "item"})
_HOST_LIBRARIES = ("numpy.", "np.", "pandas.", "pd.", "scipy.", "random.", "math.")
_PLACED_ELSEWHERE = ("state_dict", "load", "model", "build", "checkpoint")
_FILLERS = frozenset({"append", "extend", "insert", "add", "update"})
# (`xla` as a word part, `torch_xla` or `xla_device`, not inside `plt.xlabel`/`ax.set_xlabel`)
_DEVICE_WORDS = re.compile(
    r"(?i)cuda|device|gpu|\bmps\b|(?<![a-z])xla(?![a-z])|\bnpu\b|\bhpu\b|accelerat|fabric|lightning"
)
# (a binding nobody can follow, `a, b = f()` or `for x in ...`, is recorded as None)
_UNKNOWN = None


def saves_in(node: ast.AST, qualify: _Qualifier, text: str) -> dict[str, bool]:
    """File name -> whether every save of it writes host data, in one top-level definition (its
    functions, nested ones too) or, for a module, in its own statements. `text`: the module's."""
    # (nor loads anything: a loaded checkpoint's tensors may be on a device and flow anywhere)
    device_free = _DEVICE_WORDS.search(text) is None and "load(" not in text
    saves: dict[str, bool] = {}
    if isinstance(node, ast.Module):
        scopes: list[ast.AST] = [node]
    else:
        scopes = [n for n in _descendants(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        nodes = _descendants(scope, _NESTED_SCOPES)
        bound: dict[str, list[ast.expr | None]] | None = None
        for call in nodes:
            if not isinstance(call, ast.Call):
                continue
            saver = qualify(call.func) or ""
            if saver in SAVERS:
                payload = _argument(call, 0, "obj")
                place = _argument(call, 1, "f")
                if payload is None or place is None:
                    continue
                if bound is None:
                    bound = _bindings(nodes)
                    _bind_parameters(scope, bound)
                keys = _keys(place, bound)
                if keys:
                    host = _host(payload, bound, qualify, device_free, 0)
                    for key in keys:
                        saves[key] = saves.get(key, True) and host
            elif "save" in saver.rsplit(".", 1)[-1].lower():
                # a helper that saves: whatever it writes under a file name is unknown
                for arg in (*call.args, *(k.value for k in call.keywords)):
                    for key in _keys(arg, {}):
                        saves[key] = False
    return saves


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position and not isinstance(call.args[position], ast.Starred):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _bindings(nodes: list[ast.AST]) -> dict[str, list[ast.expr | None]]:
    """name -> every value the scope binds to it (`x = v`, `x[k] = v`, `x.append(v)`,
    `x[k].append(v)`); None for a binding that cannot be followed."""
    bound: dict[str, list[ast.expr | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _bind(target, node.value, bound)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            _bind(node.target, node.value, bound)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.withitem, ast.NamedExpr)):
            target = node.optional_vars if isinstance(node, ast.withitem) else node.target
            if target is not None:
                for inner in ast.walk(target):
                    if isinstance(inner, ast.Name):
                        bound.setdefault(inner.id, []).append(_UNKNOWN)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _FILLERS
            and node.args
        ):
            holder = node.func.value
            while isinstance(holder, ast.Subscript):
                holder = holder.value
            if isinstance(holder, ast.Name):
                bound.setdefault(holder.id, []).append(node.args[-1])
    return bound


def _bind_parameters(scope: ast.AST, bound: dict[str, list[ast.expr | None]]) -> None:
    """A function's parameters hold what its callers pass: unknown, even where the module never
    names a device (`def save_checkpoint(state, path): torch.save(state, path)`)."""
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = scope.args
        for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
            if arg is not None:
                bound.setdefault(arg.arg, []).append(_UNKNOWN)


def _bind(target: ast.expr, value: ast.expr, bound: dict[str, list[ast.expr | None]]) -> None:
    holder = target
    while isinstance(holder, ast.Subscript):
        holder = holder.value
    if isinstance(holder, ast.Name):
        bound.setdefault(holder.id, []).append(value)
        return
    for inner in ast.walk(target):
        if isinstance(inner, ast.Name):
            bound.setdefault(inner.id, []).append(_UNKNOWN)  # unpacked: unknowable


def _keys(place: ast.expr, bound: dict[str, list[ast.expr | None]], depth: int = 0) -> set[str]:
    """The file names a path expression ends in: its literals (`"embedding.pt"`,
    `os.path.join(d, "embedding.pt")`, `Path(d) / "embedding.pt"`, `f"{d}/embedding.pt"`), also
    through a name the scope binds to such a path."""
    keys: set[str] = set()
    for node in ast.walk(place):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            key = path_key(node.value)
        elif isinstance(node, ast.JoinedStr) and node.values:
            last = node.values[-1]
            text = last.value if isinstance(last, ast.Constant) and isinstance(last.value, str) else None
            key = None if text is None else path_key(text, len(node.values) == 1)
            if key is not None:
                keys.add(key)
            continue
        elif isinstance(node, ast.Name) and depth < 1:
            for value in bound.get(node.id, ()):
                if value is not None:
                    keys |= _keys(value, bound, depth + 1)
            continue
        else:
            continue
        if key is not None and not _inside_fstring(node, place) and not _joined(node, place):
            keys.add(key)
    return keys


def _joined(node: ast.AST, place: ast.expr) -> bool:
    """A literal joined to another text with `+` (`model_name + "_ckpt.pth"`): only what
    follows a `/` in it is a whole file name (as `path_key(..., whole=False)` reads it)."""
    return "/" not in str(getattr(node, "value", "")) and any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and node in (n.left, n.right) for n in ast.walk(place)
    )


def _inside_fstring(node: ast.AST, place: ast.expr) -> bool:
    # (an f-string's text parts are `Constant`s too; its key is taken from the whole string)
    return any(isinstance(n, ast.JoinedStr) and node in n.values for n in ast.walk(place))


def _host(
    value: ast.expr | None,
    bound: dict[str, list[ast.expr | None]],
    qualify: _Qualifier,
    device_free: bool,
    depth: int,
) -> bool:
    """Whether `value` certainly holds no device tensor (see the module's docstring)."""
    if value is None or depth > 6:
        return False
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return all(_host(e, bound, qualify, device_free, depth + 1) for e in value.elts)
    if isinstance(value, ast.Dict):
        return all(_host(v, bound, qualify, device_free, depth + 1) for v in value.values)
    if isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return _host(value.elt, bound, qualify, device_free, depth + 1)
    if isinstance(value, ast.DictComp):
        return _host(value.value, bound, qualify, device_free, depth + 1)
    if isinstance(value, ast.Starred):
        return _host(value.value, bound, qualify, device_free, depth + 1)
    if isinstance(value, ast.Name):
        values = bound.get(value.id)
        if not values:
            return device_free  # a parameter or a global
        return all(_host(v, bound, qualify, device_free, depth + 1) for v in values)
    if isinstance(value, ast.Call):
        return _host_call(value, bound, qualify, device_free, depth)
    if isinstance(value, ast.Subscript):
        return _host(value.value, bound, qualify, device_free, depth + 1)
    return device_free


def _host_call(
    call: ast.Call, bound: dict[str, list[ast.expr | None]], qualify: _Qualifier, device_free: bool, depth: int
) -> bool:
    func = call.func
    qualified = qualify(func) or ""
    if qualified in LOADERS:
        return False  # what it reads may be device tensors
    if isinstance(func, ast.Attribute):
        if func.attr in _HOST_METHODS:
            return True
        if func.attr == "to":
            target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
            if isinstance(target, ast.Constant) and target.value == "cpu":
                return True
            if not _dtype(target, qualify) or any(k.arg == "device" for k in call.keywords):
                return False
            return _host(func.value, bound, qualify, device_free, depth + 1)
        if func.attr in PRESERVING_METHODS and not qualified.startswith("torch."):
            return _host(func.value, bound, qualify, device_free, depth + 1)
    if qualified == "torch.from_numpy" or qualified.startswith(_HOST_LIBRARIES):
        return True
    if _place(call, {}, qualify, 0) == "cpu-tensor":
        return True
    if any(k.arg in ("device", "device_map") for k in call.keywords):
        return False
    # (a model's state, or what a loader or builder returns, may have been placed by another
    # module even where this one never names a device)
    called = (func.attr if isinstance(func, ast.Attribute) else qualified.rsplit(".", 1)[-1]).lower()
    return device_free and not any(word in called for word in _PLACED_ELSEWHERE)


def _dtype(node: ast.expr | None, qualify: _Qualifier) -> bool:
    """`torch.float`, `torch.long`: a `.to()` that changes only the dtype."""
    qualified = qualify(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
    return qualified is not None and qualified.startswith("torch.") and qualified.count(".") == 1


_WRAPPERS = ("DataParallel", "DistributedDataParallel")


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Name -> value of each plain top-level assignment (`CKPT = "best.pt"`)."""
    return {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def wrapped_state_saves(tree: ast.Module, qualify: _Qualifier) -> list[tuple[str, str, int]]:
    """(file name, checkpoint key, line) for each `torch.save` of a wrapper's state dict, in a
    function (or the module's own code) that wraps the model it saves: `model =
    nn.DataParallel(model)` then `torch.save(model.state_dict(), path)` or `{"model":
    model.state_dict()}` (key `model`; "" for the state dict itself). Its keys start with
    `module.`: a bare model elsewhere does not load them."""
    constants = _module_constants(tree)
    found: list[tuple[str, str, int]] = []
    scopes: list[ast.AST] = [
        tree,
        *(n for n in _descendants(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
    ]
    kept = _wrapped_attributes(tree, qualify)
    for scope in scopes:
        nodes = _descendants(scope, _NESTED_SCOPES)
        wrapped = _wrapped_names(nodes, qualify)
        # (`model = model.module` unwraps it again)
        wrapped -= {
            target.id
            for node in nodes
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr == "module"
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        wrapped |= kept.get(id(scope), set())
        if not wrapped:
            continue
        bound: dict[str, list[ast.expr | None]] = {name: [value] for name, value in constants.items()}
        bound.update(_bindings(nodes))
        for call in nodes:
            if not (isinstance(call, ast.Call) and (qualify(call.func) or "") in SAVERS):
                continue
            payload, place = _argument(call, 0, "obj"), _argument(call, 1, "f")
            if payload is None or place is None:
                continue
            names = _keys(place, bound) or _imported_constant(place, bound, qualify)
            for key in _wrapper_states(_followed(payload, bound), wrapped):
                found.extend((name, key, call.lineno) for name in sorted(names))
    return found


def wrapped_helper_calls(
    tree: ast.Module, qualify: _Qualifier
) -> list[tuple[str, int, str, tuple[tuple[int, str, tuple[str, ...]], ...], int]]:
    """(callee, position, keyword, arguments, line) for each call of a function the module
    imports or defines that is handed a `DataParallel`/DDP wrapper the scope makes (at
    `position`, -1 for a keyword, or as `keyword`); `arguments`: (position, keyword, file
    names) for each other argument that names a file (`path_key`) or a path constant of another
    module (`@config.CKPT`). The index reads whether the callee saves that parameter's state
    dict to that path parameter (`ParameterUses.state_saves`)."""
    constants = _module_constants(tree)
    found: list[tuple[str, int, str, tuple[tuple[int, str, tuple[str, ...]], ...], int]] = []
    kept = _wrapped_attributes(tree, qualify)
    scopes: list[ast.AST] = [
        tree,
        *(n for n in _descendants(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
    ]
    for scope in scopes:
        nodes = _descendants(scope, _NESTED_SCOPES)
        wrapped = _wrapped_names(nodes, qualify) | kept.get(id(scope), set())
        if not wrapped:
            continue
        bound: dict[str, list[ast.expr | None]] | None = None
        for call in nodes:
            if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args):
                continue
            slots = [(i, "", a) for i, a in enumerate(call.args)]
            slots += [(-1, k.arg, k.value) for k in call.keywords if k.arg is not None]
            handed = [(i, k) for i, k, a in slots if _wrapper_name(a) in wrapped]
            if len(handed) != 1:
                continue
            callee = qualify.known(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
            if callee is None:
                continue
            if bound is None:
                bound = {name: [value] for name, value in constants.items()}
                bound.update(_bindings(nodes))
            arguments = []
            for i, k, value in slots:
                if (i, k) == handed[0]:
                    continue
                names = _keys(value, bound) or _imported_constant(value, bound, qualify)
                if names:
                    arguments.append((i, k, tuple(sorted(names))))
            if arguments:
                found.append((callee, handed[0][0], handed[0][1], tuple(arguments), call.lineno))
    return found


def _wrapper_name(value: ast.expr) -> str | None:
    """`model`, or `self.model`, as `_wrapped_names` and `_wrapped_attributes` spell them."""
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return f"{value.value.id}.{value.attr}"
    return None


def _wrapped_attributes(tree: ast.Module, qualify: _Qualifier) -> dict[int, set[str]]:
    """id of each method -> `self.model` for each attribute its class sets to a wrapper in some
    method (`self.model = DDP(model, device_ids=[rank])` in `__init__`) and never unwraps
    (`self.model = self.model.module`): a trainer that saves `self.model.state_dict()`."""
    found: dict[int, set[str]] = {}
    for cls in (n for n in _descendants(tree) if isinstance(n, ast.ClassDef)):
        methods = _methods(cls)
        attrs = _class_wrapping(methods, qualify)
        for method in methods if attrs else ():
            found[id(method)] = {f"{method.args.args[0].arg}.{attr}" for attr in attrs}
    return found


def _methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.args.args]


def _class_wrapping(methods: list[ast.FunctionDef | ast.AsyncFunctionDef], qualify: _Qualifier) -> set[str]:
    """The attributes a class's methods set on `self` to a wrapper and never unwrap: `self.model =
    DDP(model)`, or `self.model = model` after `model = nn.DataParallel(model)` in the same method
    (under any condition: `if n_gpu > 1:`), not after `self.model = self.model.module`."""
    wrapping, unwrapping = _wrapping_and_unwrapping(methods, qualify)
    return wrapping - unwrapping


def _wrapped_names(nodes: list[ast.AST], qualify: _Qualifier) -> set[str]:
    """The local names these statements assign a DataParallel/DDP wrapper to."""
    return {
        target.id
        for node in nodes
        if isinstance(node, ast.Assign) and _wraps(node.value, qualify)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _wrapping_and_unwrapping(
    methods: list[ast.FunctionDef | ast.AsyncFunctionDef], qualify: _Qualifier
) -> tuple[set[str], set[str]]:
    """The attributes a class's methods set on `self` to a wrapper, and those they unwrap."""
    wrapping: set[str] = set()
    unwrapping: set[str] = set()
    for method in methods:
        receiver = method.args.args[0].arg
        nodes = _descendants(method, _NESTED_SCOPES)
        local = _wrapped_names(nodes, qualify)
        for node in nodes:
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id != receiver:
                        continue
                    if _wraps(node.value, qualify) or (isinstance(node.value, ast.Name) and node.value.id in local):
                        wrapping.add(target.attr)
                    elif isinstance(node.value, ast.Attribute) and node.value.attr == "module":
                        unwrapping.add(target.attr)
    return wrapping, unwrapping


def class_wrappers(tree: ast.Module, qualify: _Qualifier) -> dict[str, tuple[str, ...]]:
    """Top-level class -> the attributes it sets on `self` to a `DataParallel`/DDP wrapper
    (`_class_wrapping`)."""
    found = {}
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            attrs = _class_wrapping(_methods(cls), qualify)
            if attrs:
                found[cls.name] = tuple(sorted(attrs))
    return found


def attribute_state_saves(tree: ast.Module, qualify: _Qualifier) -> list[tuple[str, str, str, str, int]]:
    """(class, attribute, file name, checkpoint key, line) for each `torch.save` in a method of a
    top-level class of the state dict of `self.<attribute>` that the class itself never wraps
    nor unwraps (`torch.save({"state_dict": self.model.state_dict()}, path)` in a base trainer whose subclass
    in another module sets `self.model = nn.DataParallel(model)`)."""
    constants = _module_constants(tree)
    found: list[tuple[str, str, str, str, int]] = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        methods = _methods(cls)
        # (an attribute the class wraps is `wrapped_state_saves`'; one it unwraps is saved bare)
        wrapping, unwrapping = _wrapping_and_unwrapping(methods, qualify)
        wrapped_here = wrapping | unwrapping
        for method in methods:
            receiver = method.args.args[0].arg
            nodes = _descendants(method, _NESTED_SCOPES)
            saves = [n for n in nodes if isinstance(n, ast.Call) and (qualify(n.func) or "") in SAVERS]
            if not saves:
                continue
            attrs = {
                n.value.attr
                for n in nodes
                if isinstance(n, ast.Attribute)
                and n.attr == "state_dict"
                and isinstance(n.value, ast.Attribute)
                and isinstance(n.value.value, ast.Name)
                and n.value.value.id == receiver
            } - wrapped_here
            if not attrs:
                continue
            bound: dict[str, list[ast.expr | None]] = {name: [value] for name, value in constants.items()}
            bound.update(_bindings(nodes))
            for call in saves:
                payload, place = _argument(call, 0, "obj"), _argument(call, 1, "f")
                if payload is None or place is None:
                    continue
                names = _keys(place, bound) or _imported_constant(place, bound, qualify)
                for attr in sorted(attrs):
                    for key in _wrapper_states(_followed(payload, bound), {f"{receiver}.{attr}"}):
                        found.extend((cls.name, attr, name, key, call.lineno) for name in sorted(names))
    return found


def _followed(payload: ast.expr, bound: dict[str, list[ast.expr | None]]) -> ast.expr:
    """The value a payload name is bound to once (`state = {...}; torch.save(state, path)`)."""
    if isinstance(payload, ast.Name) and len(bound.get(payload.id, ())) == 1:
        value = bound[payload.id][0]
        if value is not None:
            return value
    return payload


def _imported_constant(place: ast.expr, bound: dict[str, list[ast.expr | None]], qualify: _Qualifier) -> set[str]:
    """`{"@config.CKPT"}` for a path that is a constant of another module (`config.CKPT`, or
    `CKPT` after `from config import CKPT`): the file that loads it names it the same way."""
    if isinstance(place, ast.Name) and place.id in bound:
        return set()
    qualified = qualify(place) if isinstance(place, (ast.Name, ast.Attribute)) else None
    return {f"@{qualified}"} if qualified is not None and "." in qualified else set()


def _wraps(value: ast.expr, qualify: _Qualifier) -> bool:
    """`nn.DataParallel(model)`, `DDP(model, device_ids=[rank]).cuda()`."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda"):
        value = value.func.value
    return isinstance(value, ast.Call) and (qualify(value.func) or "").rsplit(".", 1)[-1] in _WRAPPERS


def _wrapper_states(payload: ast.expr, wrapped: set[str]) -> list[str]:
    """ "" for `w.state_dict()` of a wrapper `w`, the key for each `{"key": w.state_dict()}`."""
    if _wrapper_state(payload, wrapped):
        return [""]
    if isinstance(payload, ast.Dict):
        return [
            key.value
            for key, value in zip(payload.keys, payload.values)
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and _wrapper_state(value, wrapped)
        ]
    return []


def _wrapper_state(value: ast.expr, wrapped: set[str]) -> bool:
    """`w.state_dict()` (or `self.w.state_dict()`) of a wrapper the scope names in `wrapped`."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "state_dict"):
        return False
    owner = value.func.value
    if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name):
        return f"{owner.value.id}.{owner.attr}" in wrapped
    return isinstance(owner, ast.Name) and owner.id in wrapped
