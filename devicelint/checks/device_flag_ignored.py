from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.run_time_devices import selects_current_gpu
from devicelint.analysis.vocabulary import GPU_INDEX_OPTION
from devicelint.context import FileContext
from devicelint.rule_base import Rule, Violation, register

# torch.cuda calls that ask about a device rather than place anything on it.
_QUERY_PREFIXES = ("torch.cuda.", "torch.accelerator.")


@register
class DeviceFlagIgnored(Rule):
    """
    ## What it does
    Flags `.cuda()` without an index (and `device="cuda"`, `.to("cuda")`) in a script that parses
    a GPU index from its command line (`--device`, `--gpu`, `--gpu-id`, as an `int`) but never
    uses it to place anything: the option is only printed or handed to `torch.cuda` queries, or
    only spelled into a device string (`torch.device(f"cuda:{args.gpu}")`, `"cuda:%d" % args.gpu`,
    `"cuda:{}".format(args.gpu)`, which places only what is built on it; the message then says so), and nothing selects the GPU (`torch.cuda.set_device`, `CUDA_VISIBLE_DEVICES`, `with
    torch.cuda.device(...)`).

    ## Why it is a bug on a GPU
    An index-less `.cuda()` places on the current device, GPU 0 unless something selects
    another. The run asked for `--device 3` lands every tensor on GPU 0: it competes with
    whatever runs there, runs out of memory on a busy card, and the memory or speed the script
    reports for device 3 measures a GPU that holds nothing.

    ## Example
    ```python
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    x = torch.empty(n).cuda()
    print(torch.cuda.memory_allocated(args.device))
    ```

    ## Use instead
    ```python
    x = torch.empty(n).cuda(args.device)
    print(torch.cuda.memory_allocated(args.device))
    ```

    ## Fix safety
    No automatic fix: the option may need to reach several helpers.

    ## Known limits
    Only options with `type=int` or an integer default are known, parsed in the same file or by
    a function of another project module whose every `return` is `parser.parse_args()` (`opt =
    parse_opts()` of `opts.py`, which selects no device itself); a
    script that passes the option to any call other than a `torch.cuda` query (a
    `select_device(opt.device)` helper of its own) is trusted to use it.
    """

    code = "DL119"
    name = "device-flag-ignored"
    summary = "A script parses a GPU index (`--device`) but places tensors with an index-less `.cuda()`."
    message = "`{what}` places on GPU 0, but the script parses `{option}` and {usage}; pass `{use}`"
    tokens = ("add_argument",)

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        if selects_current_gpu(ctx):
            return
        option = _index_option(ctx) or _imported_option(ctx)
        if option is None:
            return
        flag, dest = option
        reads = [
            node
            for node in ctx.index.of_type(cst.Attribute)
            if node.attr.value == dest and type(ctx.index.parent(node)) is not cst.AssignTarget
        ]
        if not reads or any(_places_or_hands_on(ctx, read) for read in reads):
            return
        holder = ctx.code_for(reads[0].value)
        spelled = next(
            (
                text
                for read in reads
                if (text := next((a for a in ctx.index.ancestors(read) if _formatted_text(a) is not None), None))
                and _spells_a_device(ctx, text)
            ),
            None,
        )
        usage = (
            f"uses it only in a device string (`{ctx.code_for(spelled)}`), which places only what is built on it"
            if spelled is not None
            else "never uses it to place anything"
        )
        for node in ctx.index.of_type(cst.Call):
            what = _bare_cuda(ctx, node)
            if what is not None:
                use = f".cuda({holder}.{dest})" if what == ".cuda()" else f'f"cuda:{{{holder}.{dest}}}"'
                yield self.violation(node, what=what, option=flag, use=use, usage=usage)


def _index_option(ctx: FileContext) -> tuple[str, str] | None:
    """(`--device`, `device`) for an integer GPU-index option the file parses."""
    for call in ctx.index.of_type(cst.Call):
        if not (type(call.func) is cst.Attribute and call.func.attr.value == "add_argument") or not call.args:
            continue
        first = call.args[0].value
        flag = literal_value(first) if type(first) is cst.SimpleString else None
        if not isinstance(flag, str) or not GPU_INDEX_OPTION.match(flag):
            continue
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        typed = keywords.get("type")
        default = keywords.get("default")
        if (type(typed) is cst.Name and typed.value == "int") or type(default) is cst.Integer:
            if "nargs" in keywords or "action" in keywords:
                continue
            dest = keywords.get("dest")
            name = literal_value(dest) if type(dest) is cst.SimpleString else flag[2:].replace("-", "_")
            return (flag, name) if isinstance(name, str) else None
    return None


def _imported_option(ctx: FileContext) -> tuple[str, str] | None:
    """(`--gpu`, `gpu`) for an integer GPU-index option that a function of another project
    module parses and returns (`opt = parse_opts()`: the index's place "options:<flag>:<dest>")."""
    functions = ctx.project.functions
    if not any(place.startswith("options:") for place in functions.values()):
        return None
    for call in ctx.index.of_type(cst.Call):
        place = functions.get(dotted_name(call.func) or "", "")
        if place.startswith("options:"):
            _, flag, dest = place.split(":", 2)
            return flag, dest
    return None


def _places_or_hands_on(ctx: FileContext, read: cst.Attribute) -> bool:
    """Whether a read of the option goes anywhere but a print, a format string or a torch.cuda
    query."""
    node: cst.CSTNode = read
    for ancestor in ctx.index.ancestors(read):
        if type(ancestor) is cst.FormattedStringExpression or _formatted_text(ancestor) is not None:
            # a message, or a device string (`f"cuda:{args.gpu}"`, which places only what is
            # built on it there: an index-less `.cuda()` elsewhere still lands on GPU 0)
            return False
        if type(ancestor) is cst.Call and node is not ancestor.func:
            qualified = ctx.qualified_name(ancestor.func) or ""
            if qualified.startswith(_QUERY_PREFIXES) or (
                type(ancestor.func) is cst.Name and ancestor.func.value in ("print", "str", "int")
            ):
                return False
            return True
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
        node = ancestor
    parent = ctx.index.parent(read)
    # `device = args.device` and other bindings hand it on under another name
    return type(parent) in (cst.Assign, cst.AnnAssign, cst.Return, cst.Element, cst.DictElement)


def _formatted_text(node: cst.CSTNode) -> str | None:
    """The literal start of a string built from values: `f"cuda:{...}"`, `"cuda:%d" % ...`,
    `"cuda:{}".format(...)`."""
    if type(node) is cst.FormattedString:
        head = node.parts[0] if node.parts else None
        return head.value if type(head) is cst.FormattedStringText else ""
    template: cst.CSTNode | None = None
    if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo:
        template = node.left
    elif type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "format":
        template = node.func.value
    value = literal_value(template) if type(template) is cst.SimpleString else None
    return value if isinstance(value, str) else None


def _spells_a_device(ctx: FileContext, text: cst.CSTNode) -> bool:
    """`f"cuda:{...}"` (or `"cuda:%d" % ...`, `"cuda:{}".format(...)`) bound to a name or handed
    to `torch.device`, `.to()`, `.cuda()` or a `device=` keyword."""
    if not (_formatted_text(text) or "").startswith(("cuda", "mps", "xpu", "npu")):
        return False
    parent = ctx.index.parent(text)
    if type(parent) in (cst.Assign, cst.AnnAssign):
        return True
    if type(parent) is not cst.Arg:
        return False
    call = ctx.index.parent(parent)
    if type(call) is not cst.Call:
        return False
    if parent.keyword is not None:
        return parent.keyword.value == "device"
    return ctx.qualified_name(call.func) == "torch.device" or (
        type(call.func) is cst.Attribute and call.func.attr.value in ("to", "cuda")
    )


def _bare_cuda(ctx: FileContext, call: cst.Call) -> str | None:
    func = call.func
    if type(func) is cst.Attribute and func.attr.value == "cuda" and not call.args:
        if (ctx.qualified_name(func) or "").startswith("torch."):
            return None
        return ".cuda()"
    for arg in call.args:
        value = literal_value(arg.value) if type(arg.value) is cst.SimpleString else None
        if value != "cuda":
            continue
        if arg.keyword is not None and arg.keyword.value == "device":
            return 'device="cuda"'
        if arg.keyword is None and type(func) is cst.Attribute and func.attr.value == "to" and arg is call.args[0]:
            return '.to("cuda")'
    return None
