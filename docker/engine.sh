#!/usr/bin/env bash
# The container engine for building and running the image on this kind of machine.
#
#   docker/engine.sh setup    install podman (and buildah) where no docker daemon runs,
#                             with a configuration that works without systemd; and a
#                             registry (docker-registry) that the push test runs locally
#   docker/engine.sh name     print the engine to use (docker when a daemon answers, else podman)
#
# Idempotent: a second run changes nothing.
set -euo pipefail

engine_name() {
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    echo docker
  elif command -v podman >/dev/null 2>&1; then
    echo podman
  else
    return 1
  fi
}

setup() {
  if engine_name >/dev/null 2>&1 && [ -f /etc/containers/containers.conf.d/trainer.conf ]; then
    return 0
  fi
  if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 \
      || ! command -v docker-registry >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      podman buildah runc debootstrap uidmap fuse-overlayfs docker-registry >/dev/null
  fi
  # No systemd here: cgroupfs and file events; runc; open-file limits the kernel allows.
  mkdir -p /etc/containers/containers.conf.d
  cat > /etc/containers/containers.conf.d/trainer.conf <<'CONF'
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
}

case "${1:-name}" in
  setup) setup ;;
  name) engine_name ;;
  *) echo "usage: $0 setup|name" >&2; exit 2 ;;
esac
