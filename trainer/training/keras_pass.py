"""One epoch's pass through Keras' fit: the way every runtime but the parameter-server
coordinator's trains (trainer.modes.base.Runtime.train_pass)."""
from __future__ import annotations

import logging

from trainer.errors import EmptyInput, JobError
from trainer.training import equal_steps


class _EndOfPassIsExpected(logging.Filter):
    """Keras warns "Your input ran out of data" when a pass ends before steps_per_epoch; a
    one-pass epoch ends exactly so."""

    def filter(self, record) -> bool:
        return not record.getMessage().startswith("Your input ran out of data")


END_OF_PASS_FILTER = _EndOfPassIsExpected()


def fit_one_epoch(model, dataset, epoch: int, callbacks: list, steps: int | None, channel_name: str,
                  may_be_empty: bool = False) -> float:
    """One pass of Keras fit (`steps` None: until the dataset ends); returns the epoch's mean loss
    (None if no step ran and `may_be_empty`: a resumed pass with nothing left, a stopped one)."""
    if steps == 0 and may_be_empty:  # resumed after the epoch's last step
        return None
    before = int(model.optimizer.iterations.numpy())
    if steps is None:
        # Keras needs a step count with steps_per_execution > 1, and the size of the data is
        # unknown until it is read: the end of the pass ends the epoch.
        steps = equal_steps.UNBOUNDED_STEPS
    try:
        fit = model.fit(dataset, initial_epoch=epoch, epochs=epoch + 1, steps_per_epoch=steps,
                        verbose=0, callbacks=callbacks)
        history = fit.history["loss"]
    except ValueError as err:
        if "Empty logs" not in str(err):  # Keras' words for a pass whose first call did not complete
            raise
        history = []  # a pass shorter than one call of steps_per_execution steps (or empty: below)
        for callback in callbacks:  # which fit left untold: what they time and agree on ends here too
            callback.on_train_end()
    if int(model.optimizer.iterations.numpy()) == before:
        if may_be_empty:
            return None
        if not history:
            raise EmptyInput(f"channel '{channel_name}' holds no records to train on")
        raise JobError(f"channel '{channel_name}': no training step ran in epoch {epoch + 1}: "
                       "a process's shard of the training data is empty (see P5 in docs/pitfalls.md); "
                       "give every process data, or use fewer processes")
    return float(history[-1]) if history else float(model.get_metrics_result()["loss"])
