"""Benchmarks of a source checkout; ``forkagent bench`` and ``python -m bench`` run them."""
