"""Small functions on placement facts and on the literals that create them.

Shared by the interpreter (`placement.py`) and its call evaluation (`placement_calls.py`).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import replace

import libcst as cst

from devicelint.analysis.devices import join_devices, literal_device, parse_device
from devicelint.analysis.moved_copies import moved_to_accelerator_by_helper
from devicelint.analysis.names import dotted_name, literal_value
from devicelint.analysis.placement_facts import (
    ACCELERATOR,
    ACCELERATOR_STRINGS,
    CPU,
    DEVICE,
    DEVICE_GUARD_WORDS,
    DEVICE_VALUE,
    FOLLOWS,
    MODULE,
    TENSOR_ANNOTATIONS,
    TENSOR_ONLY_METHODS,
    UNKNOWN,
    UNKNOWN_FACT,
    Fact,
    moves_to_accelerator,
)
from devicelint.analysis.vocabulary import PRESERVING_METHODS
from devicelint.context import FileContext

# Function and file names of data preparation, where CPU tensors are right.
DATA_WORDS = ("collat", "preprocess", "processing", "processor", "tokeniz", "feature_extract", "dataset", "transform")
# Folder names of a data package (`slowfast/datasets/decoder.py`, `project/data/utils.py`).
DATA_FOLDERS = frozenset(
    {
        "data",
        "dataloader",
        "dataloaders",
        "data_loader",
        "data_loaders",
        "loader",
        "loaders",
        "transforms",
        "preprocessing",
        "augmentation",
        "augmentations",
    }
)


def data_pipeline_path(path: str) -> bool:
    """A module of the data pipeline, by its file name (`transforms.py`, `collate_utils.py`) or
    the folder that holds it (`datasets/`, `data/`): its functions prepare samples in loader
    workers on the CPU. Only the nearest folder counts, so a checkout under `~/data/` does not."""
    parts = path.replace("\\", "/").lower().rsplit("/", 2)
    name = parts[-1]
    folder = parts[-2] if len(parts) > 1 else ""
    return any(word in name for word in DATA_WORDS) or folder in DATA_FOLDERS or "dataset" in folder


# A Python number (`2`, `0.5`): combined with a CPU tensor it stays on the CPU.
NUMBER = Fact(UNKNOWN, where="number")
# A `torch.utils.data.DataLoader`: iterating it yields CPU batches.
LOADER = Fact(UNKNOWN, factory="<loader>")
# Python data that is not a tensor (a list comprehension of numbers, a list of ids).
PY_DATA = Fact(UNKNOWN, where="data")
Env = dict[str, Fact]


# Annotations of a settings object, whatever the parameter is called (`opts: argparse.Namespace`).
_SETTINGS_TYPES = ("Namespace", "SimpleNamespace", "dict", "Dict", "DictConfig", "Mapping")
_SETTINGS_SUFFIXES = ("Config", "Args", "Arguments", "Options", "Settings", "Params", "Namespace")


def annotation_is_settings(annotation: cst.Annotation | None) -> bool:
    """A settings object (`argparse.Namespace`, a `...Config` class, a dict): its `.device` is
    a setting, usually a string, not a tensor's `torch.device`."""
    if annotation is None:
        return False
    text = (dotted_name(annotation.annotation) or "").rsplit(".", 1)[-1]
    return text in _SETTINGS_TYPES or text.endswith(_SETTINGS_SUFFIXES)


def configured_defaults(ctx: FileContext, field_name: str) -> list[cst.BaseExpression]:
    """Defaults the file declares for a `device` setting: `parser.add_argument("--device",
    default=...)` and class fields `device: str = ...` (dataclasses, config classes)."""
    found: list[cst.BaseExpression] = []
    for call in ctx.index.of_type(cst.Call):
        if type(call.func) is cst.Attribute and call.func.attr.value == "add_argument":
            flags = [_string(a.value) for a in call.args if a.keyword is None]
            if any(f is not None and f.lstrip("-").replace("-", "_") == field_name for f in flags):
                found += [a.value for a in call.args if a.keyword is not None and a.keyword.value == "default"]
    for cls in ctx.index.of_type(cst.ClassDef):
        body = cls.body.body if type(cls.body) is cst.IndentedBlock else ()
        for stmt in body:
            if type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:
                    if (
                        type(small) is cst.AnnAssign
                        and small.value is not None
                        and dotted_name(small.target) == field_name
                    ):
                        found.append(small.value)
    return found


def _string(node: cst.BaseExpression) -> str | None:
    value = literal_value(node) if type(node) is cst.SimpleString else None
    return value if isinstance(value, str) else None


# Attributes a tensor (or a module) has that are not settings: reading them says nothing.
_NOT_SETTINGS = frozenset(
    {
        "device",
        "dtype",
        "shape",
        "data",
        "grad",
        "T",
        "mT",
        "ndim",
        "requires_grad",
        "is_cuda",
        "layout",
        "real",
        "imag",
    }
)


def used_as_settings(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """A parameter the function only reads plain fields of, at least two of them, never calling
    a method of it, indexing it or handing it on whole (`opts.lr`, `opts.max_iter`,
    `opts.device`): a settings object, whose `.device` is where the author means to run rather
    than a tensor's device. Memoised per function."""
    memo: dict[tuple[int, str], bool] = ctx.shared("placement.settings_params", lambda c: {})
    key = (id(function), name)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _used_as_settings(ctx, function, name)
    return found


def _used_as_settings(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    fields: set[str] = set()
    for node in ctx.index.walk(function.body):
        if type(node) is not cst.Name or node.value != name:
            continue
        parent = ctx.index.parent(node)
        if type(parent) is not cst.Attribute or parent.value is not node:
            return False  # handed on whole, indexed, called, rebound
        if type(ctx.index.parent(parent)) is cst.Call and ctx.index.parent(parent).func is parent:  # type: ignore[union-attr]
            return False  # a method: an object with behaviour, not a bag of settings
        if ctx.index.in_binding_target(parent):
            return False
        if parent.attr.value not in _NOT_SETTINGS:
            fields.add(parent.attr.value)
    return len(fields) >= 2


# What reading a kept object says it is a tensor: its methods and tensor-only fields.
_TENSOR_READS = (TENSOR_ONLY_METHODS | PRESERVING_METHODS | _NOT_SETTINGS | {"sum", "mean", "clone", "numpy"}) - {
    "device"
}


def kept_device_holder(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    """A parameter of `__init__` that the instance keeps whole (`self.policy = policy`) and
    otherwise only reads the `.device` of (`Net().to(policy.device)`): an object that runs
    somewhere (an agent, a policy, a runner), whose `.device` is where the author means to run,
    as `trainer.device` is; a tensor the instance keeps is also used as one. Memoised."""
    memo: dict[tuple[int, str], bool] = ctx.shared("placement.device_holders", lambda c: {})
    key = (id(function), name)
    found = memo.get(key)
    if found is None:
        found = memo[key] = function.name.value == "__init__" and _kept_device_holder(ctx, function, name)
    return found


def _kept_device_holder(ctx: FileContext, function: cst.FunctionDef, name: str) -> bool:
    kept: set[str] = set()
    read = False
    for node in ctx.index.walk(function.body):
        if type(node) is not cst.Name or node.value != name:
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Attribute and parent.attr is node:
            continue  # `self.policy`: a field of that name, not the parameter
        if type(parent) is cst.Attribute and parent.attr.value == "device":
            if ctx.index.in_binding_target(parent):
                return False
            read = True
        elif (
            type(parent) is cst.Assign
            and parent.value is node
            and all(type(t.target) is cst.Attribute and dotted_name(t.target.value) == "self" for t in parent.targets)
        ):
            kept.update(t.target.attr.value for t in parent.targets if type(t.target) is cst.Attribute)
        else:
            return False  # used as anything else: a tensor, a settings bag, a callable
    cls = ctx.index.parent(ctx.index.parent(function) or function)
    return bool(kept) and read and type(cls) is cst.ClassDef and not _read_as_tensor(ctx, cls, kept)


def _read_as_tensor(ctx: FileContext, cls: cst.ClassDef, attrs: set[str]) -> bool:
    """Whether a method of the class uses one of `self.<attrs>` as a value (handed on, in
    arithmetic, indexed) or through what only a tensor has (`self.ref.sum()`, `.shape`), rather
    than through its own fields and methods (`self.agent.device`, `self.policy.act(obs)`)."""
    for node in ctx.index.walk(cls):
        if type(node) is not cst.Attribute or node.attr.value not in attrs or dotted_name(node.value) != "self":
            continue
        parent = ctx.index.parent(node)
        if type(parent) is cst.Attribute and parent.value is node:
            if parent.attr.value in _TENSOR_READS:
                return True
            continue
        if type(parent) is cst.AssignTarget or ctx.index.in_binding_target(node):
            continue
        return True
    return False


def annotation_is_tensor(annotation: cst.Annotation | None, ctx: FileContext | None = None) -> bool:
    """`x: Tensor`, `Optional[torch.Tensor]`, `"th.LongTensor"`; with `ctx`, also a class
    imported under another name (`from torch import Tensor as TT`)."""
    if annotation is None:
        return False
    node = annotation.annotation
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        text = value if isinstance(value, str) else ""
    else:
        text = dotted_name(node) or ""
        if type(node) is cst.Subscript and (dotted_name(node.value) or "").endswith("Optional"):
            inner = node.slice[0].slice if node.slice else None
            text = dotted_name(inner.value) if type(inner) is cst.Index else ""
        elif type(node) is cst.BinaryOperation and type(node.operator) is cst.BitOr:
            text = dotted_name(node.left) or ""
    text = (text or "").replace("Optional[", "").rstrip("]")
    if text in TENSOR_ANNOTATIONS:
        return True
    # `th.Tensor` under `import torch as th`: the alias is one name before the class
    prefix, _, last = text.rpartition(".")
    if prefix and "." not in prefix and last in TENSOR_ANNOTATIONS:
        return True
    if ctx is None or type(node) not in (cst.Name, cst.Attribute):
        return False
    qualified = ctx.qualified_name(node) or ""
    return qualified.startswith("torch.") and qualified.rsplit(".", 1)[-1] in TENSOR_ANNOTATIONS


def string_value(node: cst.CSTNode) -> str | None:
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        return value if isinstance(value, str) else None
    return None


def device_string_fact(text: str) -> Fact | None:
    base = text.split(":", 1)[0]
    if base == "cpu":
        return Fact(DEVICE_VALUE, where="cpu", device=parse_device(text), spelled="string")
    if base in ACCELERATOR_STRINGS:
        return Fact(
            DEVICE_VALUE,
            where=ACCELERATOR,
            device_expr=repr(text).replace("'", '"'),
            device=parse_device(text),
            spelled="string",
        )
    return None


DEFAULT_DEVICE_SETTERS = frozenset({"torch.set_default_tensor_type", "torch.set_default_device"})


def accelerator_default(ctx: FileContext, node: cst.BaseExpression) -> str | None:
    """The accelerator that a default-device setter's argument names (`"torch.cuda.FloatTensor"`,
    `"cuda"`, `torch.device("cuda:0")`, `f"cuda:{local_rank}"`), or None."""
    if type(node) is cst.FormattedString:
        indexed = literal_device(ctx, node)
        return ctx.code_for(node) if indexed is not None and indexed.type in ("cuda", "mps", "xpu") else None
    if type(node) is cst.SimpleString:
        value = literal_value(node)
        if isinstance(value, str) and (
            value.startswith("torch.cuda.") or value.split(":", 1)[0] in ("cuda", "mps", "xpu")
        ):
            return value
        return None
    qualified = ctx.qualified_name(node) or ""
    if qualified.startswith("torch.cuda.") and qualified[len("torch.cuda.") :][:1].isupper():
        return qualified
    if type(node) is cst.Call and ctx.qualified_name(node.func) == "torch.device" and node.args:
        return accelerator_default(ctx, node.args[0].value)
    return None


def sets_accelerator_default(ctx: FileContext) -> bool:
    """Whether the file makes the accelerator the default device anywhere (nerf-style scripts call
    `torch.set_default_tensor_type("torch.cuda.FloatTensor")`): factories there need no `device=`."""

    def scan(c: FileContext) -> bool:
        return any(
            c.qualified_name(call.func) in DEFAULT_DEVICE_SETTERS
            and call.args
            and accelerator_default(c, call.args[0].value) is not None
            for call in c.index.of_type(cst.Call)
        )

    return ctx.shared("placement.accelerator_default", scan)


def sets_default_device_off_cpu(ctx: FileContext) -> bool:
    """Whether the file calls a default-device setter with anything but the CPU, spelled or not
    (`torch.set_default_device(torch.device(cli.device))`): what its datasets build may be on
    that device, so its loaders' batches are not known to be on the host."""

    def scan(c: FileContext) -> bool:
        return any(
            c.qualified_name(call.func) in DEFAULT_DEVICE_SETTERS
            and call.args
            and "cpu" not in c.code_for(call.args[0].value).lower()
            and c.code_for(call.args[0].value) != '"torch.FloatTensor"'
            for call in c.index.of_type(cst.Call)
        )

    return ctx.shared("placement.default_device_off_cpu", scan)


def module_wide_accelerator_default(ctx: FileContext) -> str | None:
    """The accelerator the file makes the default device for everything it runs: every default
    setter it has is a statement of its top level or of its `if __name__ == "__main__":` block
    (none in a function, a class or another `if`), and each names the same accelerator. The
    functions the script runs then build there (`torch.set_default_device("cuda")` before
    `main()`); None where a setter is conditional, local, or names the CPU."""

    def scan(c: FileContext) -> str | None:
        setters = [call for call in c.index.of_type(cst.Call) if c.qualified_name(call.func) in DEFAULT_DEVICE_SETTERS]
        named: set[str] = set()
        for call in setters:
            statement = c.index.parent(c.index.parent(call) or call)
            holder = c.index.parent(statement) if statement is not None else None
            if type(holder) is cst.IndentedBlock:
                holder = c.index.parent(holder)
                if not (
                    type(holder) is cst.If and _is_main_test(holder.test) and c.index.parent(holder) is c.module
                ) and not _entry_point(c, holder):
                    return None
            elif holder is not c.module:
                return None
            value = accelerator_default(c, call.args[0].value) if call.args else None
            if value is None:
                return None
            named.add("cuda" if value.startswith("torch.cuda.") else value.split(":", 1)[0])
        return named.pop() if len(named) == 1 else None

    return ctx.shared("placement.module_wide_default", scan)


def _entry_point(ctx: FileContext, node: cst.CSTNode | None) -> bool:
    """A module-level function that the module's top level or its `if __name__ == "__main__":`
    block calls as a statement (`main()`, `sys.exit(main())`): the script's run, so a setter
    among its own statements sets the default for what it goes on to run."""
    if type(node) is not cst.FunctionDef or ctx.index.parent(node) is not ctx.module:
        return False
    name = node.name.value
    blocks: list[cst.BaseSuite | cst.Module] = [ctx.module]
    blocks += [s.body for s in ctx.module.body if type(s) is cst.If and _is_main_test(s.test)]
    for block in blocks:
        statements = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else ()
        for statement in statements:
            if type(statement) is not cst.SimpleStatementLine:
                continue
            for small in statement.body:
                value = small.value if type(small) is cst.Expr else None
                while type(value) is cst.Call and value.args and type(value.func) is not cst.Name:
                    value = value.args[0].value  # `sys.exit(main())`
                if type(value) is cst.Call and type(value.func) is cst.Name and value.func.value == name:
                    return True
    return False


def under_main_guard(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Inside the module's `if __name__ == "__main__":` block (the program's entry point)."""
    return any(type(a) is cst.If and _is_main_test(a.test) for a in ctx.index.ancestors(node))


def _is_main_test(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"`."""
    return (
        type(test) is cst.Comparison
        and type(test.left) is cst.Name
        and test.left.value == "__name__"
        and len(test.comparisons) == 1
        and type(test.comparisons[0].comparator) is cst.SimpleString
        and literal_value(test.comparisons[0].comparator) == "__main__"
    )


# Words without which a file never puts anything on an accelerator.
ACCELERATOR_WORDS = re.compile(r"cuda|device|accelerat|fabric|\.to\(|\b(?:gpu|mps|xla|xpu|npu|hpu)\b")


def names_accelerator_words(ctx: FileContext) -> bool:
    """The file's code (its comments left out) has one of `ACCELERATOR_WORDS`: a commented-out
    `# dtype = torch.cuda.FloatTensor  # uncomment to run on the GPU` places nothing."""
    return ctx.shared("placement.names_accelerator_words", lambda c: _code_has_accelerator_words(c.source))


def _code_has_accelerator_words(text: str) -> bool:
    lowered = text.lower()
    for match in ACCELERATOR_WORDS.finditer(lowered):
        start = lowered.rfind("\n", 0, match.start()) + 1
        if "#" not in lowered[start : match.start()]:
            return True  # no `#` before it on its line: code or a string, never a comment
        break  # a `#` may open a comment or sit in a string: only tokenizing tells
    else:
        return False  # the common case: no need to tokenize
    return bool(ACCELERATOR_WORDS.search(_without_comments(lowered)))


def _without_comments(text: str) -> str:
    """The text with its comments blanked (strings kept); the text itself where it does not
    tokenize (a statement cut out of its block)."""
    lines = text.splitlines(keepends=True)
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                row, col = token.start
                line = lines[row - 1]
                lines[row - 1] = line[:col] + line[token.end[1] :]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text
    return "".join(lines)


# An accelerator named by its kind, or a move: `device` alone is left out (`device="cpu"`).
_ACCELERATOR_KINDS = re.compile(r"cuda|accelerat|fabric|\.to\(|\b(?:gpu|mps|xla|xpu|npu|hpu)\b")
# Objects whose `.device` is a setting someone may make an accelerator (`args.device`).
_SETTINGS_OBJECTS = frozenset({"args", "arg", "cfg", "config", "conf", "opt", "opts", "hparams", "params", "flags"})


def names_no_accelerator(ctx: FileContext) -> bool:
    """The file never names an accelerator, never moves anything, and every device it states is
    the CPU or copied from where something already is (`device=self.device`, `device=x.device`,
    a parameter whose default is `"cpu"`), never read from a setting (`args.device`) or from a
    call: nothing it builds can be on an accelerator (a CPU-only tutorial whose environment
    defaults to `device="cpu"`)."""

    def build(c: FileContext) -> bool:
        lowered = c.source.lower()
        if _ACCELERATOR_KINDS.search(lowered) and _ACCELERATOR_KINDS.search(_without_comments(lowered)):
            return False
        for param in c.index.of_type(cst.Param):
            if "device" in param.name.value.lower() and not _cpu_literal(param.default):
                return False
        for node in c.index.of_type(cst.Attribute):
            if node.attr.value == "device" and _setting(node.value):
                return False
        for arg in c.index.of_type(cst.Arg):
            if arg.keyword is not None and arg.keyword.value == "device" and not _copied_or_cpu(c, arg.value):
                return False
        return True

    return ctx.shared("placement.names_no_accelerator", build)


def _cpu_literal(node: cst.BaseExpression | None) -> bool:
    return type(node) is cst.SimpleString and literal_value(node) == "cpu"


def _setting(node: cst.BaseExpression) -> bool:
    return type(node) is cst.Name and node.value.lower() in _SETTINGS_OBJECTS


def _copied_or_cpu(ctx: FileContext, value: cst.BaseExpression) -> bool:
    """`"cpu"`, `x.device`, `self.device`, or a parameter of the function (checked apart)."""
    if _cpu_literal(value):
        return True
    if type(value) is cst.Attribute and value.attr.value == "device":
        return not _setting(value.value)
    func = ctx.index.enclosing_function(value)
    return (
        type(value) is cst.Name
        and func is not None
        and any(p.name.value == value.value for p in (*func.params.params, *func.params.kwonly_params))
    )


def cpu_only_script(ctx: FileContext) -> bool:
    """A whole program in one file (a script with a `__main__` guard, a notebook, or a module whose
    top level calls its own functions or runs a loop) that never names an accelerator or a move: everything it
    builds runs on the CPU, so its CPU tensors meet nothing on a device (a CPU-only example, a
    tutorial notebook that trains on the CPU)."""
    program = (
        "__main__" in ctx.source
        or ctx.path.endswith(".ipynb")
        or runs_own_functions(ctx)
        or any(type(s) in (cst.For, cst.While) for s in ctx.module.body)  # `for epoch in range(100):` at the top
    )
    if not program:
        return False
    if not names_accelerator_words(ctx):
        return True
    shown = _devices_only_shown(ctx) | _environment_settings(ctx)
    return bool(shown) and not any(
        _code_has_accelerator_words(ctx.code_for(s)) for s in ctx.module.body if id(s) not in shown
    )


def _devices_only_shown(ctx: FileContext) -> set[int]:
    """The top-level statements `device = torch.device("cuda" if ... else "cpu")` whose name the
    program only prints (`print(torch.__version__, device)`), with those prints: a device chosen
    and shown, never used to place anything."""
    bound: dict[str, cst.SimpleStatementLine] = {}
    for statement in ctx.module.body:
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
            continue
        small = statement.body[0]
        if type(small) is cst.Assign and len(small.targets) == 1 and type(small.targets[0].target) is cst.Name:
            name = small.targets[0].target.value
            bound[name] = statement if name not in bound else bound[name]
    found: set[int] = set()
    for name, statement in bound.items():
        prints = set()
        for node in ctx.index.of_type(cst.Name):
            if node.value != name or node is statement.body[0].targets[0].target:  # type: ignore[attr-defined]  # an Assign, tested above
                continue
            parent = ctx.index.parent(node)
            if (type(parent) is cst.Attribute and parent.attr is node) or (
                type(parent) is cst.Arg and parent.keyword is node
            ):
                continue  # `torch.device`, `f(device=...)`: not the name
            shown = _top_level_print(ctx, node)
            if shown is None:
                break
            prints.add(id(shown))
        else:
            if prints:
                found |= prints | {id(statement)}
    return found


def _environment_settings(ctx: FileContext) -> set[int]:
    """Top-level `os.environ["CUDA_VISIBLE_DEVICES"] = "0"`: a setting of the process, which
    places nothing by itself."""
    found = set()
    for statement in ctx.module.body:
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
            continue
        small = statement.body[0]
        if (
            type(small) is cst.Assign
            and len(small.targets) == 1
            and type(small.targets[0].target) is cst.Subscript
            and dotted_name(small.targets[0].target.value) == "os.environ"
        ):
            found.add(id(statement))
    return found


def _top_level_print(ctx: FileContext, node: cst.CSTNode) -> cst.CSTNode | None:
    """The top-level statement `print(...)` that `node` is an argument of, else None."""
    parent = ctx.index.parent(node)
    if type(parent) is not cst.Arg:
        return None
    call = ctx.index.parent(parent)
    if not (type(call) is cst.Call and type(call.func) is cst.Name and call.func.value == "print"):
        return None
    expr = ctx.index.parent(call)
    statement = ctx.index.parent(expr) if type(expr) is cst.Expr else None
    return statement if statement is not None and ctx.index.parent(statement) is ctx.module else None


def runs_own_functions(ctx: FileContext) -> bool:
    """The module's top level calls a function the module defines (`train()` then `evaluate()`
    as statements, no `__main__` guard): running the file runs the program, as a script does."""
    defined = {s.name.value for s in ctx.module.body if type(s) is cst.FunctionDef}
    for statement in ctx.module.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            call = small.value if type(small) is cst.Expr else None
            if type(call) is cst.Call and type(call.func) is cst.Name and call.func.value in defined:
                return True
    return False


def looks_like_device_name(name: str) -> bool:
    lowered = name.lower()
    return "device" in lowered or lowered in ("dev", "rank", "local_rank", "gpu", "gpu_id", "gpu_ids")


def is_device_guard(test: cst.CSTNode, ctx: FileContext) -> bool:
    """Whether an `if` test depends on the device (`x.is_cuda`, `torch.cuda.is_available()`);
    memoised per test, since loops and followed helpers ask again."""
    memo: dict[int, bool] = ctx.shared("placement.device_guards", lambda c: {})
    found = memo.get(id(test))
    if found is None:
        found = memo[id(test)] = _mentions_device(test, ctx)
    return found


def on_a_device_path(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Inside a branch (not the test) of an `if` or conditional expression of the same function
    whose test asks about the device (`x.is_cuda`, `torch.cuda.is_available()`, `use_gpu`)."""
    child = node
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if (
            isinstance(ancestor, (cst.If, cst.IfExp))
            and child is not ancestor.test
            and is_device_guard(ancestor.test, ctx)
        ):
            return True
        child = ancestor
    return False


def tests_availability(ctx: FileContext, test: cst.CSTNode) -> bool:
    """Whether a test asks the machine for an accelerator (`torch.cuda.is_available()`, also
    in `use_gpu and torch.backends.mps.is_available()`), not a user's flag."""
    return any(
        type(node) is cst.Call and (ctx.qualified_name(node.func) or "").endswith(".is_available")
        for node in ctx.index.walk(test)
    )


def on_a_host_path(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Inside the branch of an `if` or conditional expression of the same function that runs
    when its device test says no accelerator is used: the body of `if not use_gpu:`, the
    `else` of `if torch.cuda.is_available():`, `x.numpy()` in `x.numpy() if not train_on_gpu
    else x.cpu().numpy()`. What the code moves under the same test is on the host there."""
    child = node
    for ancestor in ctx.index.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            uses_device = _holds_with_a_device(ancestor.test, ctx)
            if uses_device is not None and (child is ancestor.body) != uses_device:
                return True
        child = ancestor
    return False


# A flag that, when it holds, keeps the run on the host (`args.cpu`, `args.no_cuda`).
_HOST_FLAG = re.compile(r"cpu|no_?cuda|no_?gpu|disable")


def _holds_with_a_device(test: cst.BaseExpression, ctx: FileContext) -> bool | None:
    """Whether a device test holds when an accelerator is used (`use_gpu`, `args.cuda`,
    `torch.cuda.is_available()`) or when none is (`args.cpu`, `not use_gpu`); None for any
    other test (a comparison, a combination), which this does not judge."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _holds_with_a_device(test.expression, ctx)
        return None if inner is None else not inner
    if type(test) not in (cst.Name, cst.Attribute, cst.Call) or not is_device_guard(test, ctx):
        return None
    return not _HOST_FLAG.search(ctx.code_for(test).lower())


def _mentions_device(test: cst.CSTNode, ctx: FileContext) -> bool:
    for node in ctx.index.walk(test):
        if type(node) is cst.Name:
            text = node.value
        elif type(node) is cst.Attribute:
            text = node.attr.value
        elif type(node) is cst.SimpleString:
            text = node.value
        else:
            continue
        text = text.lower()
        if any(word in text for word in DEVICE_GUARD_WORDS) and _GUARD_WORD.search(text):
            return True
    return False


# The short device names must start a word: `inputs` holds "npu" and `timestamps` "mps".
_GUARD_WORD = re.compile(r"cuda|gpu|device|is_available|accelerator|cpu|(?<![a-z])(?:mps|xla|npu|hpu|xpu)")


def join(a: Fact | None, b: Fact | None, strict: bool = False, branches: bool = False) -> Fact:
    """The fact after two paths meet. A factory's CPU tensor on one path stays CPU (it meets
    whatever the other path meets), unless the paths split on the device (`strict`). Where the
    paths are the branches of a condition (`branches`) and the other one gives a device tensor,
    the CPU tensor is marked as a conflict: its device depends on the path."""
    if a is None:
        return b or UNKNOWN_FACT
    if b is None or a == b:
        return a
    if a.fields is not None or b.fields is not None:
        return _join_fields(a, b, strict, branches)
    if a.elements == () or b.elements == ():
        # an empty list on one path, the same list after `append`s on the other
        return b if a.elements == () else a
    if a.elements is not None or b.elements is not None:
        # `state = self.init_hidden(...)` on one path, a parameter on the other: element-wise.
        size = len(a.elements if a.elements is not None else b.elements or ())
        left = a.elements if a.elements is not None else (a if a.kind != UNKNOWN else UNKNOWN_FACT,) * size
        right = b.elements if b.elements is not None else (b if b.kind != UNKNOWN else UNKNOWN_FACT,) * size
        if len(left) == len(right):
            if a.alike and b.alike and UNKNOWN_FACT in (left[0], right[0]):
                # slots still empty on one path (`hs = [None] * n` before the loop that fills them)
                return a if right[0] == UNKNOWN_FACT else b
            alike = (a.alike or a.elements is None) and (b.alike or b.elements is None)
            return Fact(UNKNOWN, elements=tuple(join(x, y, strict, branches) for x, y in zip(left, right)), alike=alike)
        return UNKNOWN_FACT
    if not strict:
        if a.from_factory and not b.batch:
            return replace(a, conflict=True) if branches and devicey(b) else a
        if b.from_factory and not a.batch:
            return replace(b, conflict=True) if branches and devicey(a) else b
    if a.kind == b.kind and a.kind in (DEVICE, MODULE, DEVICE_VALUE) and not a.batch and not b.batch:
        # `"cuda" if torch.cuda.is_available() else "cpu"`: the device the author means is the GPU.
        where = (
            a.where
            if a.where == b.where
            else (FOLLOWS if a.kind == DEVICE else ACCELERATOR if a.kind == DEVICE_VALUE else None)
        )
        return Fact(
            a.kind,
            where=where,
            device_expr=a.device_expr if a.device_expr == b.device_expr else None,
            device=join_devices(a.device, b.device, gpu_branch=a.kind == DEVICE_VALUE),
            spelled=a.spelled if a.spelled == b.spelled else None,
            factory=a.factory if a.kind == MODULE and a.factory == b.factory else None,
        )
    return UNKNOWN_FACT


def module_on_gpu_branch(a: Fact, b: Fact) -> Fact | None:
    """A module moved to the accelerator on the path of a device test and left where it was
    built (or loaded) on the other (`if torch.cuda.is_available(): model.cuda()`, `if
    args.gpu >= 0: model = model.cuda(args.gpu)`): as with `"cuda" if
    torch.cuda.is_available() else "cpu"`, the device the author means is the GPU, where a
    CPU tensor handed to it fails. Tensors moved under a user's flag stay of no place (a
    partner moved under any test is then of no place too, so only what no path moves is
    reported); `tensor_on_gpu_branch` places those moved under an availability test."""
    for gpu, other in ((a, b), (b, a)):
        if (
            _moved_whole(gpu, (MODULE, UNKNOWN))
            and other.where in (None, "cpu")
            and (other.kind == MODULE or _unplaced_value(other))
        ):
            kind = MODULE if other.kind == MODULE else gpu.kind
            return Fact(kind, where=ACCELERATOR, factory=other.factory, device=gpu.device)
    return None


def _moved_whole(fact: Fact, kinds: tuple[str, ...]) -> bool:
    """A value of one of `kinds` on the accelerator as a whole (not a container of parts)."""
    return fact.where == ACCELERATOR and fact.kind in kinds and fact.elements is None and fact.fields is None


def _unplaced_value(fact: Fact) -> bool:
    """Something the analysis knows nothing of (a loaded checkpoint's entry, a parameter), not
    a batch, a factory's tensor, a container or a settings value."""
    return fact == UNKNOWN_FACT


def tensor_on_gpu_branch(a: Fact, b: Fact) -> Fact | None:
    """A host tensor moved to the accelerator on the path of a device test and left on the CPU
    on the other (`if torch.cuda.is_available(): msa = msa.cuda()`): as for a module, the device
    the author means is the GPU, where a CPU tensor made beside it fails."""
    for gpu, other in ((a, b), (b, a)):
        if (
            _moved_whole(gpu, (DEVICE, UNKNOWN))
            and not gpu.batch
            and other.kind == CPU
            and not other.batch
            and not other.left_behind
        ):
            return Fact(DEVICE, where=ACCELERATOR, device_expr=gpu.device_expr, device=gpu.device)
    return None


def _join_fields(a: Fact, b: Fact, strict: bool, branches: bool) -> Fact:
    """Part by part; an empty dict on one path and the same dict after writes on the other
    (`out = {}` before a loop that fills it) keeps the written parts."""
    if a.fields is None or b.fields is None:
        return UNKNOWN_FACT
    if not a.fields or not b.fields:
        return b if not a.fields else a
    keys = dict.fromkeys([k for k, _ in a.fields] + [k for k, _ in b.fields])
    return Fact(UNKNOWN, fields=tuple((k, join(a.field(k), b.field(k), strict, branches)) for k in keys))


def join_envs(a: Env, b: Env, strict: bool, branches: bool = False) -> Env:
    out: Env = {}
    for key in a.keys() | b.keys():
        out[key] = join(a.get(key, UNKNOWN_FACT), b.get(key, UNKNOWN_FACT), strict, branches)
    return out


def flatten(fact: Fact, node: cst.CSTNode) -> list[tuple[Fact, cst.CSTNode]]:
    if fact.fields is not None:
        if type(node) is cst.Dict:
            return [
                pair
                for element in node.elements
                if type(element) is cst.DictElement
                for pair in flatten(fact.field(string_value(element.key) or ""), element.value)
            ]
        return [pair for _, part in fact.fields for pair in flatten(part, node)]
    if fact.elements is not None:
        out = []
        if isinstance(node, (cst.Tuple, cst.List)):
            for element, item in zip(fact.elements, node.elements):
                out.extend(flatten(element, item.value))
        else:
            for element in fact.elements:
                out.extend(flatten(element, node))
        return out
    return [(fact, node)]


def devicey(fact: Fact) -> bool:
    """A device tensor, or a moved value that may be a tensor or a module."""
    return fact.kind == DEVICE or (fact.kind == UNKNOWN and fact.where == ACCELERATOR)


def cpu_side(fact: Fact, allow_scalar: bool) -> bool:
    if fact.kind != CPU or (fact.scalar and not allow_scalar and not fact.conflict):
        return False
    return fact.from_factory or fact.batch or fact.copied or fact.left_behind


def compatible(cpu: Fact, device: Fact) -> bool:
    # A batch that was never moved only clashes with what is certainly on the accelerator.
    return not cpu.batch or device.where == ACCELERATOR


def is_number(node: cst.BaseExpression) -> bool:
    if type(node) is cst.UnaryOperation:
        node = node.expression
    if isinstance(node, (cst.Integer, cst.Float)) or type(node) is cst.Name and node.value in ("True", "False"):
        return True
    return (
        type(node) is cst.Call
        and type(node.func) is cst.Name
        and node.func.value in ("float", "int")
        and len(node.args) == 1
        and type(node.args[0].value) is cst.SimpleString
    )


def is_empty_placeholder(call: cst.Call, short: str) -> bool:
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
    return short != "tensor" and type(first) is cst.Integer and first.value == "0"


def is_python_data(fact: Fact) -> bool:
    """A value the analysis knows to be plain Python data (numbers, lists of numbers)."""
    return (
        fact == PY_DATA
        or fact == NUMBER
        or (fact.elements is not None and bool(fact.elements) and all(is_python_data(e) for e in fact.elements))
    )


def is_literal_data(node: cst.BaseExpression) -> bool:
    """Numbers and (nested) lists/tuples of numbers or names: data that cannot be a tensor."""
    if is_number(node):
        return True
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(
            type(e) is not cst.StarredElement and (is_literal_data(e.value) or type(e.value) is cst.Name)
            for e in node.elements
        ) and bool(node.elements)
    if type(node) is cst.ListComp:
        return True
    return False


# Factories whose positional arguments are the sizes of the tensor they make.
_SIZED_FACTORIES = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"})
# Factories whose result is 1-D whatever their arguments: a range or a schedule of steps.
_RANGE_FACTORIES = frozenset({"torch.arange", "torch.linspace", "torch.logspace", "torch.range"})


def indexes_every_dimension(value: Fact, node: cst.Subscript) -> bool:
    """`torch.rand(2)[0]`, `torch.tensor([1., 2.])[i]`: integers index away every dimension a
    CPU factory stated, leaving a 0-dim tensor (which PyTorch lets meet device tensors)."""
    if not all(
        type(e.slice) is cst.Index
        and not isinstance(e.slice.value, (cst.Slice, cst.Ellipsis))
        and not (type(e.slice.value) is cst.Name and e.slice.value.value == "None")
        for e in node.slice
    ):
        return False
    return stated_dimensions(value) == len(node.slice)


def stated_dimensions(value: Fact) -> int | None:
    """How many dimensions the CPU factory that made `value` states (`torch.arange(n)` 1,
    `torch.zeros(2, 3)` 2, `torch.tensor([[1, 2]])` 2); None when it does not show them."""
    origin = value.origin
    if value.kind != CPU or type(origin) is not cst.Call or value.factory is None:
        return None
    if value.factory in _RANGE_FACTORIES:
        return 1
    if value.factory in _SIZED_FACTORIES:
        sizes = [a for a in origin.args if a.keyword is None]
        if any(a.star for a in sizes):
            return None
        if len(sizes) == 1 and isinstance(sizes[0].value, (cst.Tuple, cst.List)):
            return len(sizes[0].value.elements)
        return len(sizes)
    if value.factory in ("torch.tensor", "torch.as_tensor") and origin.args:
        data = origin.args[0].value
        depth = 0
        while isinstance(data, (cst.List, cst.Tuple)) and data.elements:
            depth += 1
            data = data.elements[0].value
        return depth or None
    return None


def moves_what_it_yields(ctx: FileContext, loop: cst.CSTNode) -> bool:
    """A loop that moves what it yields to the accelerator (`for a, b in pairs: f(a.to(device))`,
    or `while True: a, b = next(it)` with the same move): it walks host batches, whatever its
    iterable is called. Memoised per loop."""
    memo: dict[int, bool] = ctx.shared("placement.moving_loops", lambda c: {})
    found = memo.get(id(loop))
    if found is None:
        found = memo[id(loop)] = _moves_what_it_yields(ctx, loop)
    return found


def _entry_root(node: cst.BaseExpression) -> str | None:
    """The name a value or an entry of it is read from (`batch`, `batch["pixels"]`,
    `pair[0]`): a loop that moves one entry of what it yields walks host batches too."""
    while type(node) is cst.Subscript:
        node = node.value
    return node.value if type(node) is cst.Name else None


def _moves_what_it_yields(ctx: FileContext, loop: cst.CSTNode) -> bool:
    if type(loop) is cst.For:
        yielded = {n.value for n in ctx.index.walk(loop.target) if type(n) is cst.Name}
    elif type(loop) is cst.While:
        # `while True: x, y = next(it)`: what `next()` hands the loop is what it walks
        yielded = {
            n.value
            for assign in ctx.index.within(loop.body, cst.Assign)
            if type(assign.value) is cst.Call and dotted_name(assign.value.func) == "next"
            for target in assign.targets
            for n in ctx.index.walk(target.target)
            if type(n) is cst.Name
        }
    else:
        return False
    calls = ctx.index.within(loop.body, cst.Call)
    if any(
        moves_to_accelerator(call) and _entry_root(call.func.value) in yielded
        for call in calls
        if type(call.func) is cst.Attribute
    ):
        return True
    # or hands them to a helper of the file that returns them moved (`pair_to_device(x, y, dev)`)
    return any(
        type(moved) is cst.Name and moved.value in yielded
        for call in calls
        if type(call.func) is cst.Name or type(call.func) is cst.Attribute and dotted_name(call.func.value) == "self"
        for moved in moved_to_accelerator_by_helper(ctx, call)
    )
