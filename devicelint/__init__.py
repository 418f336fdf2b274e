"""devicelint: find PyTorch device bugs before they cost a GPU hour."""

__version__ = "0.1.0"
