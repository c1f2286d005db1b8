"""Benchmarks of cortex_sessions on PostgreSQL at scale: ``python -m bench``.

Not shipped in the wheel and not part of the test suite: benchmarks print figures, they never
fail on speed. See ``docs/performance.md``.
"""
