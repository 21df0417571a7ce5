"""ssh between a job's hosts, trusted for this job only.

mpirun across hosts starts each host's ranks over ssh as root. The image holds no key,
user or host: a key baked into an image opens every running job's hosts to whoever can
pull it. Trust is made when a job starts, from the plan's SshTrust (who logs in to whom):

- every host that logs in makes a root key pair; every host that accepts logins makes its
  sshd host key. Each publishes its public half on its status port, which answers only
  the job's hosts (trainer.supervision.peers.StatusServer);
- a host that accepts logins reads the public keys of the hosts that log in from their
  status ports, connecting to the address their job host name resolves to, and authorizes
  each with `from="<that address>"`; its sshd listens on the job's address only and lets in
  root from those addresses only;
- a host that logs in reads the host keys of the hosts it logs in to the same way and
  knows them (known_hosts, checked strictly), so it talks to the job's hosts and no other.

The SageMaker training toolkit's `_can_connect` (paramiko) and mpirun's ssh both find the
key at its usual place (~/.ssh/id_ed25519) and the host keys in ~/.ssh/known_hosts.

Hosts simulated on one machine (`trainer local --hosts N`) share its filesystem: each
keeps its keys, its authorized_keys and known_hosts, and an sshd configuration of its own
in a private folder (SshFiles.of_simulated_host), so that nothing of root's ~/.ssh or of
/etc/ssh changes and no host reads another's; its sshd gives the sessions it starts (the
ranks mpirun starts there) that host's job folder.
"""
from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from trainer.contract.job import BASE_DIR_ENV, SHARED_MACHINE_ENV
from trainer.errors import JobError
from trainer.supervision import peers
from trainer.supervision.supervise import die_with_parent
from trainer.plan.types import STATUS_PORT, SshTrust

log = logging.getLogger("trainer")

SSH_PORT = 22
USER_KEY_FACT, HOST_KEY_FACT = "ssh-user-key", "ssh-host-key"
KEY_TYPE = "ssh-ed25519"
SSHD_ENV = "TRAINER_SSHD"  # OpenSSH's server elsewhere than /usr/sbin/sshd
SSHD_START_SEC = 1.0  # sshd -D that is still running this long after its start has started


@dataclass(frozen=True)
class SshFiles:
    """Where the keys go (the image's: root's ~/.ssh and sshd's host key, read by the
    image's sshd configuration)."""

    ssh_dir: str = "/root/.ssh"
    host_key: str = "/etc/ssh/ssh_host_ed25519_key"  # the only HostKey of the image's sshd
    sshd: str = field(default_factory=lambda: os.environ.get(SSHD_ENV, "/usr/sbin/sshd"))
    sshd_config: str | None = None  # an sshd configuration of this host's own (simulated hosts)

    @staticmethod
    def of_simulated_host(host: str) -> "SshFiles":
        """A private folder for one of several hosts simulated on this machine."""
        folder = tempfile.mkdtemp(prefix=f"trainer-ssh-{host}-")
        return SshFiles(ssh_dir=folder, host_key=os.path.join(folder, "host_ed25519_key"),
                        sshd_config=os.path.join(folder, "sshd_config"))

    @staticmethod
    def for_this_host(host: str) -> "SshFiles":
        return SshFiles.of_simulated_host(host) if os.environ.get(SHARED_MACHINE_ENV) else SshFiles()

    def remove(self) -> None:
        """A simulated host's folder, at the job's end (the image's stay with the container)."""
        if self.sshd_config:
            shutil.rmtree(self.ssh_dir, ignore_errors=True)

    @property
    def user_key(self) -> str:
        return os.path.join(self.ssh_dir, "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.ssh_dir, "known_hosts")

    def client_options(self) -> list[str]:
        """ssh's options for logging in with this job's key, knowing this job's hosts only."""
        return ["-i", self.user_key, "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]


def make_key(path: str, comment: str) -> str:
    """A new ed25519 key pair at `path` (any old one replaced); its public line."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    for old in (path, path + ".pub"):
        if os.path.exists(old):
            os.remove(old)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                   check=True, capture_output=True, text=True)
    with open(path + ".pub") as f:
        return public_key(f.read())


def public_key(text: str | None) -> str | None:
    """`ssh-ed25519 <base64>` when `text` is one such public key (its comment dropped), else
    None: what another host publishes is checked before it is trusted (one line, nothing in
    front of the key's type)."""
    text = (text or "").strip()
    if "\n" in text or "\r" in text:
        return None
    words = text.split()
    if len(words) < 2 or words[0] != KEY_TYPE:
        return None
    try:
        blob = base64.b64decode(words[1], validate=True)
    except ValueError:
        return None
    # The blob names its type again, then the 32-byte key: 4+11 + 4+32 bytes.
    if len(blob) != 51 or blob[4:15] != KEY_TYPE.encode():
        return None
    return f"{words[0]} {words[1]}"


def authorized_line(key: str, address: str, host: str) -> str:
    """One key, let in from one address only, with nothing but a command (no forwarding,
    no pty)."""
    return f'from="{address}",restrict {key} {host}\n'


def known_host_line(host: str, address: str, key: str) -> str:
    return f"{host},{address} {key}\n"


class JobSsh:
    """This host's side of the plan's SshTrust."""

    def __init__(self, me: str, trust: SshTrust, status, timeout_sec: float, files: SshFiles = SshFiles(),
                 port: int = STATUS_PORT):
        self.me, self.trust, self.status, self.timeout_sec = me, trust, status, timeout_sec
        self.files, self.port = files, port
        self.login_addresses: dict[str, str] = {}  # host -> address its key is let in from

    @property
    def logs_in(self) -> bool:
        return self.me in self.trust.logs_in

    @property
    def accepts(self) -> bool:
        return self.me in self.trust.accepts

    def publish_keys(self) -> None:
        """Make this job's keys and publish their public halves on the status port."""
        if self.logs_in:
            self.status.publish(USER_KEY_FACT, make_key(self.files.user_key, f"root@{self.me} (this job)"))
        if self.accepts:
            self.status.publish(HOST_KEY_FACT, make_key(self.files.host_key, self.me))
        log.info("ssh: this job's keys made (%s)", ", ".join(
            what for what, wanted in (("a login key", self.logs_in), ("a host key", self.accepts)) if wanted))

    def accept_logins(self) -> None:
        """Authorize the public key of every host that logs in here, each from its address."""
        if not self.accepts:
            return
        keys: dict[str, str] = {}

        def read_key(peer: peers.PeerWait, address: str) -> bool:
            key = public_key(peers.read_fact(address, peer.port, self.me, USER_KEY_FACT))
            if key:
                keys[peer.host], self.login_addresses[peer.host] = key, address
            return key is not None

        peers.wait_for(self._from_others(self.trust.logs_in, "ssh login key"), self.timeout_sec, answers=read_key,
                       me=self.me, status_port=self.port)
        self._write("authorized_keys", "".join(authorized_line(keys[h], self.login_addresses[h], h) for h in keys))

    def knows(self, host: str, address: str) -> bool:
        """Whether `host`'s sshd host key is known (read from its status port now if not):
        what this host checks before logging in there."""
        key = public_key(peers.read_fact(address, self.port, self.me, HOST_KEY_FACT))
        if key is None:
            return False
        path = self.files.known_hosts
        line = known_host_line(host, address, key)
        existing = open(path).read() if os.path.exists(path) else ""
        if line not in existing:
            self._write("known_hosts", existing + line)
        return True

    def can_log_in(self, address: str) -> bool:
        """Whether this job's key logs in to `address` (its host key checked)."""
        try:
            login = subprocess.run(["ssh", *self.files.client_options(), "-o", "ConnectTimeout=5",
                                    f"root@{address}", "true"], capture_output=True, timeout=peers.CHECK_TIMEOUT_SEC)
        except subprocess.TimeoutExpired:
            return False
        return login.returncode == 0

    def wait_for_logins(self, hosts, logs_in=None) -> None:
        """Wait (bounded) until this host logs in to every one of `hosts`: each answers once its
        host key is known (read from its status port) and `logs_in(peer, address)` (default:
        ssh with this job's key) passes."""
        def login(peer: peers.PeerWait, address: str) -> bool:
            return self.knows(peer.host, address) and (logs_in or (lambda _, a: self.can_log_in(a)))(peer, address)

        peers.wait_for([peers.PeerWait(h, SSH_PORT, "sshd") for h in hosts], self.timeout_sec, answers=login,
                       me=self.me, status_port=self.port)

    def know_every_host(self) -> None:
        """Know the host key of every host this one logs in to (a driver that logs in by
        itself afterwards)."""
        if self.logs_in:
            peers.wait_for(self._from_others(self.trust.accepts, "ssh host key"), self.timeout_sec,
                           answers=lambda peer, address: self.knows(peer.host, address), me=self.me,
                           status_port=self.port)

    def start_sshd(self, base_dir: str) -> subprocess.Popen:
        """sshd on the job's address only, letting in root from the hosts that log in; a
        JobError naming what sshd said when it does not start."""
        listen = peers.own_address(self.me)
        allowed = " ".join(f"root@{address}" for address in self.login_addresses.values())
        command = [self.files.sshd, "-D", "-e", "-o", f"AllowUsers={allowed}"]
        if listen:
            command += ["-o", f"ListenAddress={listen}"]
        if self.files.sshd_config:
            self._write("sshd_config", simulated_host_sshd_config(self.files, base_dir))
            command += ["-f", self.files.sshd_config]
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation folder
        log.info("ssh: sshd on %s lets in root from %s only", listen or "every address",
                 ", ".join(self.login_addresses.values()))
        os.makedirs(self.files.ssh_dir, mode=0o700, exist_ok=True)
        output = os.path.join(self.files.ssh_dir, "sshd.log")
        with open(output, "ab") as log_file:
            try:
                sshd = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            except FileNotFoundError:
                raise JobError(f"{self.me}: cannot start sshd, which MPI across hosts needs: {self.files.sshd} "
                               f"does not exist (OpenSSH's server: the image has it; ./build.sh setup installs it "
                               f"on this machine; {SSHD_ENV} names another)") from None
        try:
            code = sshd.wait(SSHD_START_SEC)
        except subprocess.TimeoutExpired:
            return sshd
        said = " ".join(open(output, errors="replace").read().split()[-40:])
        raise JobError(f"{self.me}: sshd exited at its start with code {code}: {said or 'it said nothing'}")

    def _from_others(self, hosts, what: str) -> list[peers.PeerWait]:
        return [peers.PeerWait(h, self.port, what) for h in hosts if h != self.me]

    def _write(self, name: str, text: str) -> None:
        path = os.path.join(self.files.ssh_dir, name)
        os.makedirs(self.files.ssh_dir, mode=0o700, exist_ok=True)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(text)


def simulated_host_sshd_config(files: SshFiles, base_dir: str) -> str:
    """The image's sshd settings (container/sshd_config.d/trainer.conf), with this host's
    files; the sessions it starts get this host's job folder."""
    return "\n".join([
        f"HostKey {files.host_key}",
        f"AuthorizedKeysFile {os.path.join(files.ssh_dir, 'authorized_keys')}",
        "PidFile none",  # several hosts' sshd on one machine
        "StrictModes no",  # its folder is under /tmp, which anyone may write to
        "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", "AllowAgentForwarding no", "AllowTcpForwarding no",
        "X11Forwarding no", "PermitTunnel no",
        f"SetEnv {BASE_DIR_ENV}={base_dir} {SHARED_MACHINE_ENV}=1",
    ]) + "\n"


def trust_for_a_driver(me: str, trust: SshTrust, timeout_sec: float, files: SshFiles = SshFiles()) -> JobSsh:
    """For an MPI driver that is not this container's `train` (the training toolkit's, the
    SDK ModelTrainer's: trainer.plan.sdk.driver_ssh_trust), which starts sshd itself: this
    host's keys made, published and trusted by the others before it starts. The status port
    stays up in this process for the hosts that read it later."""
    hosts = tuple(dict.fromkeys((*trust.logs_in, *trust.accepts)))
    ssh = JobSsh(me, trust, peers.StatusServer(me, STATUS_PORT, hosts), timeout_sec, files)
    ssh.publish_keys()
    ssh.accept_logins()
    ssh.know_every_host()
    log.info("ssh: this job's hosts trust each other's keys for this job only")
    return ssh
