"""Benchmarks and batch jobs run by ``rock bench``: each prints its figures."""
