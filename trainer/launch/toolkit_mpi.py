"""Horovod across hosts through the SageMaker training toolkit's MPI setup: the first host
runs mpirun with the toolkit's command (its binding, container options and gethostname
preload; ours and the user's options added), the others run sshd for it, trusting this
job's key only (trainer.launch.ssh_trust). For inside the image only: that preload reads
/opt/ml's resourceconfig.json.

The toolkit's runners are not run whole: their waits for sshd and for orted have no bound
(or an hour's), they sleep 30 s on each side at the end, their mpirun neither passes a
SIGTERM on to the ranks nor names the rank that died first, a worker host cannot tell a
finished master from a lost one (it exits 0 either way), and they rely on one key pair in
every container. So the master uses the toolkit's runner for the command and its check
that a worker's sshd lets it in, with the wait bounded, and runs mpirun under the same
supervision as on one host; the other hosts start sshd for this job's key and follow the
master's state, passing a SIGTERM on to their own ranks.
"""
from __future__ import annotations

import importlib.util
import logging

from sagemaker_training import environment, mpi

from trainer.contract.job import BASE_DIR_ENV
from trainer.launch import peers, ssh_trust, supervise
from trainer.plan.mpi import mpi_options

log = logging.getLogger("trainer")


class BoundedMasterRunner(mpi.MasterRunner):
    """The toolkit's master, waiting for the workers' sshd for at most `timeout_in_seconds`
    and saying which it still waits for. A worker answers once its host key is known (read
    from its status port) and the toolkit's own check, an SSH login with this job's key,
    passes."""

    def __init__(self, *args, ssh: ssh_trust.JobSsh, **kwargs):
        super().__init__(*args, **kwargs)
        self.ssh = ssh

    def _wait_for_workers(self):
        def login(peer: peers.PeerWait, address: str) -> bool:
            return self.ssh.knows(peer.host, address) and mpi._can_connect(peer.host, peer.port)

        workers = [h for h in self._hosts if h != self._master_hostname]
        peers.wait_for([peers.PeerWait(h, ssh_trust.SSH_PORT, "sshd") for h in workers], self.timeout_in_seconds,
                       answers=login)


def rank_program(command) -> str:
    """The file the toolkit's runner starts for each rank (`python -m mpi4py <file>`): the
    module the plan's mpirun command ends with, `python -m <module>` (our worker, or the
    rank's environment set before it becomes the user's script)."""
    assert command[-3:-1] == ("python", "-m"), command
    return importlib.util.find_spec(command[-1]).origin


def run(job, plan, status, explain=None) -> None:
    """`status`: this host's status port, where the job's ssh keys are published;
    `explain`: trainer.launch.supervise.run_mpirun's, for ranks that write no failure file."""
    timeout = job.hyperparameters.peer_wait_sec
    master = plan.leader
    ssh = ssh_trust.JobSsh(job.current_host, plan.ssh_trust, status, timeout)
    ssh.publish_keys()
    if job.current_host != master:
        ssh.accept_logins()  # the master's key, from the master's address only
        mpi._write_env_vars_to_file()  # what the ranks started through sshd see
        ssh.start_sshd()
        # This host's ranks are the children of the orted the master's mpirun started here.
        supervise.follow_leader(job, plan, f"the MPI master on {master}",
                                on_stop=lambda: supervise.send_signal(supervise.children_of_named("orted")))
        return
    runner = BoundedMasterRunner(
        rank_program(plan.launch.command), [],
        {**plan.launch.env, BASE_DIR_ENV: job.base_dir}, plan.processes_per_host, master,
        list(plan.hosts), mpi_options(job), job.network_interface, instance_type=job.instance_type,
        timeout_in_seconds=timeout, ssh=ssh)
    # No sshd here: nobody logs in to the master. The bounded wait for every worker's sshd.
    runner._wait_for_workers()
    supervise.run_mpirun(job, plan, runner._create_command(), cwd=environment.code_dir, explain=explain)
