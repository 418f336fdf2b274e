"""What one linted file sees of the project's other modules: plain data, hashed into its cache key.

Names are spelled as the file spells them (`Net` after `from .models import Net`, `D.make_mask`
after `import data as D`), so a rule looks one up with the dotted text of the expression.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class ImportedClass:
    """An `nn.Module` class of another project module, as the file imports it."""

    qualified: str
    # It builds parameters, buffers or parameterised layers itself (or through project bases)
    # and never places itself: an instance is on the CPU until something moves it.
    owns_cpu_parameters: bool = False
    # The `self.<attr>` its own (or its bases') `_apply`/`to`/`cuda` override moves; None when
    # such an override reaches every attribute (`vars(self)`, `getattr`).
    moved_attributes: tuple[str, ...] | None = ()
    # It (or a project base) moves or places something itself (`.to("cuda:1")`, `device=`): where
    # its outputs live depends on its `forward`, which the file cannot follow.
    places_itself: bool = False


@dataclass(frozen=True)
class ProjectView:
    root: str = ""
    # spelled name -> the imported module class
    classes: dict[str, ImportedClass] = field(default_factory=dict)
    # spelled name -> where the imported function's result lives ("cpu-tensor", "device-tensor")
    functions: dict[str, str] = field(default_factory=dict)
    # class of this file -> attributes that another class's `_apply`/`to`/`cuda` moves on its
    # instances (`if isinstance(m, Detect): m.stride = fn(m.stride)` in the model's module)
    moved_elsewhere: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A hash of everything a rule may read: part of the file's cache key."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def __bool__(self) -> bool:
        return bool(self.classes or self.functions or self.moved_elsewhere)


EMPTY_VIEW = ProjectView()
