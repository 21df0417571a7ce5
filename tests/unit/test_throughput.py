"""The samples/s a training process reports (trainer.training.callbacks.Throughput): the first
call of a fit left out, unless the pass ended inside it."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.training.callbacks import Throughput
from trainer.training.keras_pass import fit_one_epoch


def fit(batches: int, steps_per_call: int) -> tuple[Throughput, int]:
    """A pass of `batches` through fit as a job's runs (keras_pass), and the updates it made."""
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps_per_call)
    data = tf.data.Dataset.from_tensor_slices((np.ones((batches * 4, 3), np.float32),
                                               np.ones((batches * 4, 1), np.float32))).batch(4)
    throughput = Throughput(samples_per_step=4, log_steps=1000, prints=False)
    fit_one_epoch(model, data, 0, [throughput], None, "training")
    return throughput, int(model.optimizer.iterations.numpy())


@pytest.mark.parametrize("batches, steps_per_call, timed", [
    (3, 8, False),   # a pass shorter than one call (Keras ends it with an error): that call is all there is
    (20, 8, True),   # the first call left out; the others, the last partial one too, timed
])
def test_the_first_call_is_left_out_unless_it_is_the_whole_pass(batches, steps_per_call, timed):
    throughput, updates = fit(batches, steps_per_call)
    # Keras counts an update more than the batches where the data runs out (the optimizer's
    # iterations; the weights are those of the batches alone): counted with its call.
    assert throughput.first_calls[0] >= min(batches, steps_per_call)
    assert throughput.first_calls[0] + throughput.timed_steps == updates  # every update counted once
    assert (throughput.timed_steps > 0) is timed
    assert throughput.samples_per_sec > 0
