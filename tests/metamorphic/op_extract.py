"""Targeted rewrites of the offending value: into a function, a method, a `self` attribute, a container."""

from __future__ import annotations

import libcst as cst

from .cst_tools import (
    Analysis,
    NotApplicable,
    Replace,
    args_of,
    decorator_names,
    first_param,
    line,
    parse_stmt,
    tags_on,
    unused_name,
    walk,
)
from .tags import TAG

_BLANK = (cst.EmptyLine(),)


def _trailing_tags(a: Analysis, stmt: cst.CSTNode, expr: cst.CSTNode) -> list[int]:
    """The statement's tags that do not already travel inside the moved expression."""
    inner = {int(t) for t in TAG.findall(a.module.code_for_node(expr))}
    return [t for t in tags_on(stmt, a.module) if t not in inner]


def _function(
    name: str, params: list[str], body: list[cst.BaseStatement], decorators: tuple[str, ...] = ()
) -> cst.FunctionDef:
    return cst.FunctionDef(
        name=cst.Name(name),
        params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in params]),
        body=cst.IndentedBlock(body=body),
        leading_lines=_BLANK,
        decorators=[cst.Decorator(cst.Name(d)) for d in decorators],
    )


class _Rename(cst.CSTTransformer):
    def __init__(self, ids: set[int], new: str) -> None:
        super().__init__()
        self.ids, self.new = ids, new

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return cst.Name(self.new) if id(original_node) in self.ids else updated_node


def accesses_of_param(a: Analysis, func: cst.FunctionDef, name: str, within: cst.CSTNode) -> set[int]:
    """Ids of the Name nodes under `within` that read parameter `name` of `func`."""
    scope = a.scopes.get(func.body.body[0]) if func.body.body else None
    ids: set[int] = set()
    if scope is None:
        return ids
    inside = {id(n) for n in walk(within)}
    for assignment in scope.assignments[name]:
        for ref in assignment.references:
            if id(ref.node) in inside and isinstance(ref.node, cst.Name):
                ids.add(id(ref.node))
    return ids


def extract_function(a: Analysis, tag: int) -> cst.Module:
    """`x = <value>` -> `def _compute_N(free...): return <value>` at module level; `x = _compute_N(free...)`."""
    stmt, expr = a.target(tag)
    params = a.free_names(expr)
    name = unused_name(a.module, f"_compute_{tag}")
    helper = _function(name, params, [line(cst.Return(expr), _trailing_tags(a, stmt, expr))])
    call = cst.Call(cst.Name(name), args_of(params))
    top = a.top_statement(stmt)
    return a.module.visit(Replace(swap={id(expr): call}, before={id(top): [helper]}))


def _method_context(a: Analysis, stmt: cst.CSTNode) -> tuple[cst.ClassDef, cst.FunctionDef, str]:
    found = a.enclosing_method(stmt)
    if found is None:
        raise NotApplicable("the value is not made inside a method of a class")
    cls, meth = found
    if decorator_names(meth) & {"staticmethod", "classmethod"}:
        raise NotApplicable("the enclosing method is a static or class method (no self)")
    self_name = first_param(meth)
    if self_name is None:
        raise NotApplicable("the enclosing method has no self parameter")
    return cls, meth, self_name


def extract_method(a: Analysis, tag: int, kind: str) -> cst.Module:
    """Move the value into a method of the enclosing class: plain (`self.m()`), `@staticmethod`
    (called as `Class.m(...)`), or `@classmethod` (called as `self.m(...)`)."""
    stmt, expr = a.target(tag)
    cls, meth, self_name = _method_context(a, stmt)
    free = a.free_names(expr)
    params = [n for n in free if n != self_name]
    name = unused_name(a.module, f"_compute_{tag}")
    tags = _trailing_tags(a, stmt, expr)
    if kind == "method":
        helper = _function(name, [self_name, *params], [line(cst.Return(expr), tags)])
        call = cst.Call(cst.Attribute(cst.Name(self_name), cst.Name(name)), args_of(params))
    else:
        uses_self = self_name in free
        body_expr = expr.visit(_Rename(accesses_of_param(a, meth, self_name, expr), "owner")) if uses_self else expr
        own = ["owner"] if uses_self else []
        call_args = args_of([self_name] if uses_self else []) + args_of(params)
        if kind == "staticmethod":
            helper = _function(name, [*own, *params], [line(cst.Return(body_expr), tags)], ("staticmethod",))
            call = cst.Call(cst.Attribute(cst.Name(cls.name.value), cst.Name(name)), call_args)
        else:
            helper = _function(name, ["cls", *own, *params], [line(cst.Return(body_expr), tags)], ("classmethod",))
            call = cst.Call(cst.Attribute(cst.Name(self_name), cst.Name(name)), call_args)
    return a.module.visit(Replace(swap={id(expr): call}, before={id(meth): [helper]}))


def _hoistable(a: Analysis, stmt: cst.CSTNode, why: str) -> None:
    """Statements before which a new statement may go, keeping the value's meaning."""
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr):
        raise NotApplicable(f"the value is a discarded expression statement; {why} would use it")
    if isinstance(stmt, cst.While):
        raise NotApplicable("the value is a while condition, evaluated on every pass")
    if isinstance(stmt, cst.If) and isinstance(a.parents.get(stmt), cst.If):
        raise NotApplicable("the value is an elif condition; nothing can go before it")


def self_attribute(a: Analysis, tag: int) -> cst.Module:
    """One method stores the value on `self._cached_N`; the original method calls it and reads the attribute."""
    stmt, expr = a.target(tag)
    cls, meth, self_name = _method_context(a, stmt)
    _hoistable(a, stmt, "storing it")
    params = [n for n in a.free_names(expr) if n != self_name]
    attr = f"_cached_{tag}"
    store = unused_name(a.module, f"_store_{tag}")
    target = cst.AssignTarget(cst.Attribute(cst.Name(self_name), cst.Name(attr)))
    tags = _trailing_tags(a, stmt, expr)
    setter = _function(store, [self_name, *params], [line(cst.Assign([target], expr), tags)])
    call = line(cst.Expr(cst.Call(cst.Attribute(cst.Name(self_name), cst.Name(store)), args_of(params))))
    read = cst.Attribute(cst.Name(self_name), cst.Name(attr))
    return a.module.visit(Replace(swap={id(expr): read}, before={id(meth): [setter], id(stmt): [call]}))


_CARRIERS = {
    "tuple": ("({v}, None)", "{box}[0]"),
    "list": ("[{v}]", "{box}[0]"),
    "dict": ('{{"value": {v}}}', '{box}["value"]'),
    "dataclass": ("_Carrier({v})", "{box}.value"),
}


def container(a: Analysis, tag: int, kind: str) -> cst.Module:
    """Pack the value into a tuple/list/dict/dataclass and unpack it right before its use."""
    stmt, expr = a.target(tag)
    _hoistable(a, stmt, "packing it")
    box = unused_name(a.module, f"_box_{tag}")
    tags = _trailing_tags(a, stmt, expr)
    pack_code, read_code = _CARRIERS[kind]
    pack = cst.parse_expression(pack_code.format(v="__V__"))
    pack = pack.visit(_Placeholder(expr))
    pack_stmt = line(cst.Assign([cst.AssignTarget(cst.Name(box))], pack), tags)
    single = (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Assign)
        and len(stmt.body[0].targets) == 1
        and isinstance(stmt.body[0].targets[0].target, (cst.Name, cst.Attribute))
    )
    if single and kind == "tuple":
        target = stmt.body[0].targets[0].target  # type: ignore[union-attr]
        unpack = cst.Assign(
            [cst.AssignTarget(cst.Tuple([cst.Element(target), cst.Element(cst.Name("_"))], lpar=(), rpar=()))],
            cst.Name(box),
        )
        replaced = stmt.with_changes(body=[unpack])
        result = a.module.visit(Replace(swap={id(stmt): replaced}, before={id(stmt): [pack_stmt]}))
    elif single:
        result = a.module.visit(
            Replace(swap={id(expr): cst.parse_expression(read_code.format(box=box))}, before={id(stmt): [pack_stmt]})
        )
    else:
        value = unused_name(a.module, f"_value_{tag}")
        unpack_code = f"{value}, _ = {box}" if kind == "tuple" else f"{value} = {read_code.format(box=box)}"
        unpack_stmt = parse_stmt(unpack_code, tags)
        result = a.module.visit(Replace(swap={id(expr): cst.Name(value)}, before={id(stmt): [pack_stmt, unpack_stmt]}))
    if kind == "dataclass":
        result = add_module_statements(
            result,
            [
                "import dataclasses",
                "@dataclasses.dataclass\nclass _Carrier:\n    value: object\n",
            ],
        )
    return result


class _Placeholder(cst.CSTTransformer):
    def __init__(self, value: cst.BaseExpression) -> None:
        super().__init__()
        self.value = value

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.value if original_node.value == "__V__" else updated_node


def add_module_statements(module: cst.Module, codes: list[str]) -> cst.Module:
    """Add statements after the imports at the top of the module (after a docstring and __future__)."""
    body = list(module.body)
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], (cst.Import, cst.ImportFrom)):
            at = i + 1
        elif (
            i == 0
            and isinstance(stmt, cst.SimpleStatementLine)
            and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, cst.SimpleString)
        ):
            at = 1
        else:
            break
    new = [cst.parse_statement(code) for code in codes]
    return module.with_changes(body=[*body[:at], *new, *body[at:]])
