"""What the benchmark scripts share; benchmarks/README.md says which module holds what."""
