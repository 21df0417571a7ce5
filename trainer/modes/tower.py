"""tower: several replicas in one process by in-graph replication (trainer.modes.replicas
says how the replicas get their devices). One model, one set of variables; the batch is
split across the replica devices, each computes its gradients, and their sum is applied
once on device 0 (the classic multi-tower step).
"""
from __future__ import annotations

from trainer.modes.base import register, tf
from trainer.modes.replicas import REDUCTION_DEVICE, ReplicaDevices, ReplicasInOneProcess


class TowerRuntime(ReplicaDevices):
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


@register
class Tower(ReplicasInOneProcess):
    name = "tower"
    runtime = TowerRuntime
