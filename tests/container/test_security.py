"""Trying to get in (docs/security.md): the image holds no key, in any layer; its sshd takes
keys only; a container of the same image on a job's network, not one of its hosts, can
neither log in to the job's hosts over ssh nor read or change anything through their
status ports, and the job ends as if it had not been there. MPI across hosts, which is what
uses ssh, runs through `train` (below and tests/container/test_hosts.py), the SDK
(test_sdk.py, test_aws_behaviours.py), the training toolkit's own MPI runner and the SDK's
ModelTrainer MPI driver (test_model_trainer.py), all with keys made per job."""
import json
import os
import subprocess
import time

import pytest

from bounds import FINAL_STATE_WAIT_SEC, within
from conftest import IMAGE
from hosts import SCRIPTS, hosts_of  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.container]
JOB_WITHIN_SEC = 300  # a hang guard for a whole job (hosts, ranks, TensorFlow): none takes a tenth of it
KEY_FILE_NAMES = ("ssh_host_*_key", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "authorized_keys")
PRIVATE_KEY = "PRIVATE" + " KEY-----"  # split: this file must not match its own search


def in_image(engine, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([engine, "run", "--rm", "--network", "none", IMAGE, "sh", "-c", command],
                          capture_output=True, text=True, timeout=timeout)


def layer_folders(engine) -> list[str]:
    """Every layer of the image as the engine stores it (overlay: lower layers and the top)."""
    done = subprocess.run([engine, "image", "inspect", "--format", "{{json .GraphDriver.Data}}", IMAGE],
                          capture_output=True, text=True, check=True)
    data = json.loads(done.stdout)
    folders = data.get("LowerDir", "").split(":") + [data.get("UpperDir", "")]
    return [folder for folder in folders if folder and os.path.isdir(folder)]


@pytest.mark.cores(1)
def test_no_key_in_any_layer_of_the_image(image):
    folders = layer_folders(image)
    assert len(folders) > 5, folders  # the image's layers, not an empty list that finds nothing
    names = [arg for name in KEY_FILE_NAMES for arg in ("-o", "-name", name)][1:]
    found = subprocess.run(["find", *folders, "(", *names, ")", "-type", "f"], capture_output=True, text=True)
    assert found.stdout.strip() == "", found.stdout  # a key deleted in a later layer is still in its own


# Every text file of the image that names a private key's header, then each read whole: a
# PEM block (its BEGIN line and base64) is a key; code that only names the header is not.
SCAN = r"""
import runpy, subprocess, sys
from pathlib import Path
holds_a_private_key = runpy.run_path("/opt/pins/drop-private-keys.py")["holds_a_private_key"]
named = subprocess.run(["grep", "-rIl", "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev",
                        "PRIVATE KEY-----", "/"], capture_output=True, text=True).stdout.split()
print("named", len(named))
print("\n".join(path for path in named if holds_a_private_key(Path(path))))
"""


@pytest.mark.cores(0)  # mostly waits (measured: TRAINER_TEST_CPU_LOG)
def test_no_private_key_anywhere_in_the_image(image):
    """The whole filesystem as a container sees it."""
    done = in_image(image, f"python3 -c '{SCAN}'")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("named ") and int(lines[0].split()[1]) > 0, lines  # the search reads the packages
    assert lines[1:] == [], lines[1:]


@pytest.mark.cores(1)
def test_sshd_takes_keys_only(image):
    """sshd's effective settings, once a host key exists (the image has none: a job makes it)."""
    done = in_image(image, "ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key && sshd -T")
    assert done.returncode == 0, done.stderr
    settings = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert settings["passwordauthentication"] == "no"
    assert settings["kbdinteractiveauthentication"] == "no"
    assert settings["permitrootlogin"] in ("prohibit-password", "without-password")
    assert settings["pubkeyauthentication"] == "yes"
    assert settings["allowtcpforwarding"] == "no" and settings["allowagentforwarding"] == "no"


@pytest.mark.cores(1)
def test_sshd_does_not_start_without_a_job(image):
    """No host key in the image: an sshd started outside a job that made one refuses to run."""
    done = in_image(image, "/usr/sbin/sshd -D; echo exit=$?")
    assert "exit=1" in done.stdout and "no hostkeys available" in done.stderr, done.stdout + done.stderr


# What the outsider tries, from a container of the same image on the job's network: ssh to
# each host with a key of its own (and with ssh's defaults), and each host's status port,
# asking for the job's keys and posing as a host that has read how the job ended. Prints one
# JSON object of what each attempt got.
OUTSIDER = r"""
import json, socket, subprocess
subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", "/tmp/outsider"], check=True)
seen = {}
for host in ("algo-1", "algo-2"):
    done = subprocess.run(["ssh", "-i", "/tmp/outsider", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5", "root@" + host, "true"],
                          capture_output=True, text=True, timeout=60)
    seen["ssh " + host] = [done.returncode, done.stderr.strip()[-300:]]
    for line in ("algo-2 ssh-user-key", "algo-1 ssh-host-key", "algo-2", "algo-1"):
        try:
            with socket.create_connection((host, 2225), timeout=5) as connection:
                connection.settimeout(5)
                connection.sendall((line + "\n").encode())
                seen[host + " status <- " + line] = connection.makefile("rb").readline().decode()
        except OSError as err:
            seen[host + " status <- " + line] = "error: " + str(err)
print(json.dumps(seen))
"""
MPI_UNTIL_RELEASED = {"sagemaker_program": "hvd_until_released.py", "sagemaker_submit_directory": SCRIPTS,
                      "sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": 2,
                      "peer_wait_sec": 120}


def test_a_container_outside_the_job_cannot_get_in(hosts_of, record_fault):
    cluster = hosts_of(MPI_UNTIL_RELEASED)
    cluster.start()
    cluster.wait_for_log("algo-1", "4 ranks up; waiting to be released")  # ssh is in use: the ranks of algo-2 run
    done = cluster.outsider(["python3", "-c", OUTSIDER])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # algo-2 runs sshd for this job's master only; the master runs none.
    assert seen["ssh algo-2"][0] == 255 and "Permission denied" in seen["ssh algo-2"][1], seen
    assert seen["ssh algo-1"][0] == 255 and "Connection refused" in seen["ssh algo-1"][1], seen
    status_replies = {key: reply for key, reply in seen.items() if " status <- " in key}
    assert len(status_replies) == 8 and set(status_replies.values()) == {""}, seen  # closed unanswered
    with open(os.path.join(cluster.folders["algo-1"], "release"), "w"):
        pass
    released = time.monotonic()
    # The ranks end, then the hosts end together: the last to end waits at most FINAL_STATE_WAIT_SEC for the others.
    codes = {host: cluster.wait(host, timeout=within(FINAL_STATE_WAIT_SEC)) for host in ("algo-1", "algo-2")}
    seconds = time.monotonic() - released
    assert codes == {"algo-1": 0, "algo-2": 0}, (codes, cluster.logs("algo-1")[-3000:], cluster.logs("algo-2")[-3000:])
    assert "released: 4 ranks met" in cluster.logs("algo-1")
    for host in ("algo-1", "algo-2"):
        assert cluster.failure(host) is None
        assert "status port: refused" in cluster.logs(host) and "not one of the job's hosts" in cluster.logs(host)
    assert "ssh: sshd on " in cluster.logs("algo-2")
    record_fault("a container on the job's network, not of the job (Horovod across 2 hosts): ssh to each host with "
                 "its own key, the status ports asked for the job's keys and told it read the end (time: from the "
                 "ranks' release to the job's end, both hosts exit 0)", "(none: ssh refused, the status ports answer nothing; the job "
                 "succeeds)", seconds)


def test_the_training_toolkit_s_own_mpi_runner_across_hosts(hosts_of):
    """An image that names its framework module the toolkit's way gets the toolkit's `train`;
    the toolkit's MPI runner starts sshd on every host and logs in from each to the others
    with the key it finds, which this job made at its start."""
    cluster = hosts_of({"sagemaker_program": "hvd_ranks.py", "sagemaker_submit_directory": f"{SCRIPTS}/aws_style",
                        "sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": 2})
    cluster.start(env={"SAGEMAKER_TRAINING_MODULE": "toolkit_framework:main", "PYTHONPATH": SCRIPTS})
    codes = {host: cluster.wait(host, timeout=JOB_WITHIN_SEC) for host in ("algo-1", "algo-2")}
    assert codes == {"algo-1": 0, "algo-2": 0}, (codes, cluster.logs("algo-1")[-3000:], cluster.logs("algo-2")[-3000:])
    for host, ranks in (("algo-1", (0, 1)), ("algo-2", (2, 3))):
        assert "ssh: this job's hosts trust each other's keys for this job only" in cluster.logs(host)
        written = os.listdir(os.path.join(cluster.folders[host], "model"))
        assert {f"local-rank-{rank % 2}-rank-{rank}" for rank in ranks} <= set(written), (host, written)
