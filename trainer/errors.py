"""The one exception type for problems the user must fix (bad input or configuration)."""


class JobError(Exception):
    """A problem with the job's data, configuration or hyperparameters.

    The message says what is wrong and where (file, line, channel, hyperparameter); it is
    written first in SageMaker's failure file, which shows the user its first 1024 chars.
    """


class EmptyInput(JobError):
    """A channel gave no record to train on: its files may hold bytes that are no whole record
    (a file cut short), which the caller looks for (trainer.training.inputs)."""


class Stopped(Exception):
    """Training stopped on request (SIGTERM) after saving what it could; the message says
    where it stopped and what was saved. `reported`: for the failure file (the chief's
    word, not every rank's)."""

    def __init__(self, message: str, reported: bool = True):
        super().__init__(message)
        self.reported = reported


class PeerLost(Exception):
    """Another process of the job is gone (a collective or RPC to it failed); the message
    names it when TensorFlow says which it was."""
