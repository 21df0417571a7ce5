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

import contextlib
import functools
import json
import logging
import math
import os

from trainer.errors import JobError
from trainer.contract.addresses import with_addresses
from trainer.modes.base import Mode, Runtime, register, tf
from trainer.plan import sdk
from trainer.plan.clusters import PS_PORT, PS_WORKER_PORT, aws_ps_tf_config, ps_cluster
from trainer.plan.scaling import SERVER_READS
from trainer.plan.types import WORKER_COMMAND, Launch, LaunchKind, PeerWait, Process

log = logging.getLogger(__name__)
MIN_SHARD_BYTES = 256 << 10  # smaller variables stay whole on one PS
# A task's server runs each remote function the coordinator sends it on its inter-op pool,
# where the request's handler also waits for that function to end: with one thread, the
# function's own ops never get one. TensorFlow gives the pool a thread per CPU the task
# sees, and a worker on a host of one CPU deadlocked before its first step.
SERVER_MIN_INTER_OP_THREADS = 2


class ParameterServerRuntime(Runtime):
    """The coordinator's side: it builds the model on the PS tasks and runs every worker's
    own pass of its own data each epoch (trainer.training.coordinated)."""

    steps_in_lockstep = False  # a step is one worker's batch, applied by itself
    io_device = "/job:chief/replica:0/task:0/device:CPU:0"  # all checkpoint files on the coordinator's disk
    worker_input = None  # EpochInput: what every worker reads, run on each worker as its own

    def start(self) -> None:
        os.environ["TF_CONFIG"] = json.dumps(with_addresses(self.process.tf_config))
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        num_ps = len(self.process.tf_config["cluster"]["ps"])
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=MIN_SHARD_BYTES, max_shards=num_ps)
        self.strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
        self.workers = len(self.process.tf_config["cluster"]["worker"])
        self.position = [0] * self.workers

    @contextlib.contextmanager
    def scope(self):
        with self.strategy.scope(), tf.variable_creator_scope(whole_variable_fans):
            yield

    def prepare(self, model, optimizer) -> None:
        from trainer.training.coordinated import CoordinatedEpochs

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
        self.worker_input = self.input_for(next(p for p in self.plan.processes if p.role == "worker"))
        self.epochs = CoordinatedEpochs(self.strategy, model, self.workers, self.plan.steps_per_execution)

    def train_pass(self, model, train, epoch: int, pass_index: int, skip: int, callbacks: list,
                   channel_name: str, may_be_empty: bool) -> float | None:
        from trainer.data import ps_worker_input

        skips = self._worker_skips(skip)
        worker_input = self.worker_input

        def dataset_fn():  # traced here, run on every worker as its own
            own_skip = tf.gather(tf.constant(skips, tf.int64), ps_worker_input.worker_index()) if any(skips) else 0
            return worker_input.dataset(pass_index, epoch, own_skip)

        callback_list = tf.keras.callbacks.CallbackList(callbacks, model=model)
        model.stop_training = False
        model.reset_metrics()
        callback_list.on_train_begin()
        callback_list.on_epoch_begin(epoch)
        steps = self.epochs.train_pass(dataset_fn, callback_list)
        self.position = [done + skipped for done, skipped in zip(steps, skips)]
        if not any(steps):
            if may_be_empty:
                return None
            raise JobError(f"channel '{channel_name}': no worker trained a step in epoch {epoch + 1}: "
                           "the training channel holds no records")
        for host, worker_steps, skipped in zip(self.plan.hosts, steps, skips):
            if not worker_steps and not skipped:
                log.warning("epoch=%d the worker on %s had no training data (an empty shard): the others "
                            "trained without it", epoch + 1, host)
        logs = {"loss": self.epochs.mean_loss()}
        callback_list.on_epoch_end(epoch, logs)
        callback_list.on_train_end(logs)
        return logs["loss"]

    def training_input(self, own):
        return self.worker_input  # the coordinator reads no training data

    def _worker_skips(self, skip: int) -> list[int]:
        """Each worker's batches to skip in a resumed epoch: as many as it had trained."""
        if not skip:
            return [0] * self.workers
        if len(self.resume_position) == self.workers:
            log.info("each worker skips the batches of this epoch it trained before the stop: %s",
                     ", ".join(f"{host} {steps}" for host, steps in zip(self.plan.hosts, self.resume_position)))
            return list(self.resume_position)
        log.warning("the checkpoint does not say how far each of %d workers got in the epoch it stopped in "
                    "(it was saved with %d): the epoch starts again from its beginning",
                    self.workers, len(self.resume_position))
        return [0] * self.workers

    def pass_position(self) -> list[int]:
        return self.position

    @property
    def batch_size(self) -> int:
        return self.plan.batch_size


def whole_variable_fans(next_creator, **kwargs):
    """A variable creator (under the strategy's own): Keras' variance-scaling initializers
    (Glorot, He, LeCun) take their scale from the shape they are asked for, and a
    partitioner asks for each shard's, so a kernel split in k started with up to k times the
    variance it has whole (measured: 1.38x for the DeepFM's first MLP kernel in 2). Each
    shard gets the whole variable's scale instead."""
    value = kwargs.get("initial_value")
    if (isinstance(value, functools.partial) and value.args
            and isinstance(value.func, tf.keras.initializers.VarianceScaling)):
        kwargs["initial_value"] = functools.partial(_shard_with_whole_fans, value.func, *value.args, **value.keywords)
    return next_creator(**kwargs)


def _shard_with_whole_fans(initializer, shape, dtype=None, partition_shape=None, partition_offset=None, **kwargs):
    if partition_shape is None:
        return initializer(shape, dtype=dtype, **kwargs)
    scale = initializer.scale * _fans(initializer.mode, partition_shape) / _fans(initializer.mode, shape)
    shard = tf.keras.initializers.VarianceScaling(scale, initializer.mode, initializer.distribution, initializer.seed)
    return shard(shape, dtype=dtype, partition_shape=partition_shape, partition_offset=partition_offset, **kwargs)


def _fans(mode: str, shape) -> float:
    """The divisor of a variance-scaling initializer's scale, as Keras computes it."""
    shape = tuple(shape)
    receptive_field = math.prod(shape[:-2]) if len(shape) > 2 else 1
    fan_in = shape[-2] * receptive_field if len(shape) > 1 else (shape[0] if shape else 1)
    fan_out = shape[-1] * receptive_field if shape else 1
    return max(1.0, {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[mode])


def server_threads(settings, num_cpus: int) -> tuple[int, int]:
    """(inter-op, intra-op) threads of a task's server: TensorFlow's own sizing (a thread per
    CPU), which the PS tasks' throughput was measured with, or the job's hyperparameters
    where it set them (a server reads only its ConfigProto, not tf.config.threading); never
    fewer inter-op threads than SERVER_MIN_INTER_OP_THREADS."""
    def chosen(name: str, default: int) -> int:
        return getattr(settings, name) if settings.sources.get(name) == "hyperparameter" else default

    return max(chosen("inter_op_threads", num_cpus), SERVER_MIN_INTER_OP_THREADS), chosen("intra_op_threads", num_cpus)


def serve_ps_task(job, process, settings) -> None:
    """Run one PS or worker task of the cluster until the launcher stops it, with its
    server's threads (server_threads). A worker first provides the functions through which
    it reads its own data (trainer.data.ps_worker_input)."""
    cluster = tf.train.ClusterSpec(with_addresses(process.tf_config)["cluster"])
    task = process.tf_config["task"]
    if task["type"] == "worker":
        from trainer.data import ps_worker_input

        ps_worker_input.provide(job, task["index"])
    inter_op, intra_op = server_threads(settings, job.num_cpus)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op, inter_op_parallelism_threads=inter_op)
    log.info("serving %s task %d of the parameter-server cluster (its server's threads: %d inter-op, %d intra-op)",
             task["type"], task["index"], config.inter_op_parallelism_threads, config.intra_op_parallelism_threads)
    server = tf.distribute.Server(cluster, job_name=task["type"], task_index=task["index"],
                                  protocol="grpc", config=config, start=True)
    server.join()


@register
class ParameterServer(Mode):
    name = "parameter_server"
    runtime = ParameterServerRuntime
    sdk_key = sdk.PS
    min_hosts = 2  # a PS task, a worker and the coordinator on one host's CPUs only add remote calls (check)
    exchange = SERVER_READS
    reads_from_a_data_group = False  # each worker reads its input on its own host (trainer.data.ps_worker_input)
    synchronous = False  # each worker's step updates the variables on its own
    compiles_with_xla = False  # a step's remote reads of the PS tasks have no XLA kernels
    keras_3_trains = False  # Keras 3 has no parameter-server training: a tf.keras script needs tf-keras
    multi_step_calls = True  # a call's steps end where its worker's pass ends (trainer.training.coordinated)
    has_leader = True  # the coordinator's host

    def check(self, job, channels) -> None:
        super().check(job, channels)
        if len(job.hosts) == 1:
            raise JobError("distribution parameter_server needs several hosts (a PS task, a worker and the "
                           "coordinator sharing one host's CPUs only add remote calls to one process's work); "
                           "this job has 1: use single (the default on one CPU host)")
        if channels[0].is_pipe and job.hyperparameters.pipe_reader == "pipemodedataset":
            raise JobError("hyperparameter 'pipe_reader': with parameter servers each worker reads its host's "
                           "FIFOs through the worker task itself (the project's reader); PipeModeDataset "
                           "runs only where the dataset is built: leave pipe_reader at auto")

    def describe(self, job) -> str:
        return "one parameter server and one worker per host"

    def processes(self, layout) -> list[Process]:
        """A worker and a PS task on every host; for the container's own training, first the
        coordinator (the chief), which reads no training data (each worker reads its own, on
        its host) and evaluates alone (P28). A script's processes are AWS's layout: the
        script on the first host is the master (rank 0)."""
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
            eval_shard = layout.eval_shard(0, 0, sharded=False)
            processes.insert(0, Process(host=hosts[0], role="chief", rank=None, local_rank=0,
                                        channels=tuple(c.name for c in layout.channels), shard=(1, 0),
                                        eval_shard=eval_shard, gpu=None,
                                        tf_config={"cluster": cluster, "task": {"type": "chief", "index": 0}},
                                        reads=layout.reads((), eval_shard is not None)))
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
