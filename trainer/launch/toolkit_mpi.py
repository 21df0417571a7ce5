"""Horovod across hosts through the SageMaker training toolkit's MPI setup: every host runs
sshd, the first runs mpirun with the toolkit's command (its binding, container options and
gethostname preload; ours and the user's options added). For inside the image only: that
preload reads /opt/ml's resourceconfig.json.

The toolkit's runners are not run whole: their waits for sshd and for orted have no bound
(or an hour's), they sleep 30 s on each side at the end, their mpirun neither passes a
SIGTERM on to the ranks nor names the rank that died first, and a worker host cannot tell
a finished master from a lost one (it exits 0 either way). So the master uses the
toolkit's runner for sshd and the command, with its wait for the workers bounded, and runs
mpirun under the same supervision as on one host; the other hosts start sshd the toolkit's
way and follow the master's state, passing a SIGTERM on to their own ranks.
"""
from __future__ import annotations

import importlib.util
import logging

from sagemaker_training import environment, mpi

from trainer.contract.job import BASE_DIR_ENV
from trainer.launch import peers, supervise
from trainer.plan.mpi import mpi_options

log = logging.getLogger("trainer")
SSH_PORT = 22


def ssh_login(peer: peers.PeerWait, address: str) -> bool:
    """The toolkit's own check that MPI can use a host: an SSH login with the image's key."""
    return mpi._can_connect(peer.host, peer.port)


class BoundedMasterRunner(mpi.MasterRunner):
    """The toolkit's master, waiting for the workers' sshd for at most `timeout_in_seconds`
    and saying which it still waits for."""

    def _wait_for_workers(self):
        workers = [h for h in self._hosts if h != self._master_hostname]
        peers.wait_for([peers.PeerWait(h, SSH_PORT, "sshd") for h in workers], self.timeout_in_seconds,
                       answers=ssh_login)


def rank_program(command) -> str:
    """The file the toolkit's runner starts for each rank (`python -m mpi4py <file>`): the
    module the plan's mpirun command ends with, `python -m <module>` (our worker, or the
    rank's environment set before it becomes the user's script)."""
    assert command[-3:-1] == ("python", "-m"), command
    return importlib.util.find_spec(command[-1]).origin


def run(job, plan, explain=None) -> None:
    """`explain`: trainer.launch.supervise.run_mpirun's, for ranks that write no failure file."""
    timeout = job.hyperparameters.peer_wait_sec
    master = plan.leader
    if job.current_host != master:
        peers.wait_for([peers.PeerWait(master, SSH_PORT, "sshd")], timeout, answers=ssh_login)
        mpi._write_env_vars_to_file()  # what the ranks started through sshd see
        mpi._start_sshd_daemon()
        # This host's ranks are the children of the orted the master's mpirun started here.
        supervise.follow_leader(job, plan, f"the MPI master on {master}",
                                on_stop=lambda: supervise.send_signal(supervise.children_of_named("orted")))
        return
    runner = BoundedMasterRunner(
        rank_program(plan.launch.command), [],
        {**plan.launch.env, BASE_DIR_ENV: job.base_dir}, plan.processes_per_host, master,
        list(plan.hosts), mpi_options(job), job.network_interface, instance_type=job.instance_type,
        timeout_in_seconds=timeout)
    runner._setup()  # sshd here, then the bounded wait for every worker's sshd
    supervise.run_mpirun(job, plan, runner._create_command(), cwd=environment.code_dir, explain=explain)
