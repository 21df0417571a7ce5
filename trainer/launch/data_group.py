"""A heterogeneous cluster's two sides at run time (trainer.planner.data_groups decided them).

A data host runs its tf.data service tasks (the dispatcher on the first, a worker on each,
`python -m trainer.worker --serve <role>`) until the first training host has ended, then
stops them: no process outlives the job. A training host watches every data host while it
trains: one that fails or is lost ends the job at once, naming it (TensorFlow's client would
wait for a lost worker to come back).
"""
from __future__ import annotations

import logging
import os
import sys
import threading

from trainer.errors import PeerLost, Stopped
from trainer.supervision import peers, supervise
from trainer.report import EXIT_JOB_ERROR, EXIT_STOPPED

log = logging.getLogger("trainer")


def run(launch) -> None:
    """A data host's part: serve until the training has ended."""
    job, plan = launch.job, launch.plan
    roles = [p.role for p in plan.on_host(job.current_host)]
    tasks = supervise.start_tasks(job, roles)
    names = [f"tf.data service {role.replace('_', ' ')} on {job.current_host}" for role in roles]
    log.info("this host feeds the training hosts (%s): %s", ", ".join(plan.hosts), plan.data_service.reading)
    try:
        supervise.serve_until_the_leader_ends(job, plan, tasks, names, f"the training on {plan.leader}")
    finally:
        supervise.end_tasks(tasks)


class DataHostsWatch:
    """On a training host: follows every data host's state until `stop()`; the first that
    fails, stops or is lost ends this host's part (and so the job), named first in the
    failure file and published to the other hosts."""

    def __init__(self, job, plan, status):
        self.job, self.status = job, status
        self._done = threading.Event()
        for host in plan.data_service.hosts:
            threading.Thread(target=self._follow, args=(host,), daemon=True, name=f"watch-{host}").start()

    def _follow(self, host: str) -> None:
        try:
            peers.follow_until(self._done, host, self.job.current_host, f"data host {host}")
        except (PeerLost, Stopped) as err:
            if self._done.is_set():
                return
            reason = supervise.blame_first(self.job.output_dir, f"data host {host}",
                                           f"ended before the training did ({err})")
            sys.stdout.flush()
            stopped = isinstance(err, Stopped)
            self.status.finish(peers.STOPPED if stopped else peers.FAILED, reason)
            self.status.wait_until_read(self.status.other_hosts, wait_sec=5.0)
            os._exit(EXIT_STOPPED if stopped else EXIT_JOB_ERROR)

    def stop(self) -> None:
        self._done.set()
