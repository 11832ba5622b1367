"""loghandler's benchmark suite: ``python -m benchmarks`` (``--help`` for the options)."""
