"""Horovod: one process per rank, gradients all-reduced by a DistributedOptimizer.

`horovod_module` names the Keras API (default horovod.tensorflow.keras); its tensor-level
sibling (the same name without `.keras`) provides the collectives used outside Keras:
the per-step agreement (P5), the initial broadcast (P8) and evaluation sums (P6). A
Horovod-API-compatible runtime with the same two modules can be swapped in by name.
"""
from __future__ import annotations

import importlib
import logging

import numpy as np

from trainer.errors import JobError
from trainer.modes.base import Deferred, Mode, Runtime, register, tf
from trainer.plan import sdk
from trainer.plan.scaling import GRADIENTS
from trainer.plan.mpi import CPU_CYCLE_TIME_MS, cpu_binding, horovod_env, mpi_command
from trainer.plan.types import SCRIPT_RANK_COMMAND, WORKER_COMMAND, Launch, LaunchKind

equal_steps = Deferred("trainer.training.equal_steps")

log = logging.getLogger(__name__)


class AgreeingRanksRuntime(Runtime):
    """Ranks that pad their data and agree whether every rank still has a batch (equal_steps):
    an epoch ends where they agree it has, and a stop is voted on in the same agreement."""

    stop_by_vote = True

    def steps_per_epoch(self, dataset, skipped: int = 0) -> int:
        return equal_steps.UNBOUNDED_STEPS  # the epoch ends when the ranks agree it has

    def training_dataset(self, dataset):
        return equal_steps.pad(dataset)


class HorovodRuntime(AgreeingRanksRuntime):
    def start(self) -> None:
        name = self.hp.horovod_module
        try:
            self.hvd = importlib.import_module(name)
            self.ops = importlib.import_module(name[: -len(".keras")] if name.endswith(".keras") else name)
        except ImportError as err:
            raise JobError(f"hyperparameter 'horovod_module': cannot import {name!r}: {err}") from err
        self.hvd.init()
        if (self.hvd.size(), self.hvd.rank()) != (self.plan.world_size, self.process.rank):
            raise JobError(f"launched as rank {self.hvd.rank()} of {self.hvd.size()}, planned as rank "
                           f"{self.process.rank} of {self.plan.world_size}: the launcher and the plan disagree")
        gpus = tf.config.list_physical_devices("GPU")
        if gpus and self.process.gpu is not None:  # P9: one GPU per process, grown as needed
            tf.config.set_visible_devices(gpus[self.process.gpu], "GPU")
            tf.config.experimental.set_memory_growth(gpus[self.process.gpu], True)
        log.info("horovod rank %d of %d (local rank %d)", self.hvd.rank(), self.hvd.size(),
                 self.hvd.local_rank())

    def wrap_optimizer(self, optimizer):
        return self.hvd.DistributedOptimizer(optimizer)

    def prepare(self, model, optimizer) -> None:
        equal_steps.install_agreement(model, lambda value: self.ops.allreduce(value, op=self.ops.Min, name="equal_steps"),
                            self.stop_request.flag)

    def sync_initial_state(self, model, optimizer) -> None:
        # P8: every rank starts from rank 0's weights and optimizer state (restored or fresh).
        self.ops.broadcast_variables(model.variables + optimizer.variables(), root_rank=0)

    def all_reduce_sum(self, values: list) -> list:
        return [np.asarray(self.ops.allreduce(tf.constant(value), op=self.ops.Sum, name=f"eval_sum_{index}"))
                for index, value in enumerate(values)]

    def broadcast_from_chief(self, value):
        return self.ops.broadcast_object(value, root_rank=0)


@register
class Horovod(Mode):
    name = "horovod"
    runtime = HorovodRuntime
    speed_rank = 20  # the fastest mode that steps on every step's gradients (docs/modes-measured.md)
    sdk_key = sdk.MPI
    min_devices = 2  # one rank per GPU, or per CPU host: one alone is single's job
    exchange = GRADIENTS
    sharded_evaluation = True
    compiles_with_xla = False  # Horovod's collectives have no XLA kernels
    multi_step_calls = True  # its ranks pad their data and agree when an epoch ends (equal_steps)
    has_leader = True  # the MPI master
    mpi_ranks = True  # its processes are MPI's ranks, started by mpirun

    def trains_on_gpus(self, line) -> bool:
        return line.horovod_on_gpus  # the 2.21 line's Horovod is built without NCCL

    def describe(self, job) -> str:
        if job.runs_script:
            return "Horovod over MPI"
        ranks = "one process per GPU (see P9 in docs/pitfalls.md)" if job.num_gpus else \
            "one process per host with the host's CPUs"
        return f"{ranks}, gradients all-reduced every step over MPI"

    def processes_per_host(self, job) -> int:
        count = job.hyperparameters.processes_per_host or int(job.framework_params.get(sdk.MPI_PROCESSES, 0) or 0) \
            or max(1, job.num_gpus)
        if job.num_gpus and count > job.num_gpus:
            raise JobError(f"{count} Horovod processes per host for {job.num_gpus} GPUs: one GPU per "
                           "process (see P9 in docs/pitfalls.md); lower processes_per_host")
        return count

    def rank_environment(self, job, per_host: int) -> dict:
        """What every rank's environment gets: Horovod's knobs (its cycle on CPU ranks, trainer.plan.mpi)."""
        return horovod_env(job, per_host, CPU_CYCLE_TIME_MS)

    def launch(self, job, per_host: int) -> Launch:
        kind = LaunchKind.MPIRUN if len(job.hosts) == 1 else LaunchKind.SAGEMAKER_MPI
        process_command = SCRIPT_RANK_COMMAND if job.runs_script else WORKER_COMMAND
        env = self.rank_environment(job, per_host)
        return Launch(kind, mpi_command(job, per_host, process_command, env), env,
                      cpu_binding(job, per_host).why)
