"""Whole-file rewrites of loops: other loop forms, and the training loop wrapped in a trainer method."""

from __future__ import annotations

import libcst as cst
from libcst import matchers as m

from .cst_tools import Analysis, NotApplicable, Replace, args_of, tag_comment, tags_on, unused_name, walk
from .op_extract import _Rename, add_module_statements

_DATA_WORDS = ("load", "data", "batch", "iter", "dl")


def _has_call(node: cst.CSTNode, method: str) -> bool:
    return any(m.matches(n, m.Call(func=m.Attribute(attr=m.Name(method)))) for n in walk(node))


def _iterable(loop: cst.For) -> cst.BaseExpression | None:
    """The data iterable of `for b in X` or `for i, b in enumerate(X)` (X a name or attribute)."""
    it = loop.iter
    if m.matches(it, m.Call(func=m.Name("enumerate"))) and len(it.args) == 1:  # type: ignore[attr-defined]
        it = it.args[0].value  # type: ignore[attr-defined]
    return it if isinstance(it, (cst.Name, cst.Attribute)) else None


def data_loops(module: cst.Module) -> list[cst.For]:
    """`for` loops over a loader-like name, or whose body steps an optimizer / runs backward."""
    found = []
    for node in walk(module):
        if not isinstance(node, cst.For) or node.asynchronous or node.orelse is not None:
            continue
        it = _iterable(node)
        if it is None:
            continue
        word = (it.value if isinstance(it, cst.Name) else it.attr.value).lower()  # type: ignore[union-attr]
        if any(w in word for w in _DATA_WORDS) or _has_call(node.body, "backward") or _has_call(node.body, "step"):
            found.append(node)
    return found


def _header_tags(a: Analysis, loop: cst.For) -> list[int]:
    return tags_on(loop, a.module)


def _loops_or_skip(a: Analysis) -> list[cst.For]:
    loops = data_loops(a.module)
    if not loops:
        raise NotApplicable("no loop over a data loader (or with backward/step) in the file")
    return loops


def loop_enumerate_tqdm(a: Analysis) -> cst.Module:
    """`for b in loader:` -> `for i, b in enumerate(tqdm(loader)):`."""
    loops = _loops_or_skip(a)
    swaps: dict[int, cst.CSTNode] = {}
    for k, loop in enumerate(loops, start=1):
        if m.matches(loop.iter, m.Call(func=m.Name("enumerate"))):
            inner = loop.iter.args[0].value  # type: ignore[attr-defined]
            swaps[id(loop.iter)] = loop.iter.with_changes(args=[cst.Arg(cst.Call(cst.Name("tqdm"), [cst.Arg(inner)]))])  # type: ignore[attr-defined]
        else:
            index = unused_name(a.module, f"step_{k}")
            target = loop.target
            if type(target) is cst.Tuple and not target.lpar:
                # `for x, y in X` -> `for i, (x, y) in enumerate(...)`: unparenthesised, the pair
                # would be unpacked from the (index, item) tuple itself
                target = target.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            swaps[id(loop.target)] = cst.Tuple([cst.Element(cst.Name(index)), cst.Element(target)], lpar=(), rpar=())
            swaps[id(loop.iter)] = cst.Call(
                cst.Name("enumerate"), [cst.Arg(cst.Call(cst.Name("tqdm"), [cst.Arg(loop.iter)]))]
            )
    result = a.module.visit(Replace(swap=swaps))
    return add_module_statements(result, ["from tqdm import tqdm"])


def loop_while_next(a: Analysis) -> cst.Module:
    """`for b in loader: body` -> `it = iter(loader)` / `while True:` / `try: b = next(it)` / `except StopIteration: break` / body."""
    loops = _loops_or_skip(a)
    swaps: dict[int, cst.CSTNode] = {}
    before: dict[int, list[cst.BaseStatement]] = {}
    for k, loop in enumerate(loops, start=1):
        it = unused_name(a.module, f"batches_{k}")
        tags = _header_tags(a, loop)
        target_code = cst.Module([]).code_for_node(loop.target)
        fetch = cst.parse_statement(f"try:\n    {target_code} = next({it})\nexcept StopIteration:\n    break\n")
        fetch = fetch.with_changes(
            body=fetch.body.with_changes(
                body=[  # type: ignore[attr-defined]
                    fetch.body.body[0].with_changes(trailing_whitespace=tag_comment(tags))  # type: ignore[attr-defined]
                ]
            )
        )
        body = loop.body
        assert isinstance(body, cst.IndentedBlock)
        swaps[id(loop)] = cst.While(
            test=cst.Name("True"),
            body=body.with_changes(body=[fetch, *body.body]),
            leading_lines=loop.leading_lines,
        )
        start = cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Name(it))], cst.Call(cst.Name("iter"), [cst.Arg(loop.iter)]))],
            trailing_whitespace=tag_comment(tags),
        )
        before[id(loop)] = [start]
    return a.module.visit(Replace(swap=swaps, before=before))


def loop_nested_epochs(a: Analysis) -> cst.Module:
    """`for b in loader: body` -> `for epoch in range(3):` / `for b in loader: body`."""
    loops = _loops_or_skip(a)
    outermost = [lp for lp in loops if not any(isinstance(p, cst.For) and p in loops for p in a.ancestors(lp))]
    swaps: dict[int, cst.CSTNode] = {}
    for k, loop in enumerate(outermost, start=1):
        epoch = unused_name(a.module, f"epoch_{k}")
        swaps[id(loop)] = cst.For(
            target=cst.Name(epoch),
            iter=cst.parse_expression("range(3)"),
            body=cst.IndentedBlock([loop.with_changes(leading_lines=())]),
            leading_lines=loop.leading_lines,
        )
    return a.module.visit(Replace(swap=swaps))


def training_loop(a: Analysis) -> cst.For:
    """The outermost loop whose body runs backward() (or steps an optimizer)."""
    for method in ("backward", "step"):
        loops = [n for n in walk(a.module) if isinstance(n, (cst.For, cst.While)) and _has_call(n.body, method)]
        loops = [lp for lp in loops if not any(p in loops for p in a.ancestors(lp))]
        if loops:
            return loops[0]  # type: ignore[return-value]
    raise NotApplicable("no training loop (a loop calling backward() or step())")


def _loop_interface(a: Analysis, loop: cst.CSTNode) -> tuple[list[str], list[str]]:
    """(names the loop reads from outside, names it assigns that are read after it)."""
    inside = {id(n) for n in walk(loop)}
    reads: list[str] = []
    results: list[str] = []
    for node in walk(loop):
        if isinstance(node, (cst.Return, cst.Yield, cst.Global, cst.Nonlocal, cst.Await)):
            raise NotApplicable(f"the training loop holds {type(node).__name__}, which cannot move into a method")
        if not isinstance(node, cst.Name) or node not in a.scopes or a.scopes[node] is None:
            continue
        scope = a.scopes[node]
        for access in scope.accesses[node]:
            for ref in access.referents:
                if getattr(ref, "node", None) is None or type(ref).__name__ == "BuiltinAssignment":
                    continue
                if ref.scope is not scope:
                    if type(ref.scope).__name__ == "GlobalScope" and isinstance(
                        ref.node, (cst.Import, cst.ImportFrom, cst.FunctionDef, cst.ClassDef)
                    ):
                        continue
                    if getattr(ref.scope, "node", None) is not None and id(ref.scope.node) in inside:
                        continue
                if id(ref.node) not in inside and node.value not in reads:
                    reads.append(node.value)
        for assignment in scope.assignments[node.value] if scope is not None else ():
            if id(getattr(assignment, "node", None)) in inside:
                for ref in assignment.references:
                    if id(ref.node) not in inside and node.value not in results:
                        results.append(node.value)
    return reads, results


def wrap_trainer_method(a: Analysis) -> cst.Module:
    """Move the training loop into `class _Trainer: def train_epoch(self, <what it reads>)`, called in its place."""
    loop = training_loop(a)
    reads, results = _loop_interface(a, loop)
    params = [n if n != "self" else "owner" for n in reads]
    moved = loop
    if "self" in reads:
        ids = {id(n) for n in walk(loop) if isinstance(n, cst.Name) and n.value == "self"}
        moved = loop.visit(_Rename(ids, "owner"))
    body: list[cst.BaseStatement] = [moved.with_changes(leading_lines=())]
    if results:
        value = cst.Name(results[0]) if len(results) == 1 else cst.Tuple([cst.Element(cst.Name(r)) for r in results])
        body.append(cst.SimpleStatementLine([cst.Return(value)]))
    cls_name = unused_name(a.module, "_Trainer")
    trainer = cst.ClassDef(
        name=cst.Name(cls_name),
        leading_lines=(cst.EmptyLine(),),
        body=cst.IndentedBlock(
            [
                cst.FunctionDef(
                    name=cst.Name("train_epoch"),
                    params=cst.Parameters([cst.Param(cst.Name(p)) for p in ["self", *params]]),
                    body=cst.IndentedBlock(body),
                )
            ]
        ),
    )
    call = cst.Call(cst.Attribute(cst.Call(cst.Name(cls_name)), cst.Name("train_epoch")), args_of(reads))
    if results:
        target = (
            cst.Name(results[0])
            if len(results) == 1
            else cst.Tuple([cst.Element(cst.Name(r)) for r in results], lpar=(), rpar=())
        )
        stmt = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], call)], leading_lines=loop.leading_lines)
    else:
        stmt = cst.SimpleStatementLine([cst.Expr(call)], leading_lines=loop.leading_lines)
    top = a.top_statement(loop)
    return a.module.visit(Replace(swap={id(loop): stmt}, before={id(top): [trainer]}))
