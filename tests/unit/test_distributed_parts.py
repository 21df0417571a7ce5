"""The pieces the distributed modes share: padding for equal steps, aggregated evaluation,
the warm-up schedule."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.models.optimizers import WarmupSchedule
from trainer.training import equal_steps
from trainer.training.run import Evaluator


def batches(count, size=4):
    features = {"ids": np.arange(count * size * 3).reshape(count * size, 3), "values": np.ones((count * size, 3), np.float32)}
    labels = (np.arange(count * size) % 2).astype(np.float32).reshape(-1, 1)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(size)


def test_padding_marks_real_batches_and_never_ends():
    padded = equal_steps.pad(batches(3))
    weights = [float(tf.reduce_max(w)) for _, _, w in padded.take(6)]
    assert weights == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    features, label, weight = next(iter(padded.skip(3)))
    assert features["ids"].shape == (1, 3) and label.shape == (1, 1) and float(weight[0, 0]) == 0.0


class TwoShards:
    """The sum over two evaluating processes, the other one's states given."""

    def __init__(self):
        self.other = None

    def __call__(self, values):
        return values if self.other is None else [a + b for a, b in zip(values, self.other)]


def test_evaluation_over_shards_equals_evaluation_of_the_whole():
    inputs = tf.keras.Input((1,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(inputs))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 1)).astype(np.float32)
    y = (rng.random((400, 1)) < 1 / (1 + np.exp(-2 * x))).astype(np.float32)
    data = lambda a, b: tf.data.Dataset.from_tensor_slices((x[a:b], y[a:b])).batch(64)  # noqa: E731

    whole = Evaluator(model, lambda values: values)(data(0, 400), "evaluation")
    reduce = TwoShards()
    first = Evaluator(model, reduce)
    first(data(0, 150), "evaluation")
    reduce.other = [v.numpy() for m in first.metrics for v in m.variables]
    combined = Evaluator(model, reduce)(data(150, 400), "evaluation")
    assert combined["examples"] == 400
    assert combined["auc"] == pytest.approx(whole["auc"], abs=1e-6)
    assert combined["logloss"] == pytest.approx(whole["logloss"], abs=1e-6)
    # a process with no evaluation data of its own still takes part (with the first shard's states)
    assert Evaluator(model, reduce)(None, "evaluation")["examples"] == 150


def test_warmup_ramps_to_the_scaled_rate():
    schedule = WarmupSchedule(0.001, 0.004, 100)
    assert [round(float(schedule(step)), 6) for step in (0, 50, 100, 1000)] == [0.001, 0.0025, 0.004, 0.004]
