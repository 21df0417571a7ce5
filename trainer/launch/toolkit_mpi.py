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

Hosts simulated on one machine (`trainer local --hosts N`, no image) cannot use the
toolkit's command: its gethostname preload reads /opt/ml, and it writes the ranks'
environment to the machine's /etc/environment. There the master runs the plan's own
mpirun command over this job's ssh (each host's files apart: trainer.launch.ssh_trust),
under the same supervision.
"""
from __future__ import annotations

import importlib.util
import logging

from sagemaker_training import environment, mpi

from trainer.contract.job import BASE_DIR_ENV
from trainer.errors import JobError, PeerLost, Stopped
from trainer.launch import ssh_trust
from trainer.plan.mpi import YIELD_WHEN_IDLE, cpu_binding, mpi_options
from trainer.plan.types import SCRIPT_RANK_COMMAND, WORKER_COMMAND
from trainer.script import stacks
from trainer.supervision import supervise

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
        workers = [h for h in self._hosts if h != self._master_hostname]
        self.ssh.wait_for_logins(workers, lambda peer, address: mpi._can_connect(peer.host, peer.port))


def rank_program(command) -> str:
    """The file the toolkit's runner starts for each rank (`python -m mpi4py <file>`): the
    module the plan's mpirun command ends with, `python -m <module>` (our worker, or the
    rank's environment set before it becomes the user's script)."""
    assert command[-3:-1] == ("python", "-m"), command
    return importlib.util.find_spec(command[-1]).origin


def run(job, plan, status, explain=None, cwd: str | None = None, watch=None) -> None:
    """`status`: this host's status port, where the job's ssh keys are published;
    `explain`: trainer.supervision.supervise.supervise_mpirun's, for ranks that write no failure file;
    `cwd`: where the ranks start (the image: the toolkit's code folder); `watch`: a script's
    stall watch, on the master (Horovod's stall check runs on rank 0, which names the
    ranks on every host)."""
    timeout = job.hyperparameters.peer_wait_sec
    files = ssh_trust.SshFiles.for_this_host(job.current_host)
    try:
        _run(job, plan, ssh_trust.JobSsh(job.current_host, plan.ssh_trust, status, timeout, files), explain, cwd, watch)
    finally:
        files.remove()


def _run(job, plan, ssh: ssh_trust.JobSsh, explain, cwd, watch) -> None:
    master, files = plan.leader, ssh.files
    ssh.publish_keys()
    if job.current_host != master:
        ssh.accept_logins()  # the master's key, from the master's address only
        if not files.sshd_config:
            mpi._write_env_vars_to_file()  # what the ranks started through the image's sshd see
        sshd = ssh.start_sshd(job.base_dir)
        try:
            # This host's ranks are the children of the orted the master's mpirun started here.
            supervise.follow_leader(job, plan, f"the MPI master on {master}",
                                    on_stop=lambda: supervise.send_signal(supervise.children_of_named("orted")))
        except (JobError, PeerLost, Stopped) as err:
            # The master failed, stalled or stopped: where this host's ranks were, before they end.
            raise stacks.failed_with_stacks(job, err, supervise.children_of_named("orted")) from err
        finally:
            supervise.end_tasks([sshd])
        return
    workers = [h for h in plan.hosts if h != master]
    if files.sshd_config:  # hosts simulated on this machine
        ssh.wait_for_logins(workers)
        supervise.supervise_mpirun(job, plan, simulated_hosts_command(job, plan, files), cwd=cwd, explain=explain,
                             watch=watch)
        return
    runner = toolkit_runner(job, plan, ssh)
    # No sshd here: nobody logs in to the master. The bounded wait for every worker's sshd.
    runner._wait_for_workers()
    supervise.supervise_mpirun(job, plan, runner._create_command(), cwd=cwd or environment.code_dir, explain=explain,
                         watch=watch)


def toolkit_runner(job, plan, ssh: ssh_trust.JobSsh) -> BoundedMasterRunner:
    """The toolkit's master for this plan: its mpirun command gets the plan's MCA settings for
    the hosts' CPUs (trainer.plan.mpi.cpu_binding; it binds nothing itself), then the SDK's
    and the hyperparameter's options."""
    options = " ".join((*cpu_binding(job, plan.processes_per_host).mca, mpi_options(job))).strip()
    return BoundedMasterRunner(
        rank_program(plan.launch.command), [], {**plan.launch.env, BASE_DIR_ENV: job.base_dir},
        plan.processes_per_host, plan.leader, list(plan.hosts), options, plan.network_interface,
        instance_type=job.instance_type, timeout_in_seconds=job.hyperparameters.peer_wait_sec, ssh=ssh)


def simulated_hosts_command(job, plan, files: ssh_trust.SshFiles) -> list[str]:
    """The plan's mpirun command (ranks not bound to cores across hosts), logging in with this
    job's key and talking over the job's interface only (each simulated host also has a
    loopback of its own). The simulated hosts share this machine's cores: a rank waiting in a
    collective yields, or it would spin on the core the rank it waits for needs."""
    command = list(plan.launch.command)
    program = len(WORKER_COMMAND)
    assert tuple(command[-program:]) in (WORKER_COMMAND, SCRIPT_RANK_COMMAND), command
    yield_when_idle = [] if " ".join(YIELD_WHEN_IDLE) in " ".join(command) else list(YIELD_WHEN_IDLE)
    options = [*yield_when_idle, "-mca", "plm_rsh_args", " ".join(files.client_options()),
               "-mca", "btl_tcp_if_include", plan.network_interface, "-mca", "oob_tcp_if_include", plan.network_interface]
    return command[:-program] + options + command[-program:]
