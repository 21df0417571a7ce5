#!/usr/bin/env bash
# Puts what this folder holds in place in the image (both images run it once, at build).
#  - sshd for MPI between containers: host keys and a root key made in this build (sshd
#    exits silently without host keys), key-only root login, no password login.
#  - OpenMPI in containers (see P11 in docs/pitfalls.md): no cross-memory attach, no tree spawn.
#  - the environment defaults `train` starts with.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

mkdir -p /var/run/sshd /root/.ssh /etc/trainer
ssh-keygen -A
ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
cp /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys
install -m 600 "$here/ssh_config" /root/.ssh/config
chmod 700 /root/.ssh
chmod 600 /root/.ssh/authorized_keys
install -m 644 "$here/sshd_config.d/trainer.conf" /etc/ssh/sshd_config.d/trainer.conf
grep -q '^Include /etc/ssh/sshd_config.d/\*.conf' /etc/ssh/sshd_config  # the drop-in is read

cat "$here/openmpi-mca-params.conf" >> /etc/openmpi/openmpi-mca-params.conf
install -m 644 "$here/environment" /etc/trainer/environment
