"""Several replicas in one process: `tower` (in-graph replication) and `mirrored`.

TensorFlow sees one CPU device however many cores there are, so replicas on CPU need
explicit logical CPU devices; device 0 is kept out of the replicas because the gradient
reduction runs there (P12). Both feed the global batch (per-replica batch x replicas).

- tower: one model, one set of variables; the batch is split across the replica devices,
  each computes its gradients, and their sum is applied once on device 0 (the classic
  multi-tower step).
- mirrored: tf.distribute.MirroredStrategy over the same devices; on CPU it reduces to
  one device rather than all-reducing (TensorFlow's choice), with a copy of every
  variable per replica.
"""
from __future__ import annotations

import tensorflow as tf

from trainer.modes.base import Runtime

REDUCTION_DEVICE = "/cpu:0"


class _ReplicaDevices(Runtime):
    def start(self) -> None:
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            self.devices = [f"/gpu:{i}" for i in range(self.plan.replicas_per_process)]
            return
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * (self.plan.replicas_per_process + 1))
        self.devices = [f"/cpu:{i + 1}" for i in range(self.plan.replicas_per_process)]


class TowerRuntime(_ReplicaDevices):
    def prepare(self, model, optimizer) -> None:
        devices = self.devices

        def train_step(data):
            features, label = data[0], data[1]
            batch = tf.shape(label)[0]
            replicas = len(devices)
            sizes = batch // replicas + tf.cast(tf.range(replicas) < batch % replicas, tf.int32)
            parts = [tf.split(t, sizes) for t in tf.nest.flatten(features)]
            labels = tf.split(label, sizes)
            variables = model.trainable_variables
            gradients = []
            for index, device in enumerate(devices):
                with tf.device(device), tf.GradientTape() as tape:
                    tower_features = tf.nest.pack_sequence_as(features, [p[index] for p in parts])
                    prediction = model(tower_features, training=True)
                    # compute_loss: the tower's mean loss (plus regularisation), and the loss
                    # metric updated with the tower's batch size as weight.
                    loss = model.compute_loss(tower_features, labels[index], prediction)
                    share = tf.cast(sizes[index], loss.dtype) / tf.cast(batch, loss.dtype)
                    gradients.append(tape.gradient(loss * share, variables))
            with tf.device(REDUCTION_DEVICE):
                summed = [_sum(tower_gradients) for tower_gradients in zip(*gradients)]
            optimizer.apply_gradients(zip(summed, variables))
            return model.get_metrics_result()

        model.train_step = train_step  # Keras' fit calls self.train_step


def _sum(gradients):
    """The sum of one variable's gradients over the towers (sparse ones concatenated)."""
    gradients = [g for g in gradients if g is not None]
    if isinstance(gradients[0], tf.IndexedSlices):
        return tf.IndexedSlices(tf.concat([g.values for g in gradients], 0),
                                tf.concat([g.indices for g in gradients], 0), gradients[0].dense_shape)
    return tf.add_n(gradients)


class MirroredRuntime(_ReplicaDevices):
    def start(self) -> None:
        super().start()
        self.strategy = tf.distribute.MirroredStrategy(devices=self.devices)

    def scope(self):
        return self.strategy.scope()
