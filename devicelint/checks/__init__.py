"""Every rule module, imported explicitly so that registration is visible and checked.

Each import registers one rule class (see `devicelint.registry.register`). Keep one module
per rule, named after the rule.
"""

# DL0xx: engine
from devicelint.checks import syntax_error  # noqa: F401

# DL1xx: tensors and modules off-device (placement issue)
# -- begin DL1xx --
# -- end DL1xx --

# DL2xx: data and model parallelism
# -- begin DL2xx --
# -- end DL2xx --

# DL3xx: mixed precision; DL4xx: host syncs and transfers
# -- begin DL3xx-DL4xx --
# -- end DL3xx-DL4xx --

# DL5xx: checkpoints and device identity
from devicelint.checks import torch_load_without_map_location  # noqa: F401
from devicelint.checks import device_compared_to_string_or_bare_type  # noqa: F401

# DL6xx: runtime-only codes (documented here, reported by devicelint.runtime)
# -- begin DL6xx --
# -- end DL6xx --
