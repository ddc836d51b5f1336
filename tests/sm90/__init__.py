"""Offline sm_90 compile checks: each module compiles a family of the library's GPU kernels for
sm_90 without a GPU (``python -m tests.sm90.<module>`` from the repository root) and prints one
line a configuration; ``tests/ops/test_sm90_offline_compile.py`` runs them in CI."""
