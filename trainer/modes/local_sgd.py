"""Local SGD: one rank per host (MPI's, launched as Horovod's), each training on its own
batches, averaging their variables every `average_every_steps` steps instead of all-reducing
every step's gradients.

On CPU hosts a step's exchange adds about seven tenths of the step's compute
(docs/modes-measured.md, "Will more hosts pay?"): the collectives' per-call machinery on the
rank's own CPUs, and the bytes on the network. Averaging every K steps pays that once per K
steps, and each average is sent while the next K steps train. Each rank steps with its own
batch (its optimizer's state stays its own), to the end of its own data; the averages end
the pass on every rank at the same exchange (trainer.training.averaging).

The ranks talk through MPI itself (mpi4py), not Horovod. Horovod suits collectives every
step; between two averages its background thread would still coordinate the ranks once a
cycle (an all-reduce of its own, on the CPU the steps need), and each average would pass the
whole model through its fusion buffer.
"""
from __future__ import annotations

import logging

from trainer.errors import JobError
from trainer.modes.base import REGISTERED, Deferred, Runtime, register
from trainer.modes.horovod import Horovod
from trainer.plan.auto import auto, averaged_and_stepped_bytes
from trainer.plan.scaling import MODEL_AVERAGES

averaging = Deferred("trainer.training.averaging")
np = Deferred("numpy")

log = logging.getLogger(__name__)


class LocalSgdRuntime(Runtime):
    """Each rank trains on its own batches, to the end of its own data; the averages
    (trainer.training.averaging) end the pass on every rank at the same exchange."""

    def start(self) -> None:
        from mpi4py import MPI  # initializes MPI: the averages run on a thread of their own

        self.mpi, self.comm = MPI, MPI.COMM_WORLD
        if (self.comm.Get_size(), self.comm.Get_rank()) != (self.plan.world_size, self.process.rank):
            raise JobError(f"launched as rank {self.comm.Get_rank()} of {self.comm.Get_size()}, planned as rank "
                           f"{self.process.rank} of {self.plan.world_size}: the launcher and the plan disagree")
        log.info("local SGD rank %d of %d, averaging every %d steps over MPI, each average sent while the next "
                 "steps train", self.comm.Get_rank(), self.comm.Get_size(), self.hp.average_every_steps)

    def _reduced(self, array, op):
        """This rank's `array` reduced with every rank's (MPI's `op`), in a new array."""
        total = np.empty_like(array)
        self.comm.Allreduce(np.ascontiguousarray(array), total, op=op)
        return total

    def prepare(self, model, optimizer) -> None:
        self.averages = averaging.ModelAverages(self.comm, model.trainable_variables,
                                                as_tensor=averaging.zero_copy_tensor)
        self.sync_points = averaging.sync_callback(self.averages, self.hp.average_every_steps, self.stop_request)

    def callbacks(self) -> list:
        return [self.sync_points]

    def stop_callbacks(self) -> list:
        return []  # a stop is told at the next sync point (sync_callback)

    def train_pass(self, model, train, epoch: int, pass_index: int, skip: int, callbacks: list,
                   channel_name: str, may_be_empty: bool) -> float | None:
        self.averages.start_pass()
        loss = super().train_pass(model, train, epoch, pass_index, skip, callbacks, channel_name, may_be_empty)
        self.sync_points.end_of_data()  # where fit ended before its callbacks' end (a pass with no step)
        return loss

    def sync_initial_state(self, model, optimizer) -> None:
        # P8: every rank starts from rank 0's weights and optimizer state (restored or fresh).
        for variable in model.variables + optimizer.variables():
            value = np.array(variable.numpy())
            self.comm.Bcast(value, root=0)
            variable.assign(value)

    def all_reduce_sum(self, values: list) -> list:
        return [self._reduced(np.asarray(value), self.mpi.SUM) for value in values]

    def broadcast_from_chief(self, value):
        return self.comm.bcast(value, root=0)


@register
class LocalSgd(Horovod):
    name = "local_sgd"
    runtime = LocalSgdRuntime
    speed_rank = 10  # the fastest on several CPU hosts where it fits (docs/modes-measured.md, "Scaling out, per core")
    sdk_key = ""  # the SDK's MPI key asks for Horovod
    min_hosts = 2
    exchange = MODEL_AVERAGES  # auto takes it only where that sends less than every step's gradients
    compiles_with_xla = False  # not tried: its averages assign into the variables between calls
    multi_step_calls = True  # a call ends on each average (steps_per_call)
    # The learning rate scales with the ranks, as Horovod's: a mean of the ranks' changes moves
    # the model by one rank's step, as a mean of their gradients does (at the unscaled rate two
    # hosts ended 2 epochs 0.04 below one host's eval AUC, bench scale).
    runs_scripts = False  # the container's own training only: a script brings its own loop

    def trains_on_gpus(self, line) -> bool:
        return False  # its ranks step on CPU hosts; GPUs' steps are short against a whole model's average

    def describe(self, job) -> str:
        averaged, stepped = averaged_and_stepped_bytes(job)
        return (f"each host training on its own batches and averaging the model every "
                f"{job.hyperparameters.average_every_steps} steps ({averaged / 1e6:.2f} MB sent a step against "
                f"{stepped / 1e6:.2f} MB of every step's gradients)")

    def rank_environment(self, job, per_host: int) -> dict:
        return {}  # no Horovod in its ranks: none of Horovod's knobs

    def steps_per_call(self, hp, usual: int) -> int:
        """The ranks sync at the end of a call (Keras calls back once a call): a call's steps
        divide average_every_steps, the most that do up to `usual` unless asked for."""
        every = hp.average_every_steps
        if hp.steps_per_execution is not None:
            if every % hp.steps_per_execution:
                raise JobError(f"hyperparameter 'steps_per_execution': {hp.steps_per_execution} steps a call do not "
                               f"divide average_every_steps={every} (local_sgd averages at the end of a call): "
                               "set one to a divisor of the other, or leave steps_per_execution unset")
            return hp.steps_per_execution
        return max(steps for steps in range(1, min(usual, every) + 1) if every % steps == 0)

    def processes_per_host(self, job) -> int:
        if job.num_gpus:
            suited, _ = auto(job, REGISTERED.values())
            raise JobError(f"distribution local_sgd trains on CPU hosts; this job has GPUs: use {suited.name}")
        return super().processes_per_host(job)
