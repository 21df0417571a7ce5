"""Parameter servers (TF 2 ParameterServerStrategy) in SageMaker's layout (P13).

Every host runs a PS task and a worker task (plain tf.distribute.Servers, started by the
launcher); the first host also runs the coordinator (the chief), which creates the
variables on the PS tasks, dispatches training steps to the workers asynchronously,
evaluates alone (P28) and writes checkpoints and the model (P26). Large variables (the
embedding table) are partitioned over all PS tasks so no single one carries the load.
TensorFlow's coordinator sets the device filters that let each worker see only the PS
tasks and the coordinator (P14), which is what lets every task end cleanly.
"""
from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

from trainer.modes.base import Runtime

log = logging.getLogger(__name__)
MIN_SHARD_BYTES = 256 << 10  # smaller variables stay whole on one PS


class ParameterServerRuntime(Runtime):
    _steps = None
    batch_callbacks = False  # Keras refuses them with this strategy

    def stop_callbacks(self) -> list:
        return []  # batch-level: refused here; a SIGTERM stops at the epoch's end (or its grace time)
    io_device = "/job:chief/replica:0/task:0/device:CPU:0"  # all checkpoint files on the coordinator's disk

    def start(self) -> None:
        os.environ["TF_CONFIG"] = json.dumps(self.process.tf_config)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        num_ps = len(self.process.tf_config["cluster"]["ps"])
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=MIN_SHARD_BYTES, max_shards=num_ps)
        self.strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)

    def scope(self):
        return self.strategy.scope()

    def prepare(self, model, optimizer) -> None:
        # P13: say where the parts of each partitioned variable live.
        parts: dict[str, list] = {}
        for variable in model.variables:
            name, _, part = variable.name.rpartition("/part_")
            if part and name:
                parts.setdefault(name, []).append(variable)
        for name, shards in parts.items():
            log.info("%s partitioned over %d parameter servers: %s", name, len(shards),
                     ", ".join(f"{s.shape[0]} rows on {s.device.split('/')[1]}/{s.device.split('/')[3]}"
                               for s in shards))

    def steps_per_epoch(self, dataset, skipped: int = 0) -> int:
        """An epoch is one pass over the whole training set, in batches spread over the
        workers; the coordinator counts its batches once."""
        if self._steps is None:
            self._steps = max(1, skipped + sum(1 for _ in dataset))
        return self._steps

    def training_dataset(self, dataset):
        workers = {p.rank: p for p in self.plan.processes if p.role == "worker"}

        def worker_dataset(context: tf.distribute.InputContext):
            process = workers[context.input_pipeline_id]
            return self.input_for(process).dataset(0).repeat()

        return tf.keras.utils.experimental.DatasetCreator(worker_dataset)

    @property
    def batch_size(self) -> int:
        return self.plan.batch_size


def serve(process) -> None:
    """Run one PS or worker task of the cluster until the launcher stops it."""
    cluster = tf.train.ClusterSpec(process.tf_config["cluster"])
    task = process.tf_config["task"]
    server = tf.distribute.Server(cluster, job_name=task["type"], task_index=task["index"],
                                  protocol="grpc", start=True)
    server.join()
