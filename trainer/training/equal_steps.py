"""Every rank runs the same number of steps, whatever its shard holds (P5).

Ranks whose shards differ in size would otherwise end an epoch at different steps, and
the ones still training wait forever in an all-reduce ("Horovod has been shut down ...
after one of the ranks finished"). Counting records up front costs a full read and is
impossible in Pipe mode, so the ranks agree at every step instead:

- each rank's epoch is its real batches (sample weight 1) followed by endless padding
  batches (sample weight 0);
- the train step all-reduces "I have a real batch" with MIN before anything else; when
  some rank has run out, every rank skips the update (the same branch everywhere, so the
  collectives inside it stay matched) and the epoch ends on all ranks at that step.

The records a rank holds beyond the common step count are not used in that epoch.

The same agreement stops the ranks together when one of them is asked to stop (SIGTERM,
trainer.training.stop): that rank offers -1, the minimum, and every rank ends the pass at
the same step, marked as interrupted.

A distribution strategy's step cannot sit in a conditional (its gradient all-reduce is
placed when the step is traced), and its workers run a step count agreed up front: there
only the stop is voted on, after each step (`install_stop_vote`), with the same outcome.
Without a vote, hosts that get SIGTERM a step apart (SageMaker signals each host on its own)
would stop at different steps and the ones still stepping would wait in the all-reduce.
"""
from __future__ import annotations

import tensorflow as tf

UNBOUNDED_STEPS = 2**31 - 1  # the epoch ends by agreement, not by a count
HAS_DATA = "all_ranks_have_data"


def pad(dataset):
    """(features, label) batches -> (features, label, weight) with endless padding after."""
    real = dataset.map(lambda features, label: (features, label, tf.ones_like(label)))

    def zeros(spec):
        shape = [1] + [d if d is not None else 1 for d in spec.shape[1:]]
        return tf.zeros(shape, spec.dtype)

    features_spec, label_spec = dataset.element_spec
    padding = (tf.nest.map_structure(zeros, features_spec), zeros(label_spec), zeros(label_spec))
    return real.concatenate(tf.data.Dataset.from_tensors(padding).repeat())


def install_agreement(model, all_reduce_min, stop_flag: tf.Variable) -> None:
    """Make `model.fit` agree across ranks before each step; `all_reduce_min(tensor)` is the
    mode's collective, `stop_flag` 1 once this rank is asked to stop. The optimizer's and
    metrics' variables must exist before the first step (they cannot be created inside a
    conditional branch)."""
    original_step = model.train_step

    def train_step(data):
        features, label, weight = tf.keras.utils.unpack_x_y_sample_weight(data)
        has_data = tf.reduce_max(tf.cast(weight, tf.float32))
        everyone = all_reduce_min(tf.where(stop_flag > 0, -1.0, has_data))
        logs = tf.cond(everyone > 0, lambda: original_step((features, label)),
                       model.get_metrics_result)
        return {**logs, HAS_DATA: everyone}

    # An instance attribute: Keras' fit calls self.train_step, so this one runs.
    model.train_step = train_step


def install_stop_vote(model, all_reduce_sum, stop_flag: tf.Variable) -> None:
    """Make each step of `model.fit` carry a vote on stopping after it; `all_reduce_sum(tensor)`
    sums over the replicas (inside the step), `stop_flag` is 1 once this rank is asked to stop.
    Reports as `install` does: -1 once any rank asked, else 1."""
    original_step = model.train_step

    def train_step(data):
        # Voted at the step's start, so the small all-reduce overlaps the step's own compute
        # instead of adding its latency after the gradients' all-reduce.
        stops = all_reduce_sum(tf.identity(stop_flag))
        logs = original_step(data)
        return {**logs, HAS_DATA: tf.where(stops > 0, -1.0, 1.0)}

    model.train_step = train_step


class StopWhenARankIsDone(tf.keras.callbacks.Callback):
    """Ends the epoch at the first step some rank had no data for (no update was made), or
    was asked to stop (then `stop_request.interrupted_pass` is set)."""

    def __init__(self, stop_request):
        super().__init__()
        self.stop_request = stop_request

    def on_train_batch_end(self, batch, logs=None):
        agreed = logs.get(HAS_DATA, 1) if logs is not None else 1
        if agreed < 1:
            self.model.stop_training = True
        if agreed < 0:
            self.stop_request.interrupted_pass = True
