"""Local SGD: one rank per host (MPI's, launched as Horovod's), each training on its own
batches, averaging their variables every `average_every_steps` steps instead of all-reducing
every step's gradients.

On CPU hosts a step's exchange adds about seven tenths of the step's compute
(docs/distribution.md, "Will more hosts pay?"): the collectives' per-call machinery on the
rank's own CPUs, and the bytes on the network. Averaging every K steps pays that once per K steps. Each rank steps
with its own batch (its optimizer's state stays its own), and the ranks agree on the
epoch's end at each average (trainer.training.equal_steps).

The ranks talk through MPI itself (mpi4py), not Horovod. Horovod suits collectives every
step; between two averages its background thread would still coordinate the ranks once a
cycle (an all-reduce of its own, on the CPU the steps need), and each average would pass the
whole model through its fusion buffer. 2 hosts of one CPU each (`bench scale`): 1.64x one
host through Horovod, 1.76x over MPI (docs/distribution.md, "Local SGD"). Without Horovod the
mode also runs on the 2.21 line.
"""
from __future__ import annotations

import logging

from trainer.errors import JobError
from trainer.modes.base import Deferred, in_claim_order, register, tf
from trainer.modes.horovod import AgreeingRanksRuntime, Horovod
from trainer.plan.scaling import local_sgd_sends_less

equal_steps = Deferred("trainer.training.equal_steps")
np = Deferred("numpy")

log = logging.getLogger(__name__)


class LocalSgdRuntime(AgreeingRanksRuntime):
    def start(self) -> None:
        from mpi4py import MPI  # initializes MPI: every rank's collectives are called from TensorFlow's threads

        self.mpi, self.comm = MPI, MPI.COMM_WORLD
        if (self.comm.Get_size(), self.comm.Get_rank()) != (self.plan.world_size, self.process.rank):
            raise JobError(f"launched as rank {self.comm.Get_rank()} of {self.comm.Get_size()}, planned as rank "
                           f"{self.process.rank} of {self.plan.world_size}: the launcher and the plan disagree")
        log.info("local SGD rank %d of %d, averaging every %d steps over MPI", self.comm.Get_rank(),
                 self.comm.Get_size(), self.hp.average_every_steps)

    def _reduced(self, array, op):
        """This rank's `array` reduced with every rank's (MPI's `op`), in a new array."""
        total = np.empty_like(array)
        self.comm.Allreduce(np.ascontiguousarray(array), total, op=op)
        return total

    def prepare(self, model, optimizer) -> None:
        size = self.comm.Get_size()

        def agreement(value):
            reduced = tf.numpy_function(lambda array: self._reduced(array, self.mpi.MIN), [value], value.dtype,
                                        name="local_sgd_agreement")
            return tf.ensure_shape(reduced, value.shape)

        def average(variables):
            values = [variable.read_value() for variable in variables]
            averaged = tf.numpy_function(lambda *arrays: [self._reduced(array, self.mpi.SUM) / size
                                                          for array in arrays],
                                         values, [value.dtype for value in values], name="local_sgd_average")
            return [tf.ensure_shape(result, value.shape) for result, value in zip(averaged, values)]

        equal_steps.install_averaging(model, self.hp.average_every_steps, agreement, average, self.stop_request.flag)

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
    precedence = 31
    # The learning rate scales with the ranks, as Horovod's: a mean of the ranks' changes moves
    # the model by one rank's step, as a mean of their gradients does (at the unscaled rate two
    # hosts ended 2 epochs 0.04 below one host's eval AUC, bench scale).
    runs_scripts = False  # the container's own training only: a script brings its own loop
    needs_horovod = False  # MPI alone (mpi4py), on either line

    def requested(self, job) -> str | None:
        return None

    def suits(self, job) -> str | None:
        sends = local_sgd_sends_less(job)
        if not sends:
            return None
        averaged, stepped = sends
        return (f"{len(job.hosts)} CPU hosts with the built-in DeepFM: local SGD, each host training on its own "
                f"batches and averaging the model every {job.hyperparameters.average_every_steps} steps "
                f"({averaged / 1e6:.2f} MB sent a step against Horovod's {stepped / 1e6:.2f} MB; the fastest "
                "multi-host mode on CPU hosts, measured in docs/distribution.md)")

    def rank_environment(self, job, per_host: int) -> dict:
        return {}  # no Horovod in its ranks: none of Horovod's knobs

    def processes_per_host(self, job) -> int:
        if job.num_gpus:
            suited = next(mode.name for mode in in_claim_order() if mode.suits(job))  # what auto would pick
            raise JobError(f"distribution local_sgd trains on CPU hosts; this job has GPUs: use {suited}")
        return super().processes_per_host(job)
