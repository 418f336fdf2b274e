"""One small module per output format, each with `render(findings, context) -> str`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from devicelint.finding import Finding
from devicelint.report.base import FORMATS, ReportContext, path_uri, printable_path

__all__ = ["FORMATS", "ReportContext", "path_uri", "printable_path", "render"]


def render(fmt: str, findings: Sequence[Finding], context: ReportContext | None = None) -> str:
    """Render findings (static or runtime) in one of FORMATS."""
    from devicelint.report import github, gitlab, json_format, json_lines, junit, pylint_format, sarif, text

    renderers: dict[str, Callable[[Sequence[Finding], ReportContext], str]] = {
        "text": text.render,
        "concise": text.render_concise,
        "full": text.render,
        "json": json_format.render,
        "json-lines": json_lines.render,
        "sarif": sarif.render,
        "github": github.render,
        "gitlab": gitlab.render,
        "junit": junit.render,
        "pylint": pylint_format.render,
    }
    return renderers[fmt](sorted(findings, key=lambda f: f.sort_key), context or ReportContext())
