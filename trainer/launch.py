"""Carry out the plan on this host: run the training process here, or start the ranks.

No decisions here: the plan says what to start (trainer.planner).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from trainer import worker
from trainer.errors import JobError
from trainer.planner import make_plan
from trainer.report import AlreadyReported

log = logging.getLogger("trainer")


def run(job) -> dict | None:
    """Run this host's part of the job; returns the metrics when they are this process's."""
    plan = make_plan(job)
    log.info("distribution: %s (%s); %d training process(es) per host, world size %d, global batch %d, "
             "learning rate %g (x%g); %s", plan.mode, plan.reason, plan.processes_per_host, plan.world_size,
             plan.global_batch_size, plan.learning_rate, plan.learning_rate_scale, plan.sharding)
    kind = plan.launch.kind
    if kind == "in_process":
        return worker.run_process(job, plan, plan.on_host(job.current_host)[0])
    if kind == "mpirun":
        run_mpirun(job, plan)
        return read_metrics(job)
    raise JobError(f"launching {kind} ({plan.mode} on {len(plan.hosts)} hosts) is not available in this version")


def read_metrics(job) -> dict | None:
    """The metrics the chief wrote."""
    path = os.path.join(job.output_data_dir, "metrics.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def run_mpirun(job, plan) -> None:
    """mpirun on this host, without sshd: the ranks are `python -m trainer.worker`."""
    command = [sys.executable if part == "python" else part for part in plan.launch.command]
    log.info("starting %d ranks: %s", plan.world_size, " ".join(command))
    env = {**os.environ, **plan.launch.env, "SAGEMAKER_BASE_DIR": job.base_dir}
    exit_code = subprocess.call(command, env=env)
    if exit_code == 0:
        return
    if os.path.exists(os.path.join(job.output_dir, "failure")):
        raise AlreadyReported(exit_code)  # the failing rank said why
    raise JobError(f"mpirun exited with code {exit_code} and no rank reported why")
