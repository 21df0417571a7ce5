"""One training process of the plan: CPU settings, then TensorFlow, then the mode's runtime.

`train` runs it in-process for single-process modes; launchers start it as
`python -m trainer.worker` for every rank (mpirun). Each process reads the job and
computes the same plan (a pure function of the job), then finds itself in it.
"""
from __future__ import annotations

import logging
import os
import sys

from trainer.contract.job import base_dir_from_env, output_dir_of, read_job
from trainer.cpu import settings as cpu
from trainer.logs import EVERY_RANK_LOGGER
from trainer.plan.mpi import rank_from_launcher
from trainer.planner.planner import make_plan
from trainer.report import report_failures

log = logging.getLogger("trainer")


def run_process(job, plan, process) -> dict:
    """Train as `process` of `plan` in this Python process; returns its metrics."""
    settings = cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores, plan.processes_per_host)
    if job.hyperparameters.tune_threads:  # the planner allows it for one process per host only
        from trainer.measure import tune

        settings = tune.tuned(job, settings, job.hyperparameters.tune_seconds)
    cpu.apply_environment(settings)
    job.tf_line.use_own_keras()
    from trainer.modes import runtime_for
    from trainer.training.run import train  # imports TensorFlow: after the CPU settings

    cpu.apply_tensorflow_threads(settings)
    return train(job, plan, process, runtime_for(plan, process, job.hyperparameters), settings)


def serve_task(job, plan, role: str) -> None:
    """Run this host's parameter-server task (`ps` or `worker`), or tf.data service task
    (`dispatcher`, `data_worker`), until stopped."""
    if plan.data_service and job.current_host in plan.data_service.hosts:
        from trainer.data.service import serve_data

        return serve_data(plan.data_service, role, job.current_host)
    process = next(p for p in plan.on_host(job.current_host) if p.role == role)
    # The host's PS, worker and (on the first host) coordinator share its CPUs.
    settings = cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores, 1)
    cpu.apply_environment(settings)
    if not job.runs_script:
        job.tf_line.use_own_keras()
    from trainer.modes.parameter_server import serve_ps_task

    cpu.apply_tensorflow_threads(settings)
    if job.runs_script:
        reach_s3_as_the_script_does()
    serve_ps_task(job, process, settings)


def reach_s3_as_the_script_does() -> None:
    """A TF 1 Saver's checkpoint shards are written by the parameter-server tasks themselves,
    into the script's model_dir, which the SDK puts on S3: give this task TensorFlow's S3
    filesystem (tensorflow-io's) and the script's S3 settings."""
    from trainer.contract.s3 import s3_environment

    os.environ.update(s3_environment(os.environ))
    try:
        import tensorflow_io  # noqa: F401  (registers s3://)
    except ImportError:
        log.warning("tensorflow-io is not installed: this parameter-server task cannot write checkpoints to s3://")


def main(argv: list[str] | None = None) -> int:
    from trainer.logs import setup_logging

    argv = sys.argv[1:] if argv is None else argv
    setup_logging()
    base_dir = base_dir_from_env()
    if argv[:1] == ["--serve"]:  # a parameter-server task, started by the launcher
        role = argv[1]
        names = {"who": f"{role} task on {os.uname().nodename}"}  # until the job says the host's name

        def work():
            job = read_job(base_dir)
            names["who"] = f"{role} task on {job.current_host}"
            serve_task(job, make_plan(job), role)

        return report_failures(output_dir_of(base_dir), work, who=lambda: names["who"])

    rank = rank_from_launcher()
    if rank:  # only the chief's log carries progress lines; the others warn and fail loudly
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger(EVERY_RANK_LOGGER).setLevel(logging.INFO)
    names = {"who": f"rank {rank} on {os.uname().nodename}"}  # until the job says the host's name

    def work():
        job = read_job(base_dir)
        plan = make_plan(job)
        names["who"] = plan.process(rank).name
        run_process(job, plan, plan.process(rank))

    return report_failures(output_dir_of(base_dir), work, who=lambda: names["who"])


if __name__ == "__main__":
    sys.exit(main())
