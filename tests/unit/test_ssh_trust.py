"""ssh trust made per job (trainer.launch.ssh_trust): what another host publishes is checked
before it is trusted, and two hosts exchange their keys over their status ports, on
loopback addresses of this machine, with ssh-keygen's real keys. (sshd itself runs in the
container tests: tests/container/test_security.py.)"""
import os
import runpy
import socket
import subprocess
from pathlib import Path

import pytest

from trainer.errors import JobError
from trainer.launch import ssh_trust
from trainer.supervision import peers
from trainer.plan.sdk import driver_ssh_trust
from trainer.plan.types import SshTrust


def new_public_key(tmp_path, name="key") -> str:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "someone@somewhere", "-f", str(path)],
                   check=True)
    return (tmp_path / f"{name}.pub").read_text()


def rsa_public_key(tmp_path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "1024", "-N", "", "-f", str(tmp_path / "rsa")], check=True)
    return (tmp_path / "rsa.pub").read_text()


# What a host's status port says its key is -> whether it is taken as one (and how).
PUBLIC_KEY_CASES = {
    "an ed25519 key, its comment dropped": (lambda real: real, lambda real: " ".join(real.split()[:2])),
    "nothing published yet": (lambda real: "", None),
    "another key type": (rsa_public_key, None),
    "not base64": (lambda real: "ssh-ed25519 !!!notbase64!!!", None),
    "base64 of the wrong length": (lambda real: "ssh-ed25519 " + real.split()[1][:-8], None),
    "options smuggled in front": (lambda real: f'command="sh" {real}', None),
    "a second line smuggled in": (lambda real: real.split()[0] + " " + real.split()[1] + "\nssh-ed25519 AAAA", None),
}


@pytest.mark.parametrize("name", PUBLIC_KEY_CASES)
def test_only_a_well_formed_ed25519_key_is_taken(name, tmp_path):
    make, expected = PUBLIC_KEY_CASES[name]
    real = new_public_key(tmp_path)
    published = make(tmp_path) if make is rsa_public_key else make(real)
    taken = ssh_trust.public_key(published)
    assert taken == (expected(real) if expected else None)
    if taken:
        assert "\n" not in taken


def test_an_authorized_key_is_let_in_from_its_host_address_only():
    line = ssh_trust.authorized_line("ssh-ed25519 AAAAKEY", "10.0.0.1", "algo-1")
    assert line == 'from="10.0.0.1",restrict ssh-ed25519 AAAAKEY algo-1\n'


# Who logs in to whom: the plan's SshTrust for mpirun from a leader, and the drivers that
# are not this container's `train` (hosts, hyperparameters, command line) -> SshTrust or None.
MODEL_TRAINER = ["python3", "/opt/ml/input/data/sm_drivers/distributed_drivers/mpi_driver.py", "--foo"]
DRIVER_CASES = {
    "the toolkit's MPI on two hosts": (["algo-1", "algo-2"], {"sagemaker_mpi_enabled": "true"}, [],
                                       SshTrust(("algo-1", "algo-2"), ("algo-1", "algo-2"))),
    "the toolkit's MPI key off": (["algo-1", "algo-2"], {"sagemaker_mpi_enabled": "false"}, [], None),
    "the toolkit's MPI key unreadable": (["algo-1", "algo-2"], {"sagemaker_mpi_enabled": "maybe"}, [], None),
    "the toolkit's MPI on one host": (["algo-1"], {"sagemaker_mpi_enabled": "true"}, [], None),
    "ModelTrainer's MPI driver on two hosts": (["algo-1", "algo-2"], {}, MODEL_TRAINER,
                                               SshTrust(("algo-1", "algo-2"), ("algo-1", "algo-2"))),
    "ModelTrainer's MPI driver on one host": (["algo-1"], {}, MODEL_TRAINER, None),
    "ModelTrainer's other drivers": (["algo-1", "algo-2"], {},
                                     ["python3", "/opt/ml/input/data/sm_drivers/distributed_drivers/basic_script_driver.py"],
                                     None),
    "a user's script of the same name": (["algo-1", "algo-2"], {}, ["python3", "/opt/ml/code/mpi_driver.py"], None),
}


@pytest.mark.parametrize("name", DRIVER_CASES)
def test_which_drivers_need_ssh_between_the_hosts(name):
    hosts, hyperparameters, argv, expected = DRIVER_CASES[name]
    assert driver_ssh_trust(hosts, hyperparameters, argv) == expected


def test_mpirun_from_a_leader_logs_in_to_the_others_only():
    trust = SshTrust.from_leader("algo-1", ("algo-1", "algo-2", "algo-3"))
    assert trust == SshTrust(("algo-1",), ("algo-2", "algo-3"))


# Two hosts of a job on two loopback addresses of this machine, their status ports on the
# same port number as in a job; their host names resolve through this table.
ADDRESSES = {"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}


@pytest.fixture
def two_hosts(monkeypatch, tmp_path):
    monkeypatch.setattr(peers, "address_of", lambda host, timeout=None: ADDRESSES.get(host, host))  # an address is itself
    job = peers.JobAddresses(ADDRESSES, resolver=ADDRESSES.get)
    first = peers.StatusServer("algo-1", 0, job, bind=ADDRESSES["algo-1"])
    second = peers.StatusServer("algo-2", first.port, job, bind=ADDRESSES["algo-2"])
    trust = SshTrust.from_leader("algo-1", tuple(ADDRESSES))

    def side(me, status):
        files = ssh_trust.SshFiles(ssh_dir=str(tmp_path / me / "ssh"), host_key=str(tmp_path / me / "host_key"))
        return ssh_trust.JobSsh(me, trust, status, timeout_sec=10, files=files, port=first.port)

    yield side("algo-1", first), side("algo-2", second)
    first.close()
    second.close()


def read(path) -> str:
    return open(path).read()


def test_two_hosts_trust_each_others_keys_for_this_job(two_hosts):
    leader, worker = two_hosts
    leader.publish_keys()
    worker.publish_keys()
    assert not os.path.exists(leader.files.host_key)  # nobody logs in to the leader: no host key
    assert not os.path.exists(worker.files.user_key)  # the worker logs in nowhere: no login key

    worker.accept_logins()
    leader_key = " ".join(read(leader.files.user_key + ".pub").split()[:2])
    authorized = os.path.join(worker.files.ssh_dir, "authorized_keys")
    assert read(authorized) == f'from="127.0.0.1",restrict {leader_key} algo-1\n'
    assert oct(os.stat(authorized).st_mode & 0o777) == "0o600"

    assert leader.knows("algo-2", "127.0.0.2")
    worker_host_key = " ".join(read(worker.files.host_key + ".pub").split()[:2])
    assert read(os.path.join(leader.files.ssh_dir, "known_hosts")) == f"algo-2,127.0.0.2 {worker_host_key}\n"
    assert "PRIVATE KEY" in read(leader.files.user_key)  # made here, for this job, never published


def test_every_job_makes_new_keys(two_hosts, tmp_path):
    leader, _ = two_hosts
    leader.publish_keys()
    first = read(leader.files.user_key + ".pub")
    leader.publish_keys()
    assert read(leader.files.user_key + ".pub") != first


def test_a_key_that_is_not_one_is_never_authorized(two_hosts):
    leader, worker = two_hosts
    leader.status.publish(ssh_trust.USER_KEY_FACT, 'ssh-ed25519 AAAA command="sh"')
    worker.timeout_sec = 2
    with pytest.raises(JobError) as failed:
        worker.accept_logins()
    assert str(failed.value).startswith("algo-1's ssh login key never answered on port")
    assert not os.path.exists(os.path.join(worker.files.ssh_dir, "authorized_keys"))


def test_a_host_is_not_known_before_its_key_is_published(two_hosts):
    leader, _ = two_hosts
    assert not leader.knows("algo-2", "127.0.0.2")
    assert not os.path.exists(os.path.join(leader.files.ssh_dir, "known_hosts"))


def test_an_outsider_reads_no_key(two_hosts):
    leader, _ = two_hosts
    leader.publish_keys()
    with socket.create_connection(("127.0.0.1", leader.port), timeout=5, source_address=("127.0.0.9", 0)) as c:
        c.sendall(b"algo-2 ssh-user-key\n")
        assert c.makefile("rb").readline() == b""


def test_no_private_key_is_in_the_sources():
    """Every file git tracks, read as the image build reads its packages
    (container/drop-private-keys.py): no PEM private key block."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isdir(os.path.join(root, ".git")):
        pytest.skip("not a git work tree: the sources are what git tracks")
    holds_a_private_key = runpy.run_path(os.path.join(root, "container", "drop-private-keys.py"))["holds_a_private_key"]
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    files = [Path(root, name) for name in tracked.decode().split("\0") if name]
    assert len(files) > 100
    assert [str(path) for path in files if path.is_file() and holds_a_private_key(path)] == []


def test_the_private_key_check_finds_a_real_key_and_not_code_naming_it(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    holds_a_private_key = runpy.run_path(os.path.join(root, "container", "drop-private-keys.py"))["holds_a_private_key"]
    new_public_key(tmp_path)  # and its private half, beside it
    code = tmp_path / "code.py"
    code.write_text('HEADER = "-----BEGIN " + "RSA PRIVATE KEY-----"\nif line.startswith(HEADER):\n    pass\n')
    assert holds_a_private_key(tmp_path / "key") and not holds_a_private_key(code)


def test_a_simulated_host_keeps_its_ssh_files_apart(monkeypatch):
    """Hosts simulated on one machine share its filesystem: each gets a private folder for
    its keys and its own sshd configuration; nothing of root's ~/.ssh or /etc/ssh."""
    from trainer.contract.job import SHARED_MACHINE_ENV

    monkeypatch.delenv(SHARED_MACHINE_ENV, raising=False)
    assert ssh_trust.SshFiles.for_this_host("algo-2") == ssh_trust.SshFiles()  # the image's
    monkeypatch.setenv(SHARED_MACHINE_ENV, "1")
    files = ssh_trust.SshFiles.for_this_host("algo-2")
    try:
        assert os.path.basename(files.ssh_dir).startswith("trainer-ssh-algo-2-")
        assert oct(os.stat(files.ssh_dir).st_mode & 0o777) == "0o700"
        assert os.path.dirname(files.host_key) == files.ssh_dir and files.sshd_config.startswith(files.ssh_dir)
        options = files.client_options()
        assert options[:2] == ["-i", files.user_key] and f"UserKnownHostsFile={files.known_hosts}" in options
        assert "StrictHostKeyChecking=yes" in options
    finally:
        files.remove()
    assert not os.path.exists(files.ssh_dir)


SSHD = "/usr/sbin/sshd"


@pytest.mark.skipif(not os.path.exists(SSHD), reason="OpenSSH's server is not installed (./build.sh setup installs it)")
def test_a_simulated_host_sshd_configuration_is_valid_for_sshd(tmp_path):
    """sshd's own check (-t) of the configuration a simulated host's sshd starts with."""
    folder = tmp_path / "ssh"
    files = ssh_trust.SshFiles(ssh_dir=str(folder), host_key=str(folder / "host_key"),
                               sshd_config=str(folder / "sshd_config"))
    ssh_trust.make_key(files.host_key, "algo-2")
    text = ssh_trust.simulated_host_sshd_config(files, "/jobs/first/algo-2")
    (folder / "sshd_config").write_text(text)
    assert f"HostKey {files.host_key}\n" in text and "PidFile none\n" in text
    assert "SetEnv SAGEMAKER_BASE_DIR=/jobs/first/algo-2 TRAINER_HOSTS_SHARE_THIS_MACHINE=1\n" in text
    os.makedirs("/run/sshd", exist_ok=True)
    checked = subprocess.run([SSHD, "-t", "-f", files.sshd_config], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("sshd, message", [
    ("/nonexistent/sshd", "algo-2: cannot start sshd, which MPI across hosts needs: /nonexistent/sshd does not exist"),
    ("/bin/false", "algo-2: sshd exited at its start with code 1"),
])
def test_sshd_that_does_not_start_is_a_clear_error(two_hosts, monkeypatch, sshd, message):
    leader, worker = two_hosts
    monkeypatch.setenv(ssh_trust.SSHD_ENV, sshd)
    worker.files = ssh_trust.SshFiles(ssh_dir=worker.files.ssh_dir, host_key=worker.files.host_key)
    with pytest.raises(JobError) as failed:
        worker.start_sshd("/opt/ml")
    assert str(failed.value).startswith(message), str(failed.value)


def test_simulated_hosts_mpirun_logs_in_with_the_job_key_over_the_job_interface():
    from test_planner import MPI_2, job
    from trainer.launch.toolkit_mpi import simulated_hosts_command
    from trainer.planner.planner import make_plan

    the_job = job(hosts=2, sdk=MPI_2)
    plan = make_plan(the_job)
    files = ssh_trust.SshFiles(ssh_dir="/tmp/x", host_key="/tmp/x/k", sshd_config="/tmp/x/c")
    command = simulated_hosts_command(the_job, plan, files)
    assert command[-3:] == ["python", "-m", "trainer.worker"]  # the program stays last
    assert "--map-by" not in command and command.count("--bind-to") == 1  # as the toolkit's mpirun across hosts
    assert command[command.index("--bind-to") + 1] == "none"
    joined = " ".join(command)
    # The simulated hosts share the machine's cores: a waiting rank yields, once.
    assert joined.count("-mca mpi_yield_when_idle 1") == 1 and "-mca btl_tcp_if_include eth0" in joined
    assert f"-mca plm_rsh_args {' '.join(files.client_options())}" in joined
    assert "--host algo-1:2,algo-2:2" in joined


@pytest.mark.parametrize("gpus, yields", [(0, True), (4, False)], ids=["CPU hosts", "GPU hosts"])
def test_the_toolkits_mpirun_across_hosts_gets_the_plans_cpu_settings(gpus, yields):
    """The training toolkit's own mpirun command (it binds nothing): on CPU hosts a waiting
    rank yields its CPU; the user's options still come after the plan's."""
    from test_planner import job
    from trainer.launch.toolkit_mpi import toolkit_runner
    from trainer.planner.planner import make_plan

    the_job = job(hosts=2, gpus=gpus, cpus=32, cores=16, sdk={"sagemaker_mpi_enabled": True,
                                                              "sagemaker_mpi_num_of_processes_per_host": 4,
                                                              "sagemaker_mpi_custom_mpi_options": "--verbose"})
    joined = " ".join(toolkit_runner(the_job, make_plan(the_job), ssh=None)._create_command())
    assert "-bind-to none" in joined and "--host algo-1:4,algo-2:4 -np 8" in joined
    assert ("-mca mpi_yield_when_idle 1 --verbose" in joined) == yields and "--verbose" in joined
