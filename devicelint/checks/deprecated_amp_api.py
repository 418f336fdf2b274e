from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.names import dotted_name
from devicelint.analysis.training.torch_support import never_available, too_new
from devicelint.context import FileContext
from devicelint.rule_base import FixProposal, Rule, Violation, register

# Deprecated name -> (replacement, device type it implied).
DEPRECATED = {
    "torch.cuda.amp.autocast": ("torch.amp.autocast", "cuda"),
    "torch.cuda.amp.GradScaler": ("torch.amp.GradScaler", "cuda"),
    "torch.cuda.amp.custom_fwd": ("torch.amp.custom_fwd", "cuda"),
    "torch.cuda.amp.custom_bwd": ("torch.amp.custom_bwd", "cuda"),
    "torch.cpu.amp.autocast": ("torch.amp.autocast", "cpu"),
    "torch.cpu.amp.GradScaler": ("torch.amp.GradScaler", "cpu"),
}
# Tests that mark version-compatibility code, where the old spelling is deliberate.
COMPAT_WORDS = ("version", "hasattr", "torch_", "_available", "is_torch", "getattr")


@register
class DeprecatedAmpApi(Rule):
    """
    ## What it does
    Flags `torch.cuda.amp.autocast`, `torch.cuda.amp.GradScaler`, `torch.cpu.amp.autocast`,
    `torch.cpu.amp.GradScaler` and `torch.cuda.amp.custom_fwd`/`custom_bwd`, spelled out or
    imported under another name.

    ## Why it is a bug on a GPU
    Since torch 2.4 these emit a `FutureWarning` on every use and are slated for removal; the
    device-generic `torch.amp` API replaces them. Code that keeps the CUDA-only spelling also
    cannot run its mixed precision on another accelerator by changing one string.

    ## Example
    ```python
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    with torch.cuda.amp.autocast(dtype=torch.float16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    ```

    ## Fix safety
    The fix rewrites calls spelled through `torch` (`torch.cuda.amp.autocast(...)` ->
    `torch.amp.autocast("cuda", ...)`), keeping the arguments. It is safe, except when the project
    still supports a torch release without the replacement (`torch.amp.autocast` needs 1.12,
    `torch.amp.GradScaler` 2.3, `torch.amp.custom_fwd`/`custom_bwd` 2.4): then it is unsafe and the
    message says so. The supported releases come from devicelint's `torch-version` setting, else
    from the project's metadata next to the file or above it (`[project] dependencies` or Poetry's
    dependencies in pyproject.toml, `install_requires` in setup.cfg or setup.py, requirements*.txt).
    It is not offered for names imported with `from torch.cuda.amp import autocast` (the import
    must change too), nor for `autocast(...)` calls with positional arguments, whose meaning
    differs between the two APIs.

    ## Known limits
    Only calls and decorators are reported, not bare references (`x is torch.cuda.amp.autocast`
    in a dispatch table). Uses under an `except` handler or an `if` that tests the torch version or `hasattr`, or in a
    function with such a test about `amp`, are taken for compatibility code and not reported; so are names bound by two imports (a
    `try`/`except ImportError` fallback). A project whose torch requirement allows only releases
    older than the replacement (`torch>=2.1,<2.3` and `torch.amp.custom_fwd`, added in 2.4) is not
    told to use it: the old spelling is the only one its torch has.
    """

    code = "DL305"
    name = "deprecated-amp-api"
    summary = "`torch.cuda.amp.*` / `torch.cpu.amp.*` are deprecated since torch 2.4; use `torch.amp`."
    message = "`{old}` is deprecated since torch 2.4; use `{new}` instead{support}"
    fix_availability = "sometimes"
    torch_versions = ">=2.4"
    tokens = ("amp",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        ambiguous = _names_bound_twice(ctx)
        done: set[int] = set()
        for call in ctx.index.of_type(cst.Call):
            old = ctx.qualified_name(call.func)
            if old in DEPRECATED and _reportable(ctx, call.func, ambiguous):
                done.add(id(call.func))
                new, device = DEPRECATED[old]
                if never_available(ctx, new):
                    continue  # every torch the project allows predates the replacement
                support = _support(ctx, new)
                yield self.violation(
                    call,
                    fix=_fix_call(ctx, call, old, safe=not support),
                    old=f"{old}(...)",
                    new=f'{new}("{device}", ...)'
                    if not old.endswith(("custom_fwd", "custom_bwd"))
                    else f'{new}(device_type="{device}")',
                    support=support,
                )
        for decorator in ctx.index.of_type(cst.Decorator):
            expr = decorator.decorator
            old = ctx.qualified_name(expr) if type(expr) in (cst.Name, cst.Attribute) else None
            if old in DEPRECATED and _reportable(ctx, expr, ambiguous):
                done.add(id(expr))
                new, device = DEPRECATED[old]
                if never_available(ctx, new):
                    continue  # every torch the project allows predates the replacement
                fixed = f'{new}(device_type="{device}")'
                support = _support(ctx, new)
                yield self.violation(
                    expr,
                    fix=_fix_bare_decorator(ctx, expr, fixed, safe=not support),
                    old=old,
                    new=fixed,
                    support=support,
                )


def _support(ctx: FileContext, new: str) -> str:
    """The message's tail when the project still supports a torch without the replacement."""
    problem = too_new(ctx, new)
    if problem is None:
        return ""
    return f" ({problem}: keep the old spelling behind a torch version check, or raise the minimum)"


def _names_bound_twice(ctx: FileContext) -> set[str]:
    seen: dict[str, set[str]] = {}
    for node in ctx.index.of_type(cst.ImportFrom):
        if node.module is None or isinstance(node.names, cst.ImportStar):
            continue
        base = dotted_name(node.module) or ""
        for alias in node.names:
            if type(alias.name) is cst.Name:
                local = (
                    alias.asname.name.value
                    if alias.asname and type(alias.asname.name) is cst.Name
                    else alias.name.value
                )
                seen.setdefault(local, set()).add(f"{base}.{alias.name.value}")
    return {local for local, fulls in seen.items() if len(fulls) > 1}


def _reportable(ctx: FileContext, expr: cst.BaseExpression, ambiguous: set[str]) -> bool:
    if type(expr) is cst.Name and expr.value in ambiguous:
        return False
    function = ctx.index.enclosing_function(expr)
    if function is not None and _has_compat_test(ctx, function):
        return False
    for ancestor in ctx.index.ancestors(expr):
        if type(ancestor) is cst.ExceptHandler:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            words = ctx.code_for(ancestor.test).lower()
            if any(w in words for w in COMPAT_WORDS):
                return False
    return True


def _has_compat_test(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """`if hasattr(torch.amp, "GradScaler"): return ...` earlier in the function: a fallback follows."""
    for node in ctx.index.walk(function.body):
        if type(node) is cst.If:
            words = ctx.code_for(node.test).lower()
            if "amp" in words and any(w in words for w in COMPAT_WORDS):
                return True
    return False


def _torch_prefix(ctx: FileContext, func: cst.BaseExpression) -> str | None:
    """`torch` (or its alias) when `func` is spelled `<torch>.cuda.amp.X` / `<torch>.cpu.amp.X`."""
    text = dotted_name(func)
    if text is None or text.count(".") != 3:
        return None
    base = text.split(".", 1)[0]
    return base if ctx.imports.bound.get(base) == "torch" else None


def _fix_call(ctx: FileContext, call: cst.Call, old: str, safe: bool) -> FixProposal | None:
    prefix = _torch_prefix(ctx, call.func)
    if prefix is None:
        return None
    new, device = DEPRECATED[old]
    name = new.replace("torch.", prefix + ".", 1)
    kind = old.rsplit(".", 1)[-1]
    positional = any(a.keyword is None and not a.star for a in call.args)
    if kind in ("autocast", "custom_fwd", "custom_bwd") and positional:
        return None
    first = f'device_type="{device}"' if kind in ("custom_fwd", "custom_bwd") else f'"{device}"'
    args = "".join(ctx.code_for(a) for a in call.args).lstrip()
    text = f"{name}({first}, {args})" if args else f"{name}({first})"
    return FixProposal(f"Use `{new}`", safe=safe, replacements=((call, text),))


def _fix_bare_decorator(ctx: FileContext, expr: cst.BaseExpression, fixed: str, safe: bool) -> FixProposal | None:
    prefix = _torch_prefix(ctx, expr)
    if prefix is None:
        return None
    return FixProposal("Use `torch.amp`", safe=safe, replacements=((expr, fixed.replace("torch.", prefix + ".", 1)),))
