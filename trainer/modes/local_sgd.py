"""Local SGD: Horovod's ranks, each training on its own batches, averaging their variables
every `average_every_steps` steps instead of all-reducing every step's gradients.

On CPU hosts a step's exchange adds about half the step's compute (docs/distribution.md,
"Will more hosts pay?"): the collectives' per-call machinery on the rank's own CPUs, and the
bytes on the network. Averaging every K steps pays that once per K steps. Each rank steps
with its own batch (its optimizer's state stays its own), and the ranks agree on the
epoch's end at each average (trainer.training.equal_steps).
"""
from __future__ import annotations

from trainer.errors import JobError
from trainer.modes.base import Deferred, register
from trainer.modes.horovod import Horovod, HorovodRuntime
from trainer.plan.mpi import AVERAGING_CYCLE_TIME_MS
from trainer.plan.scaling import local_sgd_sends_less

equal_steps = Deferred("trainer.training.equal_steps")


class LocalSgdRuntime(HorovodRuntime):
    def wrap_optimizer(self, optimizer):
        return optimizer  # no per-step gradient exchange

    def prepare(self, model, optimizer) -> None:
        ops = self.ops

        def average(variables):
            return ops.grouped_allreduce([variable.read_value() for variable in variables], op=ops.Average,
                                         name="local_sgd_average")

        equal_steps.install_averaging(
            model, self.hp.average_every_steps,
            lambda value: ops.allreduce(value, op=ops.Min, name="local_sgd_agreement"), average,
            self.stop_request.flag)


@register
class LocalSgd(Horovod):
    name = "local_sgd"
    runtime = LocalSgdRuntime
    precedence = 31
    # The learning rate scales with the ranks, as Horovod's: a mean of the ranks' changes moves
    # the model by one rank's step, as a mean of their gradients does (at the unscaled rate two
    # hosts ended 2 epochs 0.04 below one host's eval AUC, bench scale).
    runs_scripts = False  # the container's own training only: a script brings its own loop
    cpu_cycle_time_ms = AVERAGING_CYCLE_TIME_MS

    def requested(self, job) -> str | None:
        return None

    def suits(self, job) -> str | None:
        sends = job.tf_line.horovod and local_sgd_sends_less(job)
        if not sends:
            return None
        averaged, stepped = sends
        return (f"{len(job.hosts)} CPU hosts with the built-in DeepFM: local SGD, each host training on its own "
                f"batches and averaging the model every {job.hyperparameters.average_every_steps} steps "
                f"({averaged / 1e6:.2f} MB sent a step against Horovod's {stepped / 1e6:.2f} MB; the fastest "
                "multi-host mode on CPU hosts, measured in docs/distribution.md)")

    def processes_per_host(self, job) -> int:
        if job.num_gpus:
            raise JobError("distribution local_sgd trains on CPU hosts; this job has GPUs: use horovod")
        return super().processes_per_host(job)
