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

    def suits(self, job) -> str | None:
        if job.runs_script or len(job.hosts) > 1 or job.num_gpus < 2 or job.tf_line.horovod_on_gpus:
            return None
        return (f"1 host with {job.num_gpus} GPUs on the TensorFlow {job.tf_line.name} line, whose Horovod has no "
                "GPU collectives (NCCL): one process, MirroredStrategy's NCCL all-reduce over the GPUs")
