"""Metamorphic tests: rewrite each bug case by refactorings that keep the bug, and check the rules follow.

`cases` loads the bug cases (fixtures and the shared re-created real bugs) with their expected
lines carried as tags in comments; the `op_*` modules hold the LibCST rewrites; `variants` applies
them alone and in pairs; `scoring` lints each variant; `report` prints the rates.
"""
