"""The rule base class, what a rule reports, and the explicit, checked table rules register into.

The bottom of the rule layer: every module of `checks/` imports it, and it imports no rule.
Looking rules up, which loads `devicelint.checks`, is `registry.py`, above the rules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

if TYPE_CHECKING:  # libcst is heavy; `devicelint --version` and `rules` should not import it
    import libcst as cst

    from devicelint.context import FileContext

# "sometimes": the rule's fixes are safe in some shapes and unsafe in others (its page says which).
FixAvailability = Literal["none", "safe", "unsafe", "sometimes"]
FIX_LABELS: dict[str, str] = {"none": "-", "safe": "safe", "unsafe": "unsafe", "sometimes": "safe/unsafe"}
Severity = Literal["error", "warning"]

DOC_SECTIONS = (
    "What it does",
    "Why it is a bug on a GPU",
    "Example",
    "Use instead",
    "Fix safety",
    "Known limits",
)
PROJECT_URL = "https://github.com/devicelint/devicelint"
RULES_URL = PROJECT_URL + "/blob/main/rules/"

_CODE = re.compile(r"^DL\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class FixProposal:
    """A fix stated on the tree: each old node is replaced by a new node or by source text, and
    text may be inserted just before or just after a node (a statement's range ends after its
    line break, so text inserted after it starts a new line)."""

    description: str
    safe: bool
    replacements: tuple[tuple[cst.CSTNode, cst.CSTNode | str], ...] = ()
    insertions: tuple[tuple[cst.CSTNode, Literal["before", "after"], str], ...] = ()


@dataclass(frozen=True)
class Violation:
    """What a rule reports; the engine turns it into a positioned `Finding`."""

    rule: type[Rule]
    node: cst.CSTNode
    message: str
    fix: FixProposal | None = None


class Rule:
    """Base class of every rule. Subclasses set the metadata and implement `check`."""

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # A `str.format` template with named placeholders, filled by `violation(**fields)`.
    message: ClassVar[str]
    severity: ClassVar[Severity] = "error"
    default_enabled: ClassVar[bool] = True
    fix_availability: ClassVar[FixAvailability] = "none"
    # PEP 440 specifier of the torch releases the rule applies to; empty means all.
    torch_versions: ClassVar[str] = ""
    # The pre-filter skips a file that contains none of these strings: the rule cannot fire there.
    tokens: ClassVar[tuple[str, ...]] = ("torch",)
    # It reports calls of functions imported from the project that convert or move what they are
    # handed (`ProjectView.helpers`), which the tokens cannot name: it runs on any file whose view
    # holds one.
    reads_helpers: ClassVar[bool] = False

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        """Yield the violations found in one file."""
        raise NotImplementedError

    @classmethod
    def violation(cls, node: cst.CSTNode, fix: FixProposal | None = None, **fields: Any) -> Violation:
        return Violation(rule=cls, node=node, message=cls.message.format(**fields), fix=fix)

    @classmethod
    def url(cls) -> str:
        return f"{RULES_URL}{cls.code}.md"

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split into its fixed sections, in order."""
        return parse_doc_sections(cls.__doc__ or "")


class ReportedElsewhere(Rule):
    """A code that no static check emits: the engine (DL000) or the runtime checker (DL6xx)
    reports it. It is registered for its page, its selector and its place in SARIF."""

    tokens: ClassVar[tuple[str, ...]] = ()

    def check(self, ctx: FileContext) -> Iterator[Violation]:
        return iter(())


def parse_doc_sections(doc: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    lines = _dedent(doc).splitlines()
    for line in lines:
        heading = line.strip().rstrip(":")
        if line.startswith("## ") and line[3:].strip() in DOC_SECTIONS:
            heading = line[3:].strip()
        if heading in DOC_SECTIONS and (line.startswith("## ") or line.rstrip().endswith(":")):
            current = sections.setdefault(heading, [])
            continue
        if current is not None:
            current.append(line)
    return {name: "\n".join(body).strip("\n") for name, body in sections.items()}


def _dedent(doc: str) -> str:
    import inspect

    return inspect.cleandoc(doc)


class RegistryError(Exception):
    pass


REGISTRY: dict[str, type[Rule]] = {}
_BY_NAME: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: add a rule to the registry, refusing anything malformed or duplicated."""
    for attr in ("code", "name", "summary", "message"):
        if not isinstance(getattr(cls, attr, None), str):
            raise RegistryError(f"{cls.__name__} lacks the class attribute {attr!r}")
    if not _CODE.match(cls.code):
        raise RegistryError(f"{cls.__name__}: code {cls.code!r} is not DL followed by 3 digits")
    if not _NAME.match(cls.name):
        raise RegistryError(f"{cls.__name__}: name {cls.name!r} is not kebab-case")
    if cls.code in REGISTRY:
        raise RegistryError(f"duplicate rule code {cls.code} ({REGISTRY[cls.code].__name__}, {cls.__name__})")
    if cls.name in _BY_NAME:
        raise RegistryError(f"duplicate rule name {cls.name} ({_BY_NAME[cls.name].__name__}, {cls.__name__})")
    missing = [s for s in DOC_SECTIONS if s not in cls.doc_sections()]
    if missing:
        raise RegistryError(f"{cls.code}: docstring lacks the sections {missing}")
    REGISTRY[cls.code] = cls
    _BY_NAME[cls.name] = cls
    return cls


def registered(code_or_name: str) -> type[Rule] | None:
    """The registered rule with this code or name, among those imported so far."""
    key = code_or_name.strip()
    return REGISTRY.get(key.upper()) or _BY_NAME.get(key.lower())


class RuleInfo(NamedTuple):
    """A rule's metadata without its class: what selection, the cache and reports need."""

    code: str
    name: str
    summary: str
    default_enabled: bool
    severity: str
    fix_availability: str
    torch_versions: str


def info_of(rule: type[Rule]) -> RuleInfo:
    return RuleInfo(
        rule.code,
        rule.name,
        rule.summary,
        rule.default_enabled,
        rule.severity,
        rule.fix_availability,
        rule.torch_versions,
    )
