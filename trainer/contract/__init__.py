"""SageMaker's training contract: the job folder, its config files and hyperparameters."""
