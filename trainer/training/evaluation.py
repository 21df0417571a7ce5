"""Evaluation: AUC and logloss over the processes' shards of the evaluation channel."""
from __future__ import annotations

import tensorflow as tf

from trainer.errors import JobError

AUC_THRESHOLDS = 1000


class Evaluator:
    """AUC and logloss over one pass of the evaluation data (Keras metrics).

    Each process evaluates its shard (or nothing); the metrics' states (confusion matrices,
    loss sums and counts) are then summed over the processes, so the result is that of the
    whole evaluation set however it was split (P6). Built once per run so its step
    function is traced once.
    """

    def __init__(self, model, all_reduce_sum, progress=lambda: None):
        self.model = model
        self.all_reduce_sum = all_reduce_sum
        self.progress = progress  # called after every batch (the watchdog's heartbeat)
        self.auc = tf.keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS)
        self.logloss = tf.keras.metrics.BinaryCrossentropy()
        self.examples = tf.keras.metrics.Sum()
        self.metrics = (self.auc, self.logloss, self.examples)
        self._update = tf.function(self._update_step, reduce_retracing=True)

    def _update_step(self, features, labels):
        predictions = self.model(features, training=False)
        self.auc.update_state(labels, predictions)
        self.logloss.update_state(labels, predictions)
        self.examples.update_state(tf.cast(tf.shape(labels)[0], tf.float32))

    def __call__(self, dataset, channel_name: str) -> dict:
        for metric in self.metrics:
            metric.reset_state()
        for features, labels in dataset if dataset is not None else ():
            self._update(features, labels)
            self.progress()
        variables = [v for metric in self.metrics for v in metric.variables]
        for variable, total in zip(variables, self.all_reduce_sum([v.numpy() for v in variables])):
            variable.assign(total)
        if not self.examples.result():
            raise JobError(f"channel '{channel_name}' holds no records to evaluate on")
        return {"auc": float(self.auc.result()), "logloss": float(self.logloss.result()),
                "examples": int(self.examples.result())}
