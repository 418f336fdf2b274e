"""pytest plugin entry point (filled in by the runtime issue); imports torch only when enabled."""
