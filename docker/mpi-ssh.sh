#!/usr/bin/env bash
# MPI between containers, for both images: run once at build time.
#  - sshd: host keys and a root key made in this build, key-only root login, no password
#    login (sshd exits silently without host keys).
#  - OpenMPI in containers (P11): no cross-memory attach, no tree spawn.
set -euo pipefail

mkdir -p /var/run/sshd /root/.ssh
ssh-keygen -A
ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519
cp /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys
chmod 700 /root/.ssh
chmod 600 /root/.ssh/authorized_keys
printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' > /root/.ssh/config
sed -i -e 's/^#\?PasswordAuthentication .*/PasswordAuthentication no/' \
       -e 's/^#\?PermitRootLogin .*/PermitRootLogin prohibit-password/' /etc/ssh/sshd_config

printf 'btl_vader_single_copy_mechanism = none\nplm_rsh_no_tree_spawn = 1\n' \
  >> /etc/openmpi/openmpi-mca-params.conf
