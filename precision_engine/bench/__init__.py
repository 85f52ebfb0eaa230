"""Benchmarks behind `precision bench`: a shared timing utility and one module per benchmark family."""
