#!/usr/bin/env bash
# Puts what this folder holds in place in the image (both images run it once, at build).
#  - sshd and ssh for MPI between containers: key-only root login, no password login, host
#    keys checked. No key is made here: a key in the image would open every job's hosts to
#    whoever can pull it. Each job makes its own at its start (trainer.launch.ssh_trust).
#  - OpenMPI in containers (see P11 in docs/pitfalls.md): no cross-memory attach, no tree spawn.
#  - the environment defaults `train` starts with.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

mkdir -p /var/run/sshd /root/.ssh /etc/trainer
rm -f /etc/ssh/ssh_host_* /root/.ssh/id_* /root/.ssh/authorized_keys
install -m 600 "$here/ssh_config" /root/.ssh/config
chmod 700 /root/.ssh
install -m 644 "$here/sshd_config.d/trainer.conf" /etc/ssh/sshd_config.d/trainer.conf
grep -q '^Include /etc/ssh/sshd_config.d/\*.conf' /etc/ssh/sshd_config  # the drop-in is read

cat "$here/openmpi-mca-params.conf" >> /etc/openmpi/openmpi-mca-params.conf
install -m 644 "$here/environment" /etc/trainer/environment
