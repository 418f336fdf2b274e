from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.training.effects import BACKWARD, OPTIMIZER_STEP, SCALED_BACKWARD, SCALER_STEP, kinds
from devicelint.analysis.training.step import AUTOCAST, Scope, training_scopes
from devicelint.analysis.training.syntax import inside, short
from devicelint.context import FileContext
from devicelint.fix_text import code_in_place, indent_of, own_line_statement
from devicelint.rule_base import FixProposal, Rule, Violation, register


@register
class BackwardInsideAutocast(Rule):
    """
    ## What it does
    Flags `loss.backward()` (or `scaler.scale(loss).backward()`) called inside the
    `with torch.autocast(...)` block that computed the loss.

    ## Why it is a bug on a GPU
    Autocast is meant to wrap the forward pass and the loss only. Backward ops already run in
    the dtype autocast chose for the matching forward ops; running them inside the region as
    well is not what PyTorch recommends ("Backward passes under autocast are not recommended")
    and can cast gradients again or trip custom autograd functions that assume they run outside
    it.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
        loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
    loss.backward()
    optimizer.step()
    ```

    ## Fix safety
    When the backward call is the last statement of the `with` block, the fix moves that
    statement to just after the block, at the block's indent; nothing else moves and the order
    of statements is unchanged. It is safe when the statement is the bare backward call and the
    `with` enters autocast alone; with other context managers in the same `with`, or a helper
    that enters autocast among other contexts (`with train_context():`), it is unsafe (the
    backward leaves them too). No fix when statements follow the backward in the block (the
    optimizer step, logging: which of them belong outside is the author's call), when it is the
    block's only statement, or when comments around it would lose their place.

    ## Known limits
    Only `with` blocks in the same function as the backward call are seen, directly or through
    a name (`ctx = torch.autocast(...)`; `with ctx:`), or through a function of the file that
    returns an autocast or is a `@contextmanager` entering one before it yields (also one a
    factory of the file returns: `ctx_fn = get_train_context(cfg)`; `with ctx_fn():`). A backward in a helper of the file
    (`self.backward(loss)`, `do_backward(loss)`, a method of an object the file builds) counts
    where the helper is called when the caller (or the helper) steps an optimizer or a scaler;
    helpers of other modules are not followed. A block with a
    literal `enabled=False` is not reported.
    """

    code = "DL306"
    name = "backward-inside-autocast"
    summary = "`backward()` called inside the autocast region; leave the region first."
    message = (
        "`{backward}` runs inside `{autocast}`: PyTorch recommends leaving the autocast region before "
        "the backward pass; dedent the backward (and the optimizer step) out of the `with` block"
    )
    severity = "warning"
    fix_availability = "sometimes"
    tokens = ("autocast",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        for scope in training_scopes(ctx):
            # A helper of the file that backpropagates (`self.backward(loss)`) runs its backward here.
            helpers = [call for call, found in scope.helper_calls if kinds(found) & {BACKWARD, SCALED_BACKWARD}]
            if not _steps(scope):
                helpers = []  # a test that runs an op's backward under autocast on purpose, not a training step
            for call in (*scope.backwards, *helpers):
                for autocast in scope.autocasts:
                    block = autocast.node
                    # (a scope's autocasts are `with` blocks; a decorated function has no inside to leave)
                    if autocast.enabled is not False and type(block) is cst.With and inside(ctx, call, block):
                        yield self.violation(
                            call,
                            fix=_dedent_backward(ctx, call, block, _helper_context(ctx, autocast.expr)),
                            backward=short(ctx, call),
                            autocast=short(ctx, autocast.expr),
                        )
                        break


def _steps(scope: Scope) -> bool:
    """The function steps an optimizer or a scaler, itself or through a helper of the file."""
    return bool(scope.optimizer_steps or scope.scaler_calls.get("step")) or any(
        kinds(found) & {OPTIMIZER_STEP, SCALER_STEP} for _, found in scope.helper_calls
    )


def _helper_context(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """The with-item calls a function of the file that enters autocast (`with train_context():`):
    it may enter other contexts too, which the backward would leave as well."""
    return type(expr) is cst.Call and ctx.qualified_name(expr.func) not in AUTOCAST


def _dedent_backward(ctx: FileContext, call: cst.Call, block: cst.With, through_helper: bool) -> FixProposal | None:
    """Move the backward statement, when it is the `with` block's last one, to just after the block."""
    statement = own_line_statement(ctx, call)
    body = block.body
    if (
        type(body) is not cst.IndentedBlock
        or len(body.body) < 2
        or statement is not body.body[-1]
        or type(statement) is not cst.SimpleStatementLine
        or body.footer
        or any(line.comment is not None for line in statement.leading_lines)
    ):
        return None  # not the last statement, the only one, or comments that would lose their place
    indent = indent_of(ctx, block)
    kept = block.with_changes(leading_lines=[], body=body.with_changes(body=body.body[:-1]))
    rendered = code_in_place(ctx, kept, block)[len(indent) :]  # the block's own indent stays in the file
    moved = code_in_place(ctx, statement.with_changes(leading_lines=[]), block)
    # The block's range ends before its last line break, which stays in the file.
    moved = moved[: -len(ctx.module.default_newline)] if moved.endswith(ctx.module.default_newline) else moved
    bare = type(statement.body[0]) is cst.Expr and statement.body[0].value is call
    return FixProposal(
        "Move the backward pass out of the autocast block",
        safe=bare and len(block.items) == 1 and not through_helper,
        replacements=((block, rendered + moved),),
    )
