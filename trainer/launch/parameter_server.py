"""The parameter-server launch: a PS and a worker task on every host (plain
tf.distribute.Servers, `python -m trainer.worker --serve`), the coordinator on the first."""
from __future__ import annotations

import logging
import os
import sys
import threading

from trainer import worker
from trainer.supervision import peers, supervise
from trainer.report import EXIT_JOB_ERROR

log = logging.getLogger("trainer")


def run(launch) -> dict | None:
    """Start this host's PS and worker tasks; on the first host also coordinate training.

    Other hosts serve until the coordinator's host says it has ended (or is lost), then
    stop their tasks, so no process outlives the job. A task that dies fails the host at once.
    """
    job, plan, status = launch.job, launch.plan, launch.status
    roles = [p.role for p in plan.on_host(job.current_host) if p.role in ("ps", "worker")]
    tasks = supervise.start_tasks(job, roles)
    names = [f"{role} task on {job.current_host}" for role in roles]
    ending = threading.Event()  # set when this host's tasks are being stopped on purpose
    try:
        if plan.chief.host == job.current_host:
            threading.Thread(target=end_if_a_task_dies, args=(job, status, tasks, names, ending),
                             daemon=True).start()
            return worker.run_process(job, plan, plan.chief)

        # The tasks serve on after a SIGTERM: the coordinator saves its checkpoint through them.
        supervise.serve_until_the_leader_ends(job, plan, tasks, names, f"the coordinator on {plan.leader}")
        return None
    finally:
        ending.set()
        supervise.end_tasks(tasks)


def end_if_a_task_dies(job, status, tasks, names, ending, poll_sec: float = 1.0) -> None:
    """On the coordinator's host: a PS or worker task that dies ends the job at once (the
    coordinator would otherwise wait for a lost worker to come back, or fail later with a
    consequence), naming the task first, also to the hosts that follow this one."""
    while not ending.wait(poll_sec):
        for task, name in zip(tasks, names):
            if task.poll() is not None and not ending.is_set():
                reason = supervise.blame_first(job.output_dir, name, supervise.how_it_ended(task.returncode))
                sys.stdout.flush()
                status.finish(peers.FAILED, reason)
                status.wait_until_read(status.other_hosts, wait_sec=5.0)
                os._exit(EXIT_JOB_ERROR)
