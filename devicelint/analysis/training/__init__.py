"""The training step: its order (autocast, backward, scaler, clip, step) and its hot loops.

- `syntax`: the small AST helpers the DL3xx/DL4xx rules share.
- `values`: assignments, and the dtypes and device strings a configuration value can take.
- `reads`: which names an expression reads, and def-use from given names.
- `step`: per function, the autocast blocks, backward calls, GradScaler calls, clips and optimizer steps.
- `helpers`: what a call of the file's own function or method does to the step (scales, backpropagates,
  unscales, clips, steps, updates), so a helper's call site counts as the place where it happens.
- `loops`: the code that runs once per training step (loops and step functions) and logging conditions.
- `hot_values`: which values read in that code are device tensors (placement first, then a fallback).
- `torch_support`: the torch versions the linted project says it supports.
"""
