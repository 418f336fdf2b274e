"""Source text in, sorted findings out. No printing, no file I/O, no global state."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst._position import CodePosition

from devicelint.context import FileContext
from devicelint.cst_parse import parse_module
from devicelint.finding import SYNTAX_ERROR, Edit, FileResult, Finding, Fix, error_finding, not_analysed_finding
from devicelint.fix_text import code_in_place
from devicelint.fixes import apply_fixes, line_offsets
from devicelint.noqa_check import UNUSED_NOQA, unused_noqa
from devicelint.positions import node_ranges
from devicelint.project.view import EMPTY_VIEW, ProjectView
from devicelint.registry import ReportedElsewhere, Rule, Violation
from devicelint.reparse import ParseCache
from devicelint.suppression import Suppressions

# CPython's tokenizer refuses more than 200 nested brackets; LibCST's native parser would
# try, and at a few thousand levels it overflows its stack and kills the process.
MAX_BRACKET_DEPTH = 200
_BRACKETS = re.compile(r"[()\[\]{}]")
# A line this long is generated code or a pathological chain: CPython judges it first.
LONG_LINE = 2000
PYTHON_RECURSION_LIMIT = 1000
# LibCST's tree takes up to about 3.5 KiB per token (measured: 1.9 on plain statements, 2.8 on
# flat lists of calls, 3.4 on nested calls, an opening bracket counted twice): this many keeps
# one file's parse and analysis under 1 GiB. The largest real file seen, torch's
# common_methods_invocations.py (1.4 MB, 225,000 tokens), needs 750 MiB and stays under it.
DEFAULT_MAX_TOKENS = 270_000
KIB_PER_TOKEN = 3.5
# LibCST's parse time grows with the cube of a chain of binary operators (1,000 operands: 0.4 s,
# 2,000: 3 s, 4,000: 30 s on an idle machine); CPython accepts about 3,000 at its default
# recursion limit. Only chains on a long line are measured (see `_too_deep`).
MAX_OPERATOR_CHAIN = 1000
# Strings (with their prefixes) and comments count as one token each: a docstring costs LibCST
# one node however many words it holds.
_STRINGS = (
    r'"""(?:[^"\\]|\\.|"(?!""))*"""',
    r"'''(?:[^'\\]|\\.|'(?!''))*'''",
    r'"(?:[^"\\\n]|\\.)*"',
    r"'(?:[^'\\\n]|\\.)*'",
)
_TOKEN = re.compile(r"[rRbBuUfF]{0,2}(?:" + "|".join(_STRINGS) + r")|#[^\n]*|\w+|[^\w\s]", re.DOTALL)


@dataclass(frozen=True)
class EngineOptions:
    rules: tuple[type[Rule], ...]
    torch_version: str | None = None
    # "none": report only; "safe"/"unsafe": also compute the source with those fixes applied.
    fix_mode: str = "none"
    # Skip parsing when no selected rule's tokens occur in the text.
    prefilter: bool = True
    # A language-server worker's trees of the buffers it linted last, reused by `reparse`.
    parse_cache: ParseCache | None = None
    # Files that weigh more tokens are not parsed (`max-file-tokens`; 0: no limit).
    max_file_tokens: int = DEFAULT_MAX_TOKENS
    # What the file sees of the other modules of its project (`devicelint.project`).
    project: ProjectView = EMPTY_VIEW
    # For a notebook's joined cells, the cell each line came from (empty for a file).
    cells: tuple[int, ...] = ()


# Fix rounds per file: a fix that overlaps another waits for the next round, as in Ruff.
FIX_ROUNDS = 10


def wanted_rules(text: str, rules: Sequence[type[Rule]], view: ProjectView = EMPTY_VIEW) -> list[type[Rule]]:
    """The rules that could fire on `text`, judged by the tokens each one declares (and, for
    rules that read the imported helpers, by whether the file imports one)."""
    helpers = bool(view.plain_classes) or any(h.places_arguments() for h in view.helpers.values())
    brought = _imported_words(view)
    return [
        rule
        for rule in rules
        if any(token in text or token in brought for token in rule.tokens) or (helpers and rule.reads_helpers)
    ]


def _imported_words(view: ProjectView) -> str:
    """The words of the code the file's imports run for it: a builder of torchmetrics objects
    stands for `torchmetrics`, a set-up helper for the calls it makes."""
    places = set(view.functions.values())
    words = ["torchmetrics"] if "metric" in places else []
    if view.base_wrappers:  # a base class of another module keeps a wrapper on `self`
        words.append("DataParallel")
    if any(place.startswith("generator:") for place in places):
        words.append("torch.Generator")  # an imported function returns one
    if any(place.startswith("loss:") for place in places):
        words.append("weight")  # an imported function returns a loss built with a class weight
    if any(place.startswith("options:") for place in places):
        words.append("add_argument")  # an imported function parses a GPU-index option
    if view.replicated or any(place.startswith("wrapper:") for place in places):
        words.append("DataParallel")  # another module wraps a class of this one, or returns a wrapper
    for helper in view.helpers.values():
        words.extend(helper.uses.distributed_setup)
        if helper.uses.default_device:
            words.append("set_default_device")  # it makes an accelerator the default device
        if helper.uses.accelerator_defaults:
            words.append("cuda")  # a device parameter defaults to an accelerator
        if helper.uses.loads_state:
            words.append("load_state_dict")
        if helper.uses.step_effects:
            words.append("backward")  # it runs the step: the AMP and sync rules read the caller
        if helper.uses.runs_unmoved or helper.uses.runs_unmoved_if_passed:
            words.append(".to(device)")  # it moves the model's inputs
        if helper.uses.collectives:
            words.append("all_reduce")  # it hands what it is given to a collective
        if helper.uses.unmapped_loads:
            words.append("torch.load")  # it loads with the `map_location` its caller hands, None by default
        if helper.uses.accelerator_tensor:
            words.append("cuda")  # it puts tensors on the GPU (a dataset calling it is DL109's)
    if any(cls.host_only for cls in view.classes.values()):
        words.append("pack_padded_sequence")  # an imported module class packs what it is handed
    if any(cls.metric_feeds for cls in view.plain_classes.values()):
        words.append("torchmetrics")  # an imported class keeps a metric it feeds
    if any(cls.step_effects for cls in view.plain_classes.values()):
        words.append("backward")  # an imported trainer class runs the step
    if any(e[1] == "unscale" for cls in view.plain_classes.values() for e in cls.step_effects):
        words.append("unscale")  # and unscales its gradients
    if any(place == "device-tensor" for cls in view.plain_classes.values() for _, place in cls.method_places):
        words.append("cuda")  # an imported class's method returns a GPU tensor (a dataset inheriting it is DL109's)
    if any(cls.state_loads for cls in view.plain_classes.values()):
        words.append("optim.load_state_dict")  # an imported trainer class resumes its optimizer
    if view.device_constants:
        words.append("torch.device")  # an imported name is one
    return " ".join(words)


def decode_source(data: bytes) -> str:
    """Decode as Python does: a BOM or PEP 263 coding cookie, else UTF-8."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


def _decode(data: bytes | str, path: str) -> str | Finding:
    if isinstance(data, str):
        return data
    try:
        try:
            return decode_source(data)
        except SyntaxError as err:  # unknown coding cookie, or a bad byte in the first two lines
            data.decode("utf-8")  # a bad byte: report where it is, below
            return error_finding(path, err.lineno or 1, 1, f"cannot decode the file: {err.msg}")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        return error_finding(
            path,
            line,
            column,
            f"cannot decode the file as {err.encoding}: byte 0x{data[err.start]:02x} is invalid; "
            "save it as UTF-8 or declare its encoding with a `# -*- coding: ... -*-` line",
        )


def token_weight(text: str) -> int:
    """What LibCST's tree of `text` will weigh, in tokens: strings and comments count once,
    an opening bracket twice (its node carries whitespace on both sides)."""
    return len(_TOKEN.findall(text)) + text.count("(") + text.count("[") + text.count("{")


def _too_large(text: str, limit: int) -> str | None:
    """Why `text` is too large to parse within the memory budget, else None."""
    # A token is at least one character and weighs at most two: shorter files need no count.
    if not limit or 2 * len(text) <= limit:
        return None
    weight = token_weight(text)
    if weight <= limit:
        return None
    return (
        f"the file is too large: {weight:,} tokens, over the limit of {limit:,} "
        f"(parsing it would take about {weight * KIB_PER_TOKEN / 2**20:.1f} GiB; "
        "set `max-file-tokens` to change the limit)"
    )


def _too_deep(text: str, path: str) -> Finding | None:
    """CPython's own verdict on a file that may be nested beyond what a parser can take (DL000),
    or DL002 for a valid one LibCST would take too long on, else None.

    LibCST takes minutes and gigabytes on what CPython rejects at once: brackets nested hundreds
    deep, or a single line of thousands of chained attributes, calls, operators, `not`s or
    `lambda`s. Only such files pay for the extra CPython parse.
    """
    if max(map(len, text.split("\n"))) < LONG_LINE and _bracket_depth(text) <= MAX_BRACKET_DEPTH:
        return None
    # As a default `python` would: the workers raise the recursion limit for LibCST's sake.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_RECURSION_LIMIT)
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        if "too many nested" in err.msg or "too complex" in err.msg:
            return error_finding(path, err.lineno or 1, err.offset or 1, f"not parsed: {err.msg}")
        return None  # maybe newer syntax than this Python knows: LibCST decides
    except (RecursionError, MemoryError) as err:
        return error_finding(path, 1, 1, f"not parsed: nested too deeply for Python to compile ({type(err).__name__})")
    except ValueError:
        return None
    finally:
        sys.setrecursionlimit(limit)
    operands, line = _longest_operator_chain(tree)
    if operands > MAX_OPERATOR_CHAIN:
        return not_analysed_finding(
            path,
            (
                f"line {line} chains {operands:,} operands with binary operators, over the limit of "
                f"{MAX_OPERATOR_CHAIN:,} (the parser's time grows with the cube of such a chain)"
            ),
        )
    return None


def _longest_operator_chain(tree: ast.AST) -> tuple[int, int]:
    """The most operands in one left-nested chain of binary operators (`a + b - c * ...`), and
    the line it starts on."""
    inner = set()
    chains = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            chains.append(node)
            if isinstance(node.left, ast.BinOp):
                inner.add(id(node.left))
    longest, line = 0, 1
    for node in chains:
        if id(node) in inner:
            continue
        operands, left = 2, node.left
        while isinstance(left, ast.BinOp):
            operands, left = operands + 1, left.left
        if operands > longest:
            longest, line = operands, node.lineno
    return longest, line


def _bracket_depth(text: str) -> int:
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def _explain_syntax_error(text: str, path: str, err: cst.ParserSyntaxError) -> Finding:
    """Prefer CPython's message and position: LibCST points at the token after the mistake."""
    try:
        ast.parse(text)
    except SyntaxError as py_err:
        return error_finding(path, py_err.lineno or 1, py_err.offset or 1, f"syntax error: {py_err.msg}")
    except (RecursionError, MemoryError, ValueError):
        pass
    return error_finding(path, err.raw_line, err.raw_column + 1, f"syntax error: {err.message}")


def _parse(text: str, path: str) -> cst.Module | Finding:
    """The LibCST tree, or the DL000 finding that says why there is none."""
    deep = _too_deep(text, path)
    if deep is not None:
        return deep
    try:
        return parse_module(text)
    except cst.ParserSyntaxError as err:
        return _explain_syntax_error(text, path, err)


def _unparsable(text: str, path: str) -> tuple[Finding, ...]:
    """DL000 for a file no rule needs parsed: CPython's fast parser first, LibCST to confirm."""
    import warnings

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_RECURSION_LIMIT)  # what a default `python` accepts
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
        return ()
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        pass  # maybe newer syntax than this Python knows: LibCST decides
    finally:
        sys.setrecursionlimit(limit)
    parsed = _parse(text, path)
    return (parsed,) if isinstance(parsed, Finding) else ()


def lint_source(data: bytes | str, path: str, options: EngineOptions, rounds_left: int = FIX_ROUNDS) -> FileResult:
    """Lint one file's contents. Syntax problems become DL000 findings, never exceptions.

    With fixes on, the fixed source is linted and fixed again until nothing changes, at most
    `rounds_left` times."""
    text = _decode(data, path)
    if isinstance(text, Finding):
        return FileResult(path, (text,))
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        return FileResult(
            path, (error_finding(path, line, 1, "the file contains a NUL byte; it is not Python source"),)
        )
    rules = wanted_rules(text, options.rules, options.project) if options.prefilter else list(options.rules)
    if not rules:
        # Nothing to run, but a file that does not parse is still a finding (DL000).
        return FileResult(path, _unparsable(text, path), analysed=False)
    too_large = _too_large(text, options.max_file_tokens)
    if too_large is not None:
        return FileResult(path, (not_analysed_finding(path, too_large),))
    cache = options.parse_cache
    module = cache.parse(text, path, _parse) if cache is not None else _parse(text, path)
    if isinstance(module, Finding):
        return FileResult(path, (module,))
    ctx = FileContext(
        path=path,
        source=text,
        module=module,
        torch_version=options.torch_version,
        project=options.project,
        cells=options.cells,
    )
    violations: list[Violation] = []
    crashes: list[str] = []
    try:
        for rule in rules:
            if rule.code == SYNTAX_ERROR:
                continue
            try:
                violations.extend(rule().check(ctx))
            except RecursionError:
                return FileResult(path, (not_analysed_finding(path, f"the file is nested too deeply for {rule.code}"),))
            except Exception as err:  # noqa: BLE001 - one rule's bug must not cost the other rules' findings
                crashes.append(f"{rule.code} crashed on {path}: {type(err).__name__}: {err}")
        first_lines = cache.first_lines(path, text) if cache is not None and violations else None
        findings, fired = _to_findings(ctx, violations, first_lines) if violations else ([], set())
    finally:
        ctx.release()
    if any(rule.code == UNUSED_NOQA for rule in options.rules):
        # Codes reported elsewhere (DL000, the runtime's DL6xx) never fire here: not judged.
        judged = {r.code for r in options.rules if not issubclass(r, ReportedElsewhere)} - _crashed(crashes)
        findings = sorted(
            [*findings, *unused_noqa(path, text, fired, judged, _known_codes())], key=lambda f: f.sort_key
        )
    if not findings:
        return FileResult(path, (), internal_errors=tuple(crashes))
    if crashes or options.fix_mode == "none" or not any(f.fix for f in findings):
        # No fixes on a file a rule failed on: that rule's own edits are unknown.
        return FileResult(path, tuple(findings), internal_errors=tuple(crashes))
    fixed, applied = apply_fixes(text, findings, unsafe=options.fix_mode == "unsafe")
    if fixed is not None and rounds_left > 1:
        # As Ruff does: fixes that overlapped one applied in this round get the next one.
        again = lint_source(fixed, path, options, rounds_left - 1)
        if again.fixed_source is not None:
            fixed, applied = again.fixed_source, applied + again.fixes_applied
    return FileResult(path, tuple(findings), fixed, applied)


def _crashed(crashes: list[str]) -> set[str]:
    return {message.split(" ", 1)[0] for message in crashes}


def _known_codes() -> set[str]:
    from devicelint.registry import REGISTRY

    return set(REGISTRY)


def _end_of(text: str) -> tuple[int, int]:
    """The (1-based line, 0-based column) just past the last character."""
    offsets = line_offsets(text)
    return len(offsets), len(text) - offsets[-1]


def _after(point: CodePosition, text: str, end: tuple[int, int], newline: str) -> tuple[int, int, str]:
    """Where text inserted after a line break goes; a file's last line may have none (LibCST
    counts one anyway), and then the text needs one first."""
    if (point.line, point.column) >= end:
        return end[0], end[1], newline + text if end[1] else text
    return point.line, point.column, text


def _to_findings(
    ctx: FileContext, violations: list[Violation], first_lines: list[int] | None = None
) -> tuple[list[Finding], set[tuple[int, str]]]:
    """The findings that no `# noqa` silences, and (line, code) of every violation before that."""
    path, text, module = ctx.path, ctx.source, ctx.module
    positioned = [v.node for v in violations]
    positioned += [old for v in violations if v.fix for old, _ in v.fix.replacements]
    positioned += [anchor for v in violations if v.fix for anchor, _, _ in v.fix.insertions]
    positions = node_ranges(module, positioned, ctx.index, text, first_lines)
    suppressions = Suppressions.parse(text)
    source_end = _end_of(text)
    findings: dict[tuple[str, int, int, str], Finding] = {}
    fired: set[tuple[int, str]] = set()
    for violation in violations:
        rule = violation.rule
        where = positions[violation.node]
        line, column = where.start.line, where.start.column + 1
        fired.add((line, rule.code))
        if suppressions.silences(rule.code, line):
            continue
        fix = None
        if violation.fix is not None:
            edits = []
            for old, new in violation.fix.replacements:
                span = positions[old]
                content = new if isinstance(new, str) else code_in_place(ctx, new, old)
                edits.append(Edit(span.start.line, span.start.column + 1, span.end.line, span.end.column + 1, content))
            for anchor, side, inserted in violation.fix.insertions:
                if side == "before":
                    at_line, at_column = positions[anchor].start.line, positions[anchor].start.column
                else:
                    at_line, at_column, inserted = _after(
                        positions[anchor].end, inserted, source_end, module.default_newline
                    )
                edits.append(Edit(at_line, at_column + 1, at_line, at_column + 1, inserted))
            fix = Fix(violation.fix.description, violation.fix.safe, tuple(edits))
        finding = Finding(
            path=path,
            line=line,
            column=column,
            end_line=where.end.line,
            end_column=where.end.column + 1,
            code=rule.code,
            name=rule.name,
            message=violation.message,
            severity=rule.severity,
            fix=fix,
            url=rule.url(),
        )
        findings.setdefault((rule.code, line, column, violation.message), finding)
    return sorted(findings.values(), key=lambda f: f.sort_key), fired
