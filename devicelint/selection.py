"""Turn rule selectors (codes, prefixes, names, ALL) into the set of enabled rules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from devicelint.registry import RuleInfo, rule_infos


class SelectorError(ValueError):
    """An unknown rule code, prefix or name."""


def resolve_selector(selector: str) -> set[str]:
    """Codes matched by one selector: `ALL`, `DL101`, a prefix such as `DL1`, or a rule name."""
    rules = rule_infos()
    text = selector.strip()
    if text.upper() == "ALL":
        return {r.code for r in rules}
    upper = text.upper()
    by_code = {r.code for r in rules if r.code.startswith(upper)} if upper.startswith("DL") else set()
    if by_code:
        return by_code
    by_name = {r.code for r in rules if r.name == text.lower()}
    if by_name:
        return by_name
    raise SelectorError(
        f"unknown rule selector {selector!r} (use a code such as DL101, a prefix such as DL1, a rule name, or ALL)"
    )


def resolve_all(selectors: Iterable[str]) -> set[str]:
    codes: set[str] = set()
    for selector in selectors:
        codes |= resolve_selector(selector)
    return codes


@dataclass(frozen=True)
class Selection:
    """The rule selectors from config and command line, in the order they apply."""

    select: Sequence[str] | None = None
    extend_select: Sequence[str] = ()
    ignore: Sequence[str] = ()

    def codes(self) -> set[str]:
        if self.select is None:
            enabled = {r.code for r in rule_infos() if r.default_enabled}
        else:
            enabled = resolve_all(self.select)
        enabled |= resolve_all(self.extend_select)
        enabled -= resolve_all(self.ignore)
        return enabled


def applies_to_torch(rule: RuleInfo, torch_version: str | None) -> bool:
    """Whether a rule's declared torch versions include the project's torch version."""
    if not rule.torch_versions or not torch_version:
        return True
    return Version(torch_version) in SpecifierSet(rule.torch_versions)


def validate_torch_version(text: str) -> str:
    try:
        Version(text)
    except InvalidVersion as err:
        raise SelectorError(f'torch-version {text!r} is not a version such as "2.4"') from err
    return text


def validate_specifier(text: str) -> None:
    try:
        SpecifierSet(text)
    except InvalidSpecifier as err:  # pragma: no cover - a rule author's mistake
        raise SelectorError(f"bad torch_versions specifier {text!r}") from err
