"""Every rule, looked up: all of them, by code or name, or as plain metadata.

Above `checks/`: loading the rules is importing `devicelint.checks`, whose modules import their base
class and `register` from `rule_base.py`, never from here. The base names are re-exported for
the layers above the rules (engine, runner, docs, commands)."""

from __future__ import annotations

from devicelint.rule_base import (
    DOC_SECTIONS,
    FIX_LABELS,
    PROJECT_URL,
    REGISTRY,
    RULES_URL,
    FixAvailability,
    FixProposal,
    RegistryError,
    ReportedElsewhere,
    Rule,
    RuleInfo,
    Severity,
    Violation,
    info_of,
    parse_doc_sections,
    register,
    registered,
)

__all__ = [
    "DOC_SECTIONS",
    "FIX_LABELS",
    "PROJECT_URL",
    "REGISTRY",
    "RULES_URL",
    "FixAvailability",
    "FixProposal",
    "RegistryError",
    "ReportedElsewhere",
    "Rule",
    "RuleInfo",
    "Severity",
    "Violation",
    "all_rules",
    "find_rule",
    "info_of",
    "parse_doc_sections",
    "register",
    "registered",
    "rule_info",
    "rule_infos",
]


def rule_infos() -> tuple[RuleInfo, ...]:
    """Every rule's metadata, sorted by code, read from the generated `rule_index` module so a
    fully cached run imports neither the rules nor LibCST (a test keeps it in step)."""
    from devicelint.rule_index import RULES

    return RULES


def rule_info(code: str) -> RuleInfo:
    return _INFO_BY_CODE.get(code) or _INFO_BY_CODE.setdefault(code, {r.code: r for r in rule_infos()}[code])


_INFO_BY_CODE: dict[str, RuleInfo] = {}


def all_rules() -> list[type[Rule]]:
    """Every registered rule, sorted by code."""
    import devicelint.checks  # noqa: F401  (registers the rules)

    return [REGISTRY[code] for code in sorted(REGISTRY)]


def find_rule(code_or_name: str) -> type[Rule] | None:
    all_rules()
    return registered(code_or_name)
