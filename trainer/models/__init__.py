"""Models and optimizers."""
