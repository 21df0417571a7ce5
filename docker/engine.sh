#!/usr/bin/env bash
# The container engine for building and running the image on this kind of machine.
#
#   docker/engine.sh setup            install podman (and buildah) where no docker daemon runs,
#                                     with a configuration that works without systemd, name
#                                     resolution between containers (netavark + aardvark-dns),
#                                     and a registry (docker-registry) that the push test runs
#                                     locally; repairs a sagemaker-local network made without DNS
#   docker/engine.sh name             print the engine to use (docker when a daemon answers, else podman)
#   docker/engine.sh preflight IMAGE  say which engine answers, how it builds and what the SDK's
#                                     local mode runs with; prove that two containers on one
#                                     network find each other by name (what every multi-host job
#                                     needs), or say what is missing and how to fix it
#
# Idempotent: a second run changes nothing.
#
# Why netavark: podman 4 has two network stacks. With CNI, names resolve only through the
# dnsname plugin, a separate package that is unmaintained and that apt leaves out without
# its recommends; netavark is podman's own stack (the only one from podman 5 on) and its
# aardvark-dns resolves container names and network aliases on every network but the
# default one. The configuration names it, so a machine that used CNI before switches too.
set -euo pipefail

PACKAGES=(podman buildah runc debootstrap uidmap fuse-overlayfs docker-registry netavark aardvark-dns iptables)
CONF=/etc/containers/containers.conf.d/trainer.conf
# The SageMaker Python SDK's local mode puts every job's containers on it (tests name another).
SDK_NETWORK="${TRAINER_SDK_NETWORK:-sagemaker-local}"

log() { printf '[engine] %s\n' "$*" >&2; }

engine_name() {
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    echo docker
  elif command -v podman >/dev/null 2>&1; then
    echo podman
  else
    return 1
  fi
}

missing_packages() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || echo "$pkg"
  done
}

write_config() {
  # No systemd here: cgroupfs and file events; runc; open-file limits the kernel allows;
  # netavark, so that containers resolve each other's names.
  mkdir -p "$(dirname "$CONF")"
  local new
  new="$(mktemp "$CONF.XXXXXX")"  # its own name: two setups at once must not share one
  cat > "$new" <<'CONF'
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "netavark"
CONF
  chmod 644 "$new"
  if cmp -s "$new" "$CONF"; then rm "$new"; else mv -f "$new" "$CONF"; fi
}

# A sagemaker-local network made before (by an older setup, or under CNI without dnsname)
# has no DNS: podman-compose would reuse it and the job's hosts could not find each other.
# Removed here (with any container left on it), podman-compose makes it anew, with DNS.
repair_sdk_network() {
  podman network exists "$SDK_NETWORK" 2>/dev/null || return 0
  [ "$(podman network inspect --format '{{.DNSEnabled}}' "$SDK_NETWORK")" = true ] && return 0
  log "the $SDK_NETWORK network has no DNS: removing it (the next local-mode job makes it with DNS)"
  podman network rm -f "$SDK_NETWORK" >/dev/null
}

setup() {
  # Several builds and tests may set up at once: one at a time (apt and the configuration).
  exec 9>"${TMPDIR:-/tmp}/trainer-engine-setup.lock"
  flock 9
  if [ "$(engine_name 2>/dev/null)" = docker ]; then
    return 0  # docker's user-defined networks resolve container names themselves
  fi
  local missing
  missing="$(missing_packages)"
  if [ -n "$missing" ]; then
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    log "installing $(echo $missing)"
    $sudo apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
  write_config
  repair_sdk_network
}

# What is missing when containers cannot resolve each other, and the fix.
diagnose() {
  local eng="$1"
  if [ "$eng" = docker ]; then
    echo "docker's embedded DNS (127.0.0.11) did not answer inside the containers: check the daemon's --dns and iptables settings"
    return
  fi
  local backend
  backend="$(podman info --format '{{.Host.NetworkBackend}}' 2>/dev/null || echo unknown)"
  case "$backend" in
    cni)
      if [ ! -x /usr/lib/cni/dnsname ]; then
        echo "podman uses CNI networking without the dnsname plugin (/usr/lib/cni/dnsname is missing), so its networks have no DNS. Fix: docker/engine.sh setup (switches podman to netavark with aardvark-dns; or install golang-github-containernetworking-plugin-dnsname)"
      else
        echo "podman uses CNI networking with the dnsname plugin, but names did not resolve: check that dnsmasq runs for the network (ps aux | grep dnsmasq). Fix: docker/engine.sh setup (switches to netavark)"
      fi ;;
    netavark)
      if [ ! -x /usr/lib/podman/aardvark-dns ]; then
        echo "podman uses netavark but aardvark-dns, its DNS server, is not installed. Fix: apt-get install aardvark-dns (docker/engine.sh setup does)"
      else
        echo "podman uses netavark with aardvark-dns, but names did not resolve: is the network made with --disable-dns? (podman network inspect NAME: dns_enabled), and does aardvark-dns run (ps aux | grep aardvark)?"
      fi ;;
    *) echo "podman's network backend is '$backend': run docker/engine.sh setup" ;;
  esac
}

# Which engine answers, which builder it builds with, and what the SageMaker SDK's local mode
# runs its jobs with (it needs a compose command): one line, before the network check.
describe_engine() {
  local eng="$1" builder compose
  if [ "$eng" = podman ]; then
    echo "preflight: engine: podman $(podman version --format '{{.Client.Version}}' 2>/dev/null) (no docker daemon answers); builds with buildah (--format docker); the SageMaker SDK's local mode runs through the docker and docker-compose commands that ./build.sh sdk-setup makes (podman, podman-compose)"
    return 0
  fi
  # Docker 23+ builds with BuildKit where the buildx plugin is installed; 20.10 only when asked.
  builder="the legacy builder"
  if [ "${DOCKER_BUILDKIT:-}" = 1 ] || { [ -z "${DOCKER_BUILDKIT:-}" ] && docker buildx version >/dev/null 2>&1; }; then
    builder="BuildKit"
  fi
  if docker compose version >/dev/null 2>&1; then
    compose="docker compose ($(docker compose version --short 2>/dev/null))"
  elif command -v docker-compose >/dev/null 2>&1; then
    compose="docker-compose ($(docker-compose version --short 2>/dev/null))"
  else
    compose="none: the SageMaker SDK's local mode needs docker compose or docker-compose (apt-get install docker-compose)"
  fi
  echo "preflight: engine: Docker Engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) (its daemon answers); builds with $builder; compose for the SageMaker SDK's local mode: $compose"
}

# Two containers on a fresh network, as local mode starts a job's hosts: the second must
# resolve the first by its network alias. Seconds; every step bounded; nothing left behind.
preflight() {
  local image="${1:?image to run}" eng tag net first out errors
  eng="$(engine_name)"
  describe_engine "$eng"
  tag="trainer-preflight-$$"
  net="$tag-net"
  first="$tag-algo-1"
  # The engine's helpers (aardvark-dns) keep its stderr open and write to it later: a file,
  # not a pipe that would wait for them.
  errors="$(mktemp)"
  local now=""  # podman: remove without the 10 s wait for a SIGTERM that `sleep` as PID 1 ignores
  [ "$eng" = podman ] && now="-t 0"
  # shellcheck disable=SC2064
  trap "$eng rm -f $now $first >/dev/null 2>&1 || true; $eng network rm $net >/dev/null 2>&1 || true; rm -f $errors" EXIT
  if [ "$eng" = podman ] && podman network exists "$SDK_NETWORK" 2>/dev/null \
      && [ "$(podman network inspect --format '{{.DNSEnabled}}' "$SDK_NETWORK")" != true ]; then
    echo "preflight: the $SDK_NETWORK network has no DNS, so local-mode jobs on it cannot find their hosts. Fix: docker/engine.sh setup (removes it; the next job makes it with DNS)" >&2
    return 1
  fi
  timeout 60 "$eng" network create "$net" >/dev/null 2>>"$errors" \
    && timeout 60 "$eng" run -d --name "$first" --network "$net" --network-alias algo-1-preflight \
         --entrypoint sleep "$image" 120 >/dev/null 2>>"$errors" \
    || { echo "preflight: $eng could not start a container on a network of its own:" >&2; cat "$errors" >&2; return 1; }
  if out="$(timeout 60 "$eng" run --rm --network "$net" --entrypoint getent "$image" hosts algo-1-preflight 2>>"$errors")"; then
    echo "preflight: containers on one $eng network find each other by name (algo-1-preflight is ${out%% *})"
    return 0
  fi
  echo "preflight: a container could not resolve another one on the same $eng network by its name (getent hosts algo-1-preflight: ${out:-no answer}): multi-host jobs would wait for hosts they cannot find." >&2
  echo "preflight: $(diagnose "$eng")" >&2
  return 1
}

case "${1:-name}" in
  setup) setup ;;
  name) engine_name ;;
  preflight) shift; setup; preflight "$@" ;;
  *) echo "usage: $0 setup|name|preflight IMAGE" >&2; exit 2 ;;
esac
