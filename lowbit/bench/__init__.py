"""Benchmark registry: each op's module registers a function that times it and its baselines.

See :mod:`lowbit.bench.registry` for the API and :mod:`lowbit.bench.timing` for the measuring
tools (copy bandwidth, matmul peak, ``do_bench`` with rotation / CUDA graphs).
"""
