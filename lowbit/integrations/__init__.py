"""Engine glue. Each engine's integration imports its engine lazily (only when it is used)."""
