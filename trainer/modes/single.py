"""One process, no distribution: the whole host to one training process (its threads tuned
to the host, P10), and a training script's default, one on every host as AWS's container runs it."""
from __future__ import annotations

from trainer.modes.base import Mode, register


@register
class Single(Mode):
    name = "single"
    speed_rank = 50  # where nothing runs in parallel
    script_default = True
    max_devices = 1
    in_process = True
    multi_step_calls = True

    def describe(self, job) -> str:
        return (f"one process with its threads tuned to the host's {job.num_cpus} vCPUs "
                "(see P10 in docs/pitfalls.md)")
