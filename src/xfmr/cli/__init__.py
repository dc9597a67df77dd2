"""Entry points: thin Hydra apps and plain CLIs."""
