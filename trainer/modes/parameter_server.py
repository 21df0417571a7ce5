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

from trainer.modes.base import Mode, Runtime, register, tf
from trainer.plan import sdk
from trainer.plan.clusters import PS_PORT, PS_WORKER_PORT, aws_ps_tf_config, ps_cluster
from trainer.plan.types import WORKER_COMMAND, Launch, LaunchKind, PeerWait, Process

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


@register
class ParameterServer(Mode):
    name = "parameter_server"
    runtime = ParameterServerRuntime
    precedence = 10
    synchronous = False  # each worker's step updates the variables on its own
    compiles_with_xla = False  # a step's remote reads of the PS tasks have no XLA kernels
    has_leader = True  # the coordinator's host
    pipe_mode_refusal = ("parameter_server reads its input on the workers through tf.data ops: Pipe mode "
                         "needs PipeModeDataset (the image has it); use File mode here")

    def requested(self, job) -> str | None:
        if sdk.enabled(job, sdk.PS) and len(job.hosts) > 1:
            return f"{sdk.PS}: one parameter server and one worker per host"
        return None

    def suits(self, job) -> str | None:
        if job.runs_script or len(job.hosts) == 1 or job.num_gpus:
            return None
        return (f"{len(job.hosts)} CPU hosts: parameter servers, one per host, with the embedding partitioned "
                "over them (see P13 in docs/pitfalls.md; faster than multi-worker mirrored on CPU, P12)")

    def processes(self, layout) -> list[Process]:
        """A worker and a PS task on every host; for the container's own training, first the
        coordinator (the chief), which reads no training batches: it sees the whole training
        set (to count an epoch's steps) and evaluates alone (P28). A script's processes
        are AWS's layout: the script on the first host is the master (rank 0)."""
        script, hosts = layout.job.runs_script, layout.hosts
        cluster = ps_cluster(hosts)

        def tf_config(host_index: int, task: str) -> dict:
            if script:
                return aws_ps_tf_config(hosts, hosts[host_index], ps_task=task == "ps")
            return {"cluster": cluster, "task": {"type": task, "index": host_index}}

        processes = []
        for host_index, host in enumerate(hosts):
            role = "chief" if script and host_index == 0 else "worker"
            processes += [layout.process(host_index, 0, role, None, tf_config(host_index, "worker")),
                          Process(host=host, role="ps", rank=None, local_rank=0, channels=(), shard=(1, 0),
                                  eval_shard=None, gpu=None, tf_config=tf_config(host_index, "ps"))]
        if not script:
            processes.insert(0, Process(host=hosts[0], role="chief", rank=None, local_rank=0,
                                        channels=tuple(c.name for c in layout.channels), shard=(1, 0),
                                        eval_shard=layout.eval_shard(0, 0, sharded=False), gpu=None,
                                        tf_config={"cluster": cluster, "task": {"type": "chief", "index": 0}}))
        return processes

    def launch(self, job, per_host: int) -> Launch:
        return super().launch(job, per_host) if job.runs_script else Launch(LaunchKind.PARAMETER_SERVER, WORKER_COMMAND)

    def peer_waits(self, job) -> tuple[PeerWait, ...]:
        """The coordinator's host also waits for every other host's PS and worker task, which it
        connects to first (a script's own TensorFlow connects to its PS tasks, and retries)."""
        waits = super().peer_waits(job)
        if job.current_host != job.hosts[0] or job.runs_script:
            return waits
        return waits + tuple(PeerWait(h, port, what) for h in job.hosts[1:]
                             for port, what in ((PS_PORT, "ps task"), (PS_WORKER_PORT, "worker task")))
