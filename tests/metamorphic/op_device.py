"""Whole-file rewrites that take a device value from elsewhere: a parameter default, a dataclass
config, an argparse default, `self.device`, or `next(model.parameters()).device`."""

from __future__ import annotations

import ast
import re

import libcst as cst
from libcst import matchers as m
from libcst.metadata import FunctionScope, GlobalScope

from .cst_tools import Analysis, NotApplicable, Replace, enclosing_function, walk
from .op_extract import add_module_statements

_DEVICE_STRING = re.compile(r"(cuda(:\d+)?|cpu|mps)")


def is_device_value(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.SimpleString):
        try:
            return bool(_DEVICE_STRING.fullmatch(str(ast.literal_eval(node.value))))
        except (ValueError, SyntaxError):
            return False
    if isinstance(node, cst.Call):
        return m.matches(node.func, m.Attribute(value=m.Name(), attr=m.Name("device")))
    if isinstance(node, cst.IfExp):
        return is_device_value(node.body) and is_device_value(node.orelse)
    return False


def device_definitions(a: Analysis) -> list[tuple[cst.SimpleStatementLine, str, cst.BaseExpression]]:
    """`name = <device value>` statements whose value needs nothing but imports."""
    found = []
    for node in walk(a.module):
        if not isinstance(node, cst.SimpleStatementLine) or not isinstance(node.body[0], cst.Assign):
            continue
        assign = node.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            continue
        if is_device_value(assign.value):
            try:
                free = a.free_names(assign.value)
            except NotApplicable:
                continue
            if not free:
                found.append((node, assign.targets[0].target.value, assign.value))
    if not found:
        raise NotApplicable("no `device = <device value>` assignment to take from elsewhere")
    return found


def _with_value(stmt: cst.SimpleStatementLine, value: cst.BaseExpression) -> cst.SimpleStatementLine:
    return stmt.with_changes(body=[stmt.body[0].with_changes(value=value)])


def device_config_dataclass(a: Analysis) -> cst.Module:
    """`device = "cuda"` -> `device = _CONFIG.device` with `@dataclass class _RunConfig: device: str = "cuda"`
    (a `torch.device(...)` value is typed `torch.device`)."""
    defs = device_definitions(a)
    fields, swaps = [], {}
    for k, (stmt, _, value) in enumerate(defs, start=1):
        field = "device" if k == 1 else f"device_{k}"
        kind = "torch.device" if isinstance(value, cst.Call) else "str"
        fields.append(f"    {field}: {kind} = {cst.Module([]).code_for_node(value)}")
        swaps[id(stmt)] = _with_value(stmt, cst.parse_expression(f"_CONFIG.{field}"))
    result = a.module.visit(Replace(swap=swaps))
    return add_module_statements(
        result,
        [
            "import dataclasses",
            "@dataclasses.dataclass\nclass _RunConfig:\n" + "\n".join(fields) + "\n",
            "_CONFIG = _RunConfig()",
        ],
    )


def device_argparse(a: Analysis) -> cst.Module:
    """`device = "cuda"` -> `device = _ARGS.device` with `parser.add_argument("--device", default="cuda")`."""
    defs = device_definitions(a)
    lines, swaps = [], {}
    for k, (stmt, _, value) in enumerate(defs, start=1):
        flag = "device" if k == 1 else f"device{k}"
        lines.append(f"_parser.add_argument('--{flag}', default={cst.Module([]).code_for_node(value)})")
        swaps[id(stmt)] = _with_value(stmt, cst.parse_expression(f"_ARGS.{flag}"))
    result = a.module.visit(Replace(swap=swaps))
    return add_module_statements(
        result,
        [
            "import argparse",
            "_parser = argparse.ArgumentParser()",
            *lines,
            "_ARGS, _ = _parser.parse_known_args()",
        ],
    )


def _reads(a: Analysis, stmt: cst.SimpleStatementLine) -> list[cst.Name]:
    """Name nodes reading the variable that `stmt` assigns."""
    target = stmt.body[0].targets[0].target  # type: ignore[attr-defined]
    scope = a.scopes[target]
    out = []
    for assignment in scope.assignments[target.value]:  # type: ignore[union-attr]
        if getattr(assignment, "node", None) is target:
            out += [r.node for r in assignment.references if isinstance(r.node, cst.Name)]
    return out


def device_param_default(a: Analysis) -> cst.Module:
    """A function's `device = "cuda"` becomes its parameter `device="cuda"`; a module-level one
    becomes that default on each function reading it."""
    defs = device_definitions(a)
    swaps: dict[int, cst.CSTNode] = {}
    params: dict[int, list[tuple[str, cst.BaseExpression]]] = {}
    funcs: dict[int, cst.FunctionDef] = {}
    for stmt, name, value in defs:
        scope = a.scopes[stmt.body[0].targets[0].target]  # type: ignore[attr-defined]
        if isinstance(scope, FunctionScope) and isinstance(scope.node, cst.FunctionDef):
            if len(scope.assignments[name]) != 1:
                continue
            swaps[id(stmt)] = cst.RemovalSentinel.REMOVE  # type: ignore[assignment]
            funcs[id(scope.node)] = scope.node
            params.setdefault(id(scope.node), []).append((name, value))
        elif isinstance(scope, GlobalScope):
            for read in _reads(a, stmt):
                func = enclosing_function(a, read)
                if func is not None and all(n != name for n, _ in params.get(id(func), [])):
                    funcs[id(func)] = func
                    params.setdefault(id(func), []).append((name, value))
    if not funcs:
        raise NotApplicable("no function makes or reads the device variable")
    for key, func in funcs.items():
        existing = {
            p.name.value for p in (*func.params.params, *func.params.kwonly_params, *func.params.posonly_params)
        }
        new = [
            cst.Param(cst.Name(n), default=v, equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            for n, v in params[key]
            if n not in existing
        ]
        if isinstance(func.params.star_arg, cst.Param) or isinstance(func.params.star_arg, cst.ParamStar):
            updated = func.params.with_changes(kwonly_params=[*func.params.kwonly_params, *new])
        else:
            updated = func.params.with_changes(params=[*func.params.params, *new])
        swaps[id(func.params)] = updated
    return a.module.visit(Replace(swap=swaps))


def device_self_attr(a: Analysis) -> cst.Module:
    """In a class with `__init__`, the device read by its methods becomes `self.device`, set in `__init__`."""
    defs = device_definitions(a)
    swaps: dict[int, cst.CSTNode] = {}
    after: dict[int, list[cst.BaseStatement]] = {}
    done: set[int] = set()
    for stmt, name, value in defs:
        for read in _reads(a, stmt):
            found = a.enclosing_method(read)
            if found is None:
                continue
            cls, meth = found
            init = next(
                (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None
            )
            if init is None or not init.body.body or not init.params.params:
                continue
            if any(m.matches(n, m.Attribute(value=m.Name("self"), attr=m.Name("device"))) for n in walk(cls)):
                continue
            self_name = init.params.params[0].name.value
            if self_name != "self" or (meth.params.params and meth.params.params[0].name.value != "self"):
                continue
            swaps[id(read)] = cst.parse_expression("self.device")
            if id(cls) not in done:
                done.add(id(cls))
                local = a.scopes[stmt.body[0].targets[0].target]  # type: ignore[attr-defined]
                source = value if isinstance(local, FunctionScope) else cst.Name(name)
                after.setdefault(id(init.body.body[-1]), []).append(
                    cst.SimpleStatementLine(
                        [cst.Assign([cst.AssignTarget(cst.parse_expression("self.device"))], source)]
                    )
                )
    if not swaps:
        raise NotApplicable("no method of a class with __init__ reads the device variable")
    return a.module.visit(Replace(swap=swaps, after=after))


_MODEL_CALL = re.compile(r"([A-Z]\w*|.*models?\..*|.*from_pretrained.*)")


def _model_names(a: Analysis) -> set[str]:
    """Names assigned from a class instantiation (a CamelCase call) or a model loader."""
    names = set()
    for node in walk(a.module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            value = node.value
            while m.matches(value, m.Call(func=m.Attribute(attr=m.Name("to") | m.Name("cuda")))):
                value = value.func.value  # type: ignore[attr-defined]
            if isinstance(value, cst.Call):
                callee = cst.Module([]).code_for_node(value.func)
                if _MODEL_CALL.fullmatch(callee.split(".")[-1]) or _MODEL_CALL.fullmatch(callee):
                    names.add(node.targets[0].target.value)
    return names


def device_from_parameters(a: Analysis) -> cst.Module:
    """After `model.to(device)`, later `device` arguments in that scope read `next(model.parameters()).device`;
    inside an nn.Module's own methods, `next(self.parameters()).device`."""
    models = _model_names(a)
    swaps: dict[int, cst.CSTNode] = {}
    for node in walk(a.module):
        call = node.value if isinstance(node, (cst.Assign, cst.Expr)) else None
        if not m.matches(call, m.Call(func=m.Attribute(attr=m.Name("to")), args=[m.Arg(value=m.Name(), keyword=None)])):
            continue
        receiver = call.func.value  # type: ignore[union-attr]
        owner = node.targets[0].target if isinstance(node, cst.Assign) and len(node.targets) == 1 else receiver  # type: ignore[union-attr]
        if not isinstance(owner, cst.Name) or owner.value not in models:
            continue
        device = call.args[0].value  # type: ignore[union-attr]
        scope = a.scopes[device]
        after_line = a.positions[node].end.line
        for assignment in scope[device.value]:  # type: ignore[attr-defined,index]
            for ref in assignment.references:
                read = ref.node
                if (
                    isinstance(read, cst.Name)
                    and a.scopes.get(read) is scope
                    and a.positions[read].start.line > after_line
                ):
                    if isinstance(a.parents.get(read), cst.Arg):
                        swaps[id(read)] = cst.parse_expression(f"next({owner.value}.parameters()).device")
    if not swaps:
        raise NotApplicable("no model moved with `.to(<device variable>)` before later uses of that variable")
    return a.module.visit(Replace(swap=swaps))
