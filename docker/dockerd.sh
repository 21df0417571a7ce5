#!/usr/bin/env bash
# Docker Engine for the tests (the gate, ./build.sh test, and the Docker part of
# ./build.sh test-all), on a machine without systemd.
#
#   docker/dockerd.sh start   install Debian's docker.io and docker-compose if missing, start
#                             dockerd (unless one answers) and wait until it does
#   docker/dockerd.sh stop    stop the dockerd that `start` started (the packages stay)
#
# With a daemon answering, docker/engine.sh names docker, so ./build.sh and the container
# tests build, run and push with Docker Engine instead of podman.
# The daemon's settings: overlay2 storage, cgroupfs (no systemd here), and the open-file
# limit that podman's configuration gives containers too (MPI and TensorFlow open many).
set -euo pipefail

# docker-registry: the push test's registry; debootstrap: the base images where no registry
# answers (docker/base.sh), installed here before the two images' builds run side by side.
PACKAGES=(docker.io docker-compose docker-registry debootstrap)
STATE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sagemaker-tf-trainer"  # build.sh's CACHE_DIR
PID_FILE="$STATE_DIR/dockerd.pid"
LOG_FILE="$STATE_DIR/dockerd.log"
START_WAIT_SEC=60

log() { printf '[dockerd] %s\n' "$*" >&2; }

answers() { docker info >/dev/null 2>&1; }

install() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start() {
  install
  if answers; then
    log "a docker daemon already answers"
    return 0
  fi
  mkdir -p "$STATE_DIR"
  # Its own session: the daemon outlives this script and is stopped by `stop`.
  setsid dockerd --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
    --default-ulimit nofile=16384:16384 >"$LOG_FILE" 2>&1 < /dev/null &
  echo $! > "$PID_FILE"
  local waited=0
  until answers; do
    if ! kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
      log "dockerd ended at start; its log ($LOG_FILE) ends:"; tail -20 "$LOG_FILE" >&2; return 1
    fi
    if [ "$waited" -ge "$START_WAIT_SEC" ]; then
      log "dockerd did not answer within $START_WAIT_SEC s; its log: $LOG_FILE"; return 1
    fi
    sleep 1; waited=$((waited + 1))
  done
  log "Docker Engine $(docker version --format '{{.Server.Version}}') answers (log: $LOG_FILE)"
}

stop() {
  [ -f "$PID_FILE" ] || return 0
  local pid waited=0
  pid="$(cat "$PID_FILE")"
  if kill "$pid" 2>/dev/null; then
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 30 ]; do sleep 1; waited=$((waited + 1)); done
    kill -9 "$pid" 2>/dev/null || true
    log "dockerd stopped"
  fi
  rm -f "$PID_FILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
