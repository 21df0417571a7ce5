"""One process, no distribution: the whole host to one training process (its threads tuned
to the host, P10), and a training script's default, one on every host as AWS's container runs it."""
from __future__ import annotations

from trainer.modes.base import Mode, register
from trainer.plan import sdk


@register
class Single(Mode):
    name = "single"
    precedence = 40  # the SDK's PS key on one host: after every key that asks for more
    in_process = True
    multi_step_calls = True

    def requested(self, job) -> str | None:
        if sdk.enabled(job, sdk.PS) and len(job.hosts) == 1:
            return f"{sdk.PS} with one host: one process (AWS's container runs no PS on one host)"
        return None

    def suits(self, job) -> str | None:
        hosts, gpus = len(job.hosts), job.num_gpus
        if job.runs_script:
            return ("a training script with no distribution: one process" +
                    (" on every host, each on its own, as in AWS's container" if hosts > 1 else ""))
        if hosts == 1 and gpus <= 1:
            return (f"1 host with {gpus} GPU(s) and {job.num_cpus} vCPUs: one process with the "
                    "threads tuned to the host (see P10 in docs/pitfalls.md)")
        return None
