"""Training: one process's epochs, evaluation, checkpoints and export."""
