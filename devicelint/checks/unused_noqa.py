from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class UnusedNoqa(ReportedElsewhere):
    """
    ## What it does
    Reports a `# noqa` directive that no longer does anything for devicelint: a code whose rule
    ran on the file and found nothing on that line (`# noqa: DL501` after the bug was fixed), a
    `DL` code that is no rule (`# noqa: DL999`), and a malformed directive (`# noqa: any text`),
    which silences nothing. Codes of other tools (`E501`, `F401`) and blanket `# noqa` comments
    are left alone: devicelint cannot know what they are for.

    ## Why it is a bug on a GPU
    A stale suppression hides the next real device bug on that line: the code changes, the bug
    comes back, and the old `# noqa: DL501` keeps it quiet. Keeping every suppression alive and
    exact keeps them honest.

    ## Example
    ```python
    state = torch.load(path, map_location="cpu")  # noqa: DL501
    ```

    ## Use instead
    ```python
    state = torch.load(path, map_location="cpu")
    ```

    ## Fix safety
    The fix removes the dead codes from the directive, or the whole directive when none is
    left; it is safe. A malformed directive gets no fix: what it meant to silence is unknown.

    ## Known limits
    Only codes of rules that ran are judged: with `--select DL1`, a `# noqa: DL501` is not
    reported. Suppressions in notebooks are not checked. Ruff's own RUF100 does not know
    devicelint's codes; declare them to Ruff with `lint.external = ["DL"]` so that `ruff --fix`
    keeps them.
    """

    code = "DL001"
    name = "unused-noqa"
    summary = "A `# noqa` that silences nothing: a code whose rule ran and found nothing there, an unknown code, or a malformed directive."
    message = "{detail}"
    fix_availability = "safe"
    tokens = ("noqa",)
