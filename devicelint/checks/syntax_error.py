from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class SyntaxErrorRule(ReportedElsewhere):
    """
    ## What it does
    Reports a file that cannot be linted: it does not parse, cannot be decoded, contains a
    NUL byte, or is nested more deeply than Python itself accepts.

    ## Why it is a bug on a GPU
    A file devicelint cannot read is a file none of its rules checked. It is reported as a
    finding, with the line and column of the problem, so a broken file never passes silently.

    ## Example
    ```python
    def forward(self, x)
        return x
    ```

    ## Use instead
    ```python
    def forward(self, x):
        return x
    ```

    ## Fix safety
    No fix.

    ## Known limits
    Files that no selected rule could apply to (they never mention `torch` or another token a
    rule declares) are checked with Python's own parser only, with LibCST confirming a failure;
    syntax newer than the running Python that LibCST also rejects is reported as an error.
    """

    code = "DL000"
    name = "syntax-error"
    summary = "The file could not be parsed or decoded, so it was not linted."
    message = "{detail}"
