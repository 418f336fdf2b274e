"""Runtime half of devicelint: the only package that imports torch."""
