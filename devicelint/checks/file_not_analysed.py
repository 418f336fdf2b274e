from __future__ import annotations

from devicelint.rule_base import ReportedElsewhere, register


@register
class FileNotAnalysedRule(ReportedElsewhere):
    """
    ## What it does
    Reports a valid Python file that devicelint did not analyse, and why: it is too large for
    the parser's memory budget (`max-file-tokens`), a long line chains more than 1,000 operands
    with binary operators (the parser's time grows with the cube of the chain), its analysis ran
    past the per-file time limit (`max-file-seconds`), an analysis ran out of recursion depth on
    it, or the process ran out of memory.

    ## Why it is a bug on a GPU
    A file no rule checked may hide any device bug. Saying so, under a code of its own, keeps
    the file from passing as clean, and keeps devicelint's own limits apart from the user's
    syntax errors (DL000).

    ## Example
    ```python
    # A generated one-line file of 60,000 calls (1.2 MB): LibCST would need about 1.3 GB.
    import torch
    table = [torch.zeros(0), torch.zeros(1), torch.zeros(2)]  # ... and 59,997 more
    ```

    ## Use instead
    Exclude generated files (`extend-exclude`), split the file, or raise the limit that the
    message names (`max-file-tokens = 0` or `max-file-seconds = 0` turn a limit off).

    ## Fix safety
    No fix.

    ## Known limits
    The size limit counts tokens (an opening bracket counts twice, strings and comments once):
    LibCST needs up to about 3.5 KiB of memory per such token, so the default of 270,000 keeps
    one file under 1 GiB. Operator chains are measured only on lines over 2,000 characters; a
    long chain spread over many lines is left to the time limit. The time limit depends on the machine's load: the same file can be
    analysed on an idle machine and not on a busy one.
    """

    code = "DL002"
    name = "file-not-analysed"
    summary = "A valid file was not analysed: too large, past the time limit, or too deep for an analysis."
    message = "{detail}"
