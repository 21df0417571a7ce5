"""Several replicas in one process, what `tower` and `mirrored` share (not a mode itself).

TensorFlow sees one CPU device however many cores there are, so replicas on CPU need
explicit logical CPU devices; device 0 is kept out of the replicas because the gradient
reduction runs there (P12). Both feed the global batch (per-replica batch x replicas).
"""
from __future__ import annotations

from trainer.modes.base import Mode, Runtime, tf

REDUCTION_DEVICE = "/cpu:0"


class ReplicasInOneProcess(Mode):
    in_process = True
    runs_scripts = False  # they build the container's own model; a script builds its own strategy

    def replicas(self, job) -> int:
        if job.hyperparameters.replicas:
            return job.hyperparameters.replicas
        # CPU: one replica per vCPU but one, which is kept for the reduction (P12).
        return job.num_gpus if job.num_gpus else max(2, job.num_cpus - 1)


class ReplicaDevices(Runtime):
    def start(self) -> None:
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            self.devices = [f"/gpu:{i}" for i in range(self.plan.replicas_per_process)]
            return
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * (self.plan.replicas_per_process + 1))
        self.devices = [f"/cpu:{i + 1}" for i in range(self.plan.replicas_per_process)]
