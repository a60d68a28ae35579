"""Benchmarks of futoin_anyio against the JS reference and hand-written AnyIO.

Run ``python -m benchmarks.run --help`` from the repository root; see ``README.md``.
"""
