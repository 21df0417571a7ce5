"""CPU thread settings, decided from the job's CPUs (settings); measured and tuned in trainer.measure."""
