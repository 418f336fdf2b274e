from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.attribute_aliases import aliased_values
from devicelint.analysis.container_reads import through_containers
from devicelint.analysis.imported_helpers import imported_call
from devicelint.analysis.placement_scope import defines_tests
from devicelint.analysis.training.helpers import bound_arguments, callee, only_returned
from devicelint.analysis.training.hot_values import HotValues, hot_values, on_device, placement_says
from devicelint.analysis.training.loops import StepRegion, in_logging_condition, in_unset_branch, is_logging_test
from devicelint.analysis.training.reads import HOST_METHODS, is_host_value
from devicelint.analysis.training.step_code import step_code
from devicelint.analysis.training.syntax import assigned_names, body_nodes, method_name, receiver, short, statement_of
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

TORCH_CHECKS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "torch.any", "torch.all", "torch.equal"})
# Callees that print, log or display a value (`pbar.set_postfix`, `writer.add_scalar`, `wandb.log`).
DISPLAY_WORDS = (
    "print",
    "log",
    "postfix",
    "description",
    "write",
    "scalar",
    "info",
    "debug",
    "echo",
    "display",
    "show",
)
ACCUMULATING_METHODS = frozenset({"append", "extend", "update", "add", "insert", "setdefault", "put"})

# Why the value is read, and what to do instead: the template's `{purpose}` and `{advice}`.
ACCUMULATE = (
    "on every training step to accumulate it",
    "accumulate on the device (`total += loss.detach()`) and call `.item()` once per log interval "
    "(`if step % log_every == 0:`)",
)
STORED = (
    "on every training step to keep it for a later log",
    "keep the tensor (`loss.detach()`) and call `.item()` only when the log is written (`if step % log_every == 0:`)",
)
DISPLAY = (
    "on every training step to print or log it",
    "a deliberate per-step readout pays this on every step; show it every N steps instead "
    "(`if step % log_every == 0:`)",
)
RETURNED = (
    "and returns it from a function that runs once per training step",
    "return the tensor (`loss.detach()`) and let the caller call `.item()` when it logs",
)
BRANCH = (
    "on every training step to decide a branch",
    "test it every N steps, or keep the check on the device (`torch.where`, `torch.nan_to_num`)",
)
FORMAT = (
    "on every training step to format it into a string",
    "a formatted tensor is read even when the message is not shown (a `debug` line with debug "
    "logging off); format it every N steps (`if step % log_every == 0:`) or leave it out",
)
SCALAR = (
    "on every training step because `{keyword}=` takes a Python number",
    "keep the arithmetic on the device (`x.sub(w * t)` instead of `x.sub(w, alpha=t)`)",
)
INDEX = (
    "on every training step to index or slice tensors with it",
    "keep such sizes on the host (read them from the batch before it is moved, or from the loader) "
    "so that no step waits for the GPU",
)
OTHER = (
    "on every training step",
    "keep the value on the device and read it once per log interval (`if step % log_every == 0:`)",
)


@register
class HostSyncInTrainingLoop(Rule):
    """
    ## What it does
    Flags reads of a device tensor's value that happen on every training step, outside any
    logging condition: `.item()`, `.cpu()`, `.tolist()`, `float(t)`, `bool(t)`, `print(t)`, a tensor formatted into an f-string (`f"{loss}"`), a 0-dim tensor passed where a
    Python number is taken (`g.sub(w, alpha=t)`) and `if` tests that compare a tensor or call
    `torch.isnan(t)`, also as an operand of `and`/`or`/`not` (`if skip_bad and torch.isnan(t):`,
    unless a logging test before it guards it with `and`). The step is the
    loop that runs `backward()` (its body runs once per step or per micro-batch), or a function
    that backpropagates and steps an optimizer outside any loop of its own, so that each call is
    one step (`def train_step(...): ...; return loss.item()`), and the code these call on every
    step: the file's functions, `self` methods, methods of objects built from the file's classes
    (`metric.update(out, y)`, `schedule.step(x)`, also for each object of a loop over a
    container the function or class writes out: `for m in metrics.values(): m.update(out)`),
    the `forward` of a module of the file called
    as `loss_fn(out, y)`, the `step()` of an `Optimizer` subclass the file defines, and, in a
    file that trains, the functions it registers as hooks (`register_forward_hook(record)`,
    `p.register_hook(self._on_grad)`), which run on every forward or backward pass. The
    message says which case it
    is: a value read to accumulate it or keep it for a log written every N steps (the costly case
    with a simple fix), a value read only to print or display it on every step, a value returned
    from a step function, or a value tested in an `if`.

    ## Why it is a bug on a GPU
    CUDA runs asynchronously: the Python loop normally queues the next step's kernels while the
    GPU is still busy. Reading a value forces the host to wait until every queued kernel has
    finished, so the GPU idles while Python prepares the next batch, on every step. Training
    loops lose 5-30% of their throughput this way.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    ```

    ## Use instead
    ```python
    running_loss = torch.zeros((), device=device)
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
        if step % log_every == 0:
            print(running_loss.item() / (step + 1))
    ```

    ## Fix safety
    No fix: the value read on the host is usually wanted (a log line, a progress bar, an early
    stop), so the right edit is to read it less often (`if step % 100 == 0:`), keep a device
    accumulator and read it once per epoch, or hand it to a logger that reads it lazily; which
    of these fits is the author's call.

    ## Known limits
    A bare `t.numpy()` (no `.cpu()` on the way) is never reported: it only runs on a host tensor
    (on a device one it raises, which DL108 reports), so nothing is copied there. Nor is a test
    that compares with a string (`if p.label == "attn":` on a tag the code set on a parameter): a
    tensor never equals a string, so such a test reads a Python attribute.
    Where a value lives comes from the placement analysis: a tensor it places on the CPU
    (`y.to("cpu")`, a DataLoader batch never moved), a module (`model.cpu()`) or a number is never
    reported; one it places on the device (`torch.zeros((), device=device)`, a moved batch, the
    output of a moved model) is. Where placement does not know (a model or batch received as a
    parameter), only strong evidence counts: the loss the step backpropagates, what a helper of
    the file that backpropagates hands back of its loss (`step_loss = self.training_step(batch)`
    returning `loss.detach()`), the result of a loss
    function or of a model call in the same function, and values computed from them (matched by
    name over the function, except where the assignment that reaches the read by statement order,
    on every path, stores a value made of none of them: a long `train()` reusing `x` for a host
    value); for
    `.item()`/`.cpu()`/`.tolist()` also what the loss is computed from without a move
    (`labels` and `batch` in `labels = batch["labels"]`). A file that builds its model, never moves
    it and never names an accelerator (or names no device but the CPU and copies of where things
    already are: `device="cpu"` defaults, `device=x.device`) is taken to train on the CPU, also
    where the step only hands the model on (`env.rollout(steps, policy)`), and so is a whole
    program in one file (a script with a `__main__` guard, a notebook, or a module whose top level
    calls its own functions) that never names an accelerator and imports nothing of its project
    that places tensors, wherever its model comes from (a constructor it is handed); a training loop in a
    library file that runs on the CPU with a model received from elsewhere is still reported. Reads under an `if` with
    `%`, `==` or a logging word (`log`, `print`, `eval`, `verbose`, `every`...), or that tests the
    counter of an enclosing `for i in range(...)`/`enumerate(...)` for membership in chosen steps
    (`if i in np.linspace(0, n, 10, dtype=int):`), and in exception
    handlers are not reported, nor are reads in a block that always ends by raising (the read
    runs once, on the way to the error) and reads under a flag parameter with a false default
    that every per-step call leaves unset (`if calc_acc:` that only the evaluation sets), nor
    reads after an early exit on a logging condition (`if step % log_every != 0: return`). A `%` branch that steps the optimizer (gradient accumulation's
    update) runs on every optimizer step and is not a logging condition. Steps are the innermost
    loop around a backward, a function that backpropagates and steps, a helper with a backward
    that a loop calls, the loop around an `optimizer.step()` whose backward runs in a callee, a
    LightningModule's `training_step`, and the `step()` of an `Optimizer` subclass of the file
    (its parameters, `p` in `for p in group["params"]`, and what is computed from them are device
    tensors); what these call on every step is read too (three calls deep, outside logging
    conditions), with a callee's parameters that its callers pass device tensors (a value placed on
    the device, the loss or a model output, a moved tensor) taken for device tensors. A helper
    that evaluates (`model.eval()`, `no_grad`) is not step code unless the step backpropagates
    what it returns (a loss module with a `no_grad` block for its diagnostics). A test module
    (`test_*.py`, `*_test.py`, a `test.py` check script, or a file under `tests/` that defines
    `test_*` functions or methods) is not read: its backward checks gradients and its loops
    compare results; a training script kept under `tests/` still is. A loop or
    comprehension variable formatted into a string is not reported. An early exit counts as a
    logging condition only when it lets few steps through (`if step % k != 0: return`), not a
    resume skip (`if epoch == first and step < resume_step: continue`). One statement gives
    at most one finding. A copy whose name the step then hands to host code that returns several
    values it goes on with (`actions = q.argmax(1).cpu().numpy()`, `obs, reward, done, info =
    env.step(actions)`), or that becomes NumPy data handed to a host object's method
    (`buffer.update_priorities(idx, loss.detach().cpu().numpy())` through a name, also through
    host arithmetic on it: `errors = ...numpy()`, `priorities = errors + eps`), is not
    reported: the host needs it on every step, so nothing can be deferred.
    """

    code = "DL401"
    name = "host-sync-in-training-loop"
    summary = "`.item()`/`.cpu()`/`print(t)` on a device tensor on every training step stalls the GPU."
    message = (
        "`{expr}` copies a device tensor to the host {purpose}, which stalls the GPU until the step's "
        "kernels finish; {advice}"
    )
    severity = "warning"
    tokens = ("backward", "training_step", "Optimizer")

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if defines_tests(ctx.path, ctx.module):
            return  # a test's backward checks gradients; its loops are not training
        done: set[int] = set()  # statements already reported: one finding per statement
        for region in step_code(ctx):
            hot = hot_values(ctx, region)
            for node in body_nodes(region.body):
                target = _sync(ctx, node, hot)
                if target is None:
                    continue
                statement = statement_of(ctx, target)
                if (
                    id(statement) in done
                    or in_logging_condition(ctx, target, region.owner)
                    or in_unset_branch(ctx, target, region)
                ):
                    continue
                done.add(id(statement))
                if _needed_now(ctx, statement, region):
                    continue
                expr = short(ctx, target)
                if type(target) is cst.FormattedStringExpression:
                    expr = f"{{{short(ctx, target.expression)}}}"
                elif type(target) is not cst.Call or type(ctx.index.parent(target)) in (cst.If, cst.While):
                    expr = f"if {expr}:"
                purpose, advice = _purpose(ctx, target, statement, region)
                yield self.violation(target, expr=expr, purpose=purpose, advice=advice)


# Tensor methods whose keyword takes a Python number: a tensor given there is read on the host
# (`g.sub(w, alpha=proj)` with a 0-dim `proj` calls `proj.item()`).
SCALAR_KEYWORDS = {
    "alpha": frozenset(
        {
            "add",
            "add_",
            "sub",
            "sub_",
            "addmm",
            "addmm_",
            "addmv",
            "addmv_",
            "addbmm",
            "addbmm_",
            "baddbmm",
            "baddbmm_",
            "addr",
            "addr_",
        }
    ),
    "value": frozenset({"addcmul", "addcmul_", "addcdiv", "addcdiv_"}),
}


def _sync(ctx: FileContext, node: cst.CSTNode, hot: HotValues) -> cst.CSTNode | None:
    """The node that reads a device tensor on the host, if `node` is one."""
    if type(node) is cst.FormattedStringExpression:
        # `f"{loss}"`, `f"{loss:.4f}"`: formatting a tensor reads its values.
        value = node.expression
        return node if _direct(value) and _formatted_tensor(ctx, value, hot) else None
    if type(node) is cst.Call:
        name = method_name(node)
        if _scalar_argument(ctx, node, hot) is not None:
            return node
        if name in HOST_METHODS:
            owner = receiver(node)
            if owner is None or node.args or _has_inner_sync(owner):
                return None
            if name == "numpy":
                # `t.numpy()` with no `.cpu()` on the way only runs on a host tensor (a device one
                # raises, which DL108 reports): the code itself says nothing is copied here.
                return None
            return node if on_device(ctx, owner, hot, tensor_method=True) else None
        if type(node.func) is cst.Name and node.func.value in ("float", "bool", "print"):
            for arg in node.args:
                if _direct(arg.value) and on_device(ctx, arg.value, hot):
                    return node
                if type(arg.value) is cst.Call and placement_says(ctx, arg.value):
                    return node  # `float(accuracy(logits, y))`: a result placement puts on the device
        if ctx.project.helpers and _imported_sync(ctx, node, hot):
            return node
        return None
    if isinstance(node, (cst.If, cst.While)) and _tested_operand(ctx, node.test, hot):
        return node.test
    return None


def _tested_operand(ctx: FileContext, test: cst.BaseExpression, hot: HotValues) -> bool:
    """`_tensor_test` of the test or of an operand of its `and`/`or` chain, each of which Python
    reads as a bool (`if filter_on and (torch.isnan(loss) or torch.isinf(loss)):`); an operand
    after a logging test that guards it with `and` (`step % k == 0 and torch.isnan(loss)`) only
    runs on the logged steps."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return _tested_operand(ctx, test.expression, hot)
    if type(test) is cst.BooleanOperation:
        if _tested_operand(ctx, test.left, hot):
            return True
        if type(test.operator) is cst.And and is_logging_test(ctx, test.left):
            return False
        return _tested_operand(ctx, test.right, hot)
    return _tensor_test(ctx, test, hot)


def _imported_sync(ctx: FileContext, call: cst.Call, hot: HotValues) -> bool:
    """`accuracy(logits, y)` of a project function that reads on the host what it computes
    from an argument this step has on the device (`...mean().item()` in `metrics.py`)."""
    imported = imported_call(ctx, call)
    if imported is None:
        return False
    helper, _ = imported
    synced = {param for param, _, _ in helper.uses.host_syncs}
    # (each argument: several keywords may reach one `**kwargs` the helper reads the values of)
    for position, arg in enumerate(call.args):
        param = helper.uses.parameter_at(position, arg.keyword.value if arg.keyword is not None else None)
        if param in synced and _direct(arg.value) and on_device(ctx, arg.value, hot):
            return True
    return False


def _formatted_tensor(ctx: FileContext, value: cst.BaseExpression, hot: HotValues) -> bool:
    """A value formatted into a string that is a device tensor: placement says so, or the fallback
    does for a name the function binds outside loops. A loop or comprehension variable (`{v}` in
    `{k: f"{v:.2f}" for k, v in logs.items()}`) is left out: its container often holds the
    numbers already read from the tensors."""
    known = placement_says(ctx, value)
    if known is not None:
        return known
    root = value
    while isinstance(root, (cst.Attribute, cst.Subscript)):
        root = root.value
    if type(root) is not cst.Name or not on_device(ctx, value, hot):
        return False
    scope = ctx.index.enclosing_function(value) or ctx.module
    return not any(
        isinstance(n, (cst.For, cst.CompFor)) and root.value in assigned_names(n.target) for n in ctx.index.walk(scope)
    )


def _scalar_argument(ctx: FileContext, call: cst.Call, hot: HotValues) -> str | None:
    """The keyword of a device tensor passed where a Python number is taken (`alpha=proj`)."""
    name = method_name(call) or ""
    for arg in call.args:
        keyword = arg.keyword.value if arg.keyword is not None else None
        if (
            keyword in SCALAR_KEYWORDS
            and name in SCALAR_KEYWORDS[keyword]
            and _direct(arg.value)
            and on_device(ctx, arg.value, hot)
        ):
            return keyword
    return None


def _purpose(ctx: FileContext, target: cst.CSTNode, statement: cst.CSTNode, region: StepRegion) -> tuple[str, str]:
    """Which case a per-step read is, from what the statement does with the value."""
    if type(target) is cst.FormattedStringExpression:
        return FORMAT
    if type(target) is cst.Call and method_name(target) not in HOST_METHODS:
        keyword = next(
            (a.keyword.value for a in target.args if a.keyword is not None and a.keyword.value in SCALAR_KEYWORDS), None
        )
        if keyword is not None:
            return SCALAR[0].format(keyword=keyword), SCALAR[1]
    if type(target) is not cst.Call or isinstance(statement, (cst.If, cst.While)):
        return BRANCH
    if _display_call(target) or _displayed(ctx, target, statement):
        return DISPLAY
    small = statement.body[0] if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else None
    if type(small) is cst.Return:
        return RETURNED if region.is_function else OTHER
    if type(small) is cst.AugAssign:
        return ACCUMULATE
    if type(small) is cst.Expr and type(small.value) is cst.Call and method_name(small.value) in ACCUMULATING_METHODS:
        return ACCUMULATE
    if isinstance(small, (cst.Assign, cst.AnnAssign)):
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        if any(type(t) in (cst.Subscript, cst.Attribute) for t in targets):
            return STORED  # kept in a dict, a list or on `self` for later
        names = {n for t in targets for n in assigned_names(t)}
        uses = [n for n in body_nodes(region.body) if type(n) is cst.Name and n.value in names and not _binds(ctx, n)]
        if uses and all(_displayed(ctx, u, statement_of(ctx, u)) for u in uses):
            return DISPLAY
        if uses and all(in_logging_condition(ctx, u, region.owner) for u in uses):
            return STORED  # read every step, used only on logging steps
        if any(_accumulates(ctx, u) for u in uses):
            return ACCUMULATE
        if any(_indexes_with(ctx, u) for u in uses):
            return INDEX
        tests = [u for u in uses if _in_test(ctx, u)]
        if tests and all(
            u in tests
            or _copied(ctx, u)
            or _displayed(ctx, u, statement_of(ctx, u))
            or in_logging_condition(ctx, u, region.owner)
            for u in uses
        ):
            return BRANCH  # `current = loss.item()` then `if abs(current - prev) < tol: break`
    return OTHER


def _copied(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`prev = current`: the value kept as it is for the next test."""
    parent = ctx.index.parent(node)
    return type(parent) is cst.Assign and parent.value is node


def _in_test(ctx: FileContext, node: cst.CSTNode) -> bool:
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.While)):
            return any(a is ancestor.test for a in [node, *ctx.index.ancestors(node)])
        if isinstance(ancestor, cst.BaseStatement):
            return False
    return False


def _needed_now(ctx: FileContext, statement: cst.CSTNode, region: StepRegion) -> bool:
    """The host copy feeds host code whose result the step goes on with: `actions =
    q(obs).argmax(1).cpu().numpy()` then `obs, reward, done, info = env.step(actions)`, or NumPy
    data handed to a host object's method (`buffer.update_priorities(idx, priorities)`). The
    copy cannot be deferred or accumulated on the device; the host needs it now."""
    # (`def np_now(x): return x.cpu().numpy()` on one line is a statement suite)
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        returned = statement.body[0]
        if type(returned) is cst.Return and returned.value is not None and _to_numpy(returned.value):
            return _feeds_host_calls(ctx, region)
    small = statement.body[0] if type(statement) is cst.SimpleStatementLine else None
    if type(small) is not cst.Assign:
        return False
    names = {
        n
        for t in small.targets
        if type(t.target) not in (cst.Subscript, cst.Attribute)
        for n in assigned_names(t.target)
    }
    if not names:
        return False
    numpy = _to_numpy(small.value)
    names |= _host_derived(ctx, region, names)
    for use in body_nodes(region.body):
        if not (type(use) is cst.Name and use.value in names) or _binds(ctx, use):
            continue
        arg = ctx.index.parent(use)
        call = ctx.index.parent(arg) if type(arg) is cst.Arg else None
        if type(call) is not cst.Call or _display_call(call) or method_name(call) in ACCUMULATING_METHODS:
            continue
        if (ctx.qualified_name(call.func) or "").startswith("torch."):
            continue
        holder = ctx.index.parent(call)
        if (
            type(holder) is cst.Assign
            and holder.value is call
            and any(isinstance(t.target, (cst.Tuple, cst.List)) for t in holder.targets)
        ):
            return True  # `obs, reward, done, info = env.step(actions)`
        if numpy and type(call.func) is cst.Attribute:
            return True  # `buffer.update_priorities(idx, priorities)` with NumPy priorities
    return False


def _feeds_host_calls(ctx: FileContext, region: StepRegion) -> bool:
    """A helper that returns NumPy data (`def np_now(x): return x.detach().cpu().numpy()`)
    whose every call in the file hands that data straight to host code (`save_attention(np_now(
    attn), path)`, `np.save(path, to_np(mel))`), not to a print or log: converting is what the
    helper is for, and the caller needs the array now."""
    if not region.is_function:
        return False
    calls = [c for c in ctx.index.of_type(cst.Call) if callee(ctx, c) is region.owner]
    for call in calls:
        arg = ctx.index.parent(call)
        outer = ctx.index.parent(arg) if type(arg) is cst.Arg else None
        if type(outer) is not cst.Call or _display_call(outer):
            return False
        if (ctx.qualified_name(outer.func) or "").startswith("torch."):
            return False
    return bool(calls)


def _host_derived(ctx: FileContext, region: StepRegion, names: set[str]) -> set[str]:
    """Plain names the step binds to host arithmetic on `names` (`priorities = errors + eps`,
    `p = np.clip(errors, 0, 1)`): still the host copy, in other words (no `torch.` call)."""
    derived: set[str] = set()
    for _ in range(3):
        grown = False
        for node in body_nodes(region.body):
            if type(node) is not cst.Assign or not all(type(t.target) is cst.Name for t in node.targets):
                continue
            reads = {n.value for n in ctx.index.walk(node.value) if type(n) is cst.Name}
            if not (reads & (names | derived)):
                continue
            if any(
                type(c) is cst.Call and (ctx.qualified_name(c.func) or "").startswith("torch.")
                for c in ctx.index.walk(node.value)
            ):
                continue
            for t in node.targets:
                if type(t.target) is cst.Name and t.target.value not in names | derived:
                    derived.add(t.target.value)
                    grown = True
        if not grown:
            break
    return derived


def _to_numpy(value: cst.BaseExpression) -> bool:
    """`t.cpu().numpy()`, `t.detach().cpu().numpy().clip(...)`: the copy becomes NumPy data."""
    node: cst.BaseExpression = value
    while isinstance(node, (cst.Call, cst.Attribute, cst.Subscript)):
        if type(node) is cst.Call and method_name(node) in ("numpy", "tolist"):
            return True
        node = node.func if isinstance(node, cst.Call) else node.value
    return False


def _binds(ctx: FileContext, name: cst.Name) -> bool:
    parent = ctx.index.parent(name)
    return type(parent) in (cst.AssignTarget, cst.Param) or (
        isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is name
    )


def _accumulates(ctx: FileContext, node: cst.CSTNode) -> bool:
    if _indexes_with(ctx, node):
        return False  # `parts.append(x[:, :n])`: `n` picks what is kept, it is not kept itself
    statement = statement_of(ctx, node)
    small = statement.body[0] if type(statement) is cst.SimpleStatementLine else None
    if type(small) is cst.AugAssign:
        return True
    return (
        type(small) is cst.Expr and type(small.value) is cst.Call and method_name(small.value) in ACCUMULATING_METHODS
    )


def _indexes_with(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`x[:, start:start + n]`, `x[i]`: the value sits in a subscript's index or slice."""
    for ancestor in ctx.index.ancestors(node):
        if type(ancestor) is cst.SubscriptElement:
            return True
        if isinstance(ancestor, cst.BaseStatement):
            return False
    return False


def _displayed(ctx: FileContext, node: cst.CSTNode, statement: cst.CSTNode) -> bool:
    """`node` is an argument (maybe inside an f-string) of a print, log or progress-bar call."""
    for ancestor in ctx.index.ancestors(node):
        if ancestor is statement:
            return False
        if type(ancestor) is cst.Call and _display_call(ancestor):
            return True
    return False


def _display_call(call: cst.Call) -> bool:
    """`print(...)`, `logger.info(...)`, `pbar.set_postfix(...)`, `writer.add_scalar(...)`."""
    callee = call.func
    word = callee.attr.value if type(callee) is cst.Attribute else callee.value if type(callee) is cst.Name else ""
    return any(w in word.lower() for w in DISPLAY_WORDS)


def _has_inner_sync(node: cst.BaseExpression) -> bool:
    while isinstance(node, (cst.Call, cst.Attribute, cst.Subscript)):
        if isinstance(node, cst.Call):
            if is_host_value(node):
                return True
            node = node.func
        else:
            node = node.value
    return False


def _direct(node: cst.BaseExpression) -> bool:
    """`loss`, `out.loss`, `losses["total"]`: the value itself, not a formatted or converted one."""
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return type(node) is cst.Name


def _tensor_test(ctx: FileContext, test: cst.BaseExpression, hot: HotValues) -> bool:
    """`if loss > 10:` or `if torch.isnan(loss):` on a device tensor (not `is None`, not `.item()`),
    also read back from a container it was put in (`flags = [loss > 10]; if flags[0]:`)."""
    if type(test) is cst.UnaryOperation:
        test = test.expression
    test = through_containers(ctx, test)
    if type(test) is cst.UnaryOperation:
        test = test.expression
    if type(test) is cst.Call and ctx.qualified_name(test.func) in TORCH_CHECKS:
        return any(_direct(a.value) and on_device(ctx, a.value, hot) for a in test.args)
    if type(test) is cst.Call and method_name(test) in ("any", "all") and not test.args:
        owner = receiver(test)
        return owner is not None and _direct(owner) and on_device(ctx, owner, hot)
    if type(test) is cst.Comparison:
        if any(type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in test.comparisons):
            return False
        operands = [test.left, *(c.comparator for c in test.comparisons)]
        if any(type(o) in _STRINGS for o in operands):
            return False  # `p.label == "attn"`: a tensor is never equal to a string, so this is a Python test
        return any(_direct(o) and on_device(ctx, o, hot) for o in operands)
    if type(test) is cst.Call and (helper := callee(ctx, test)) is not None:
        # `if over(gnorm, grp):` running `return gnorm > grp["max_norm"]`: the test in the caller's words
        returned = only_returned(ctx, helper)
        bound = bound_arguments(ctx, helper, test) if not any(a.star for a in test.args) else None
        if returned is None or bound is None or not _tensor_valued_test(ctx, returned):
            return False
        tested = {n.value for n in ctx.index.walk(returned) if type(n) is cst.Name}
        return any(_direct(arg) and on_device(ctx, arg, hot) for name, arg in bound.items() if name in tested)
    if type(test) is cst.Attribute:
        # `if self.bad:` where the class only ever stores a test of a tensor there
        # (`self._check(loss)` running `self.bad = torch.isnan(loss)`), computed from the step's values
        kept = aliased_values(ctx, test)
        return bool(kept) and all(_tensor_valued_test(ctx, v) for v, _ in kept) and on_device(ctx, test, hot)
    return False


_STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _tensor_valued_test(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """A comparison (not `is`/`in`) or a torch check: a boolean tensor where its operands are tensors."""
    if type(value) is cst.UnaryOperation:
        value = value.expression
    if type(value) is cst.Call:
        return ctx.qualified_name(value.func) in TORCH_CHECKS or (
            method_name(value) in ("any", "all") and not value.args
        )
    return type(value) is cst.Comparison and not any(
        type(c.operator) in (cst.Is, cst.IsNot, cst.In, cst.NotIn) for c in value.comparisons
    )
