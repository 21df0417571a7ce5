"""mirrored: tf.distribute.MirroredStrategy over the replica devices of one process
(trainer.modes.replicas). On CPU it reduces to one device rather than all-reducing
(TensorFlow's choice), with a copy of every variable per replica.
"""
from __future__ import annotations

from trainer.modes.base import register, tf
from trainer.modes.replicas import ReplicaDevices, ReplicasInOneProcess


class MirroredRuntime(ReplicaDevices):
    def start(self) -> None:
        super().start()
        self.strategy = tf.distribute.MirroredStrategy(devices=self.devices)

    def scope(self):
        return self.strategy.scope()


@register
class Mirrored(ReplicasInOneProcess):
    name = "mirrored"
    runtime = MirroredRuntime

    speed_rank = 30  # after Horovod's process per GPU, which feeds each GPU from a process of its own
    min_devices = 2  # its replicas on one host's CPUs share one device (TensorFlow's): on CPUs only where asked for

    def describe(self, job) -> str:
        return "one process, MirroredStrategy's all-reduce over the host's GPUs (NCCL)"
