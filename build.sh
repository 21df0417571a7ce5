#!/usr/bin/env bash
# The one entry point for people and CI.
#
#   ./build.sh setup          install system packages and the pinned Python environment
#   ./build.sh exec CMD...    run CMD inside that environment (in the current folder)
#   ./build.sh demo           set up, then train DeepFM on a generated dataset (trainer local)
#   ./build.sh test [ARGS]    set up, then run the gate (what CI runs): every fast test and the slow
#                             tests tests/gate.txt lists (each capability once), on the 2.14 line
#                             and, beside it, on the 2.21 line (the tests marked for it:
#                             tests/lines.py; in its environment); Docker Engine started for it (docker/dockerd.sh) builds
#                             both CPU images meanwhile for its container tests; ends with the
#                             core-seconds its tests held. With ARGS: pytest ARGS (2.14 line), the
#                             daemon answering.
#   ./build.sh test-all       set up, then run every slow test the gate leaves out, on both lines:
#                             the container tests with podman (the gate's too), the GPU images'
#                             build, then Docker Engine's own (tests/container/docker_tier.txt)
#   ./build.sh test-fast      set up, then run only the fast tier (no slow integration tests)
#   ./build.sh test-line 2.21 [ARGS]  the 2.21 line's tests alone, in its environment
#   ./build.sh bench [--line 2.21] [ARGS]  set up, then run a shipped benchmark (trainer bench ARGS)
#                             on the 2.14 line, or the 2.21 line; peer, build and scripts make
#                             their own environments from bench-envs/
#   ./build.sh base [22.04|24.04]  make that Ubuntu in the engine's store when no registry answers
#   ./build.sh image [cpu|gpu] [2.14|2.21]  build the training image of a TensorFlow line (default
#                             2.14; tags 2.14-cpu and cpu, 2.14-gpu and gpu, 2.21-cpu, 2.21-gpu)
#                             with docker, or podman where no daemon runs
#   ./build.sh image-lock [2.14|2.21]  freeze the built CPU image's Python packages into its lock file
#   ./build.sh line 2.21 CMD...  run CMD in the TensorFlow 2.21 line's environment (made once)
#   ./build.sh push [--dry-run] [--account ID] [--region R] [--registry HOST] ...  tag and push (ECR)
#   ./build.sh sdk-setup [2|3]  the SageMaker Python SDK's venv (major version 2, default, or 3) for
#                             the container tests (prints its PATH)
#   ./build.sh bench-envs     the environments of the benchmarks that run in their own (bench-envs/)
#   ./build.sh preflight      say which engine answers, how it builds and what the SDK's local mode runs with;
#                             prove that two containers on one network find each other by name
#                             (what multi-host jobs need), or say what is missing and how to fix it
#
# Setup is idempotent. The virtual environment lives outside the work tree, keyed by a
# hash of the pin files and the Python version, so every clone with the same pins reuses
# it and a second `setup` takes seconds. TRAINER_VENV overrides its location.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
# openssh-server: MPI across `trainer local` hosts (each simulated host runs its own sshd for
# the job; the package's own service is not used).
APT_PACKAGES=(openmpi-bin libopenmpi-dev g++ make cmake patch iproute2 openssh-server)
# Horovod is compiled against the TensorFlow in the venv and the system OpenMPI.
HOROVOD_BUILD_ENV=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1
                   HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1)

CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/sagemaker-tf-trainer"

log() { printf '[build.sh] %s\n' "$*" >&2; }

pins_hash() {
  { cat "$ROOT"/lines/2.14/requirements.txt "$ROOT"/lines/requirements-horovod.txt \
        "$ROOT"/requirements-dev.txt "$ROOT"/requirements-bench.txt "$ROOT"/lines/2.14/constraints.txt "$ROOT"/docker/horovod-cmake
    "$PYTHON" -c 'import sys; print(sys.version)'
    printf '%s\n' "${HOROVOD_BUILD_ENV[@]}"
  } | sha256sum | cut -c1-16
}

venv_dir() {
  echo "${TRAINER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sagemaker-tf-trainer/venv-$(pins_hash)}"
}

install_system_packages() {
  local missing=() wanted=("${APT_PACKAGES[@]}")
  # Debian's own python3 needs these for venvs and for compiling mpi4py and Horovod.
  "$PYTHON" -c 'import ensurepip' 2>/dev/null || wanted+=(python3-venv)
  [ -f "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || wanted+=(python3-dev)
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing system packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_venv() {
  local venv="$1"
  if [ -f "$venv/.complete" ]; then
    return 0
  fi
  log "creating $venv (first time for these pins: TensorFlow download and Horovod build, ~5-10 min)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv "$venv"
  local pip=("$venv/bin/pip" install --quiet --disable-pip-version-check -c "$ROOT/lines/2.14/constraints.txt")
  "${pip[@]}" pip setuptools wheel
  "${pip[@]}" -r "$ROOT/lines/2.14/requirements.txt" -r "$ROOT/requirements-dev.txt" -r "$ROOT/requirements-bench.txt"
  "${pip[@]}" "$(horovod_wheel "$venv")"
  touch "$venv/.complete"
}

# Horovod compiled against the pinned TensorFlow and the system OpenMPI, once: a wheel kept
# by the pins it was built with, which a new environment with the same pins (and `bench
# scripts`' environment) installs instead of compiling it again (minutes on 2 cores).
# horovod_wheel VENV [LINE]: VENV has the TensorFlow to build against; LINE 2.21 builds
# Horovod's source with the project's patch for that TensorFlow (lines/2.21/horovod.patch).
# Prints the wheel's path.
horovod_wheel() {
  local venv="$1" line="${2:-2.14}" key dir constraints="$ROOT/lines/2.14/constraints.txt" patch=/dev/null source
  if [ "$line" = 2.21 ]; then constraints="$ROOT/lines/2.21/constraints.txt"; patch="$ROOT/lines/2.21/horovod.patch"; fi
  key="$({ cat "$ROOT/lines/requirements-horovod.txt" "$ROOT/docker/horovod-cmake"
           grep -i '^intel.tensorflow==\|^tensorflow.cpu==' "$constraints"
           "$PYTHON" -c 'import sys; print(sys.version)'
           printf '%s\n' "${HOROVOD_BUILD_ENV[@]}"; cat "$patch"; } | sha256sum | cut -c1-16)"
  dir="$CACHE_DIR/wheels/horovod-$key"
  if ! ls "$dir"/horovod-*.whl >/dev/null 2>&1; then
    log "compiling Horovod against TensorFlow (a few minutes, once for these pins)"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    source=(-r "$ROOT/lines/requirements-horovod.txt")
    if [ "$patch" != /dev/null ]; then  # its source, patched
      "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        -r "$ROOT/lines/requirements-horovod.txt" -d "$dir.tmp/source" >&2
      tar -xzf "$dir.tmp"/source/horovod-*.tar.gz -C "$dir.tmp/source"
      patch -s -p1 -d "$dir.tmp"/source/horovod-*/ < "$patch" >&2
      source=("$(echo "$dir.tmp"/source/horovod-*/)")
    fi
    # Horovod's setup.py must see TensorFlow, so no build isolation; no wheel from pip's cache,
    # which does not know these flags; MAKEFLAGS bounds the compiler's memory (its default -j8
    # needs ~1.6 GB per job).
    env "${HOROVOD_BUILD_ENV[@]}" HOROVOD_CMAKE="$ROOT/docker/horovod-cmake" MAKEFLAGS="-j$(nproc)" \
      "$venv/bin/pip" wheel --quiet --disable-pip-version-check --no-cache-dir --no-deps --no-build-isolation \
      -c "$constraints" "${source[@]}" -w "$dir.tmp" >&2
    rm -rf "$dir.tmp/source" "$dir" && mv "$dir.tmp" "$dir"
  fi
  ls "$dir"/horovod-*.whl
}

# The project itself is installed editable, pointing at this work tree; re-pointed when
# another clone shares the venv.
install_project() {
  local venv="$1"
  if [ "$(cat "$venv/.project-root" 2>/dev/null)" != "$ROOT" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
    echo "$ROOT" > "$venv/.project-root"
  fi
}

setup() {
  install_system_packages
  local venv
  venv="$(venv_dir)"
  install_venv "$venv"
  install_project "$venv"
}

# Run a command in the environment, in the caller's folder (the paths it is given are the
# caller's); run_in_env runs it from the project's root (the tests, benchmarks, demo).
run_here_in_env() {
  local venv
  venv="$(venv_dir)"
  [ -f "$venv/.complete" ] || { log "environment missing: run ./build.sh setup"; exit 1; }
  install_project "$venv"
  export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
  # Running as root (CI, containers) needs OpenMPI's explicit consent.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  exec "$@"
}

run_in_env() {
  cd "$ROOT"
  run_here_in_env "$@"
}

IMAGE_NAME="${IMAGE_NAME:-sagemaker-tf-trainer}"

# A test run: what its later tests need is made in the background, at a lower priority than
# the tests (nice), while the Python environment is made and the tiers before them run: the
# CPU images (their downloads overlap the tests' work), the environments. Each is made once,
# under a lock: the tests' own calls wait for it, then reuse it. The benchmarks' environments
# need the project's (its Horovod wheel): they start after setup.
# prebuild_images together|in-turn: both lines' CPU images, side by side (Docker Engine:
# one's downloads overlap the other's compiling) or one after the other.
prebuild_images() {
  mkdir -p "$CACHE_DIR"
  log "building the CPU images (2.14, 2.21) in the background with $(engine) (log: $CACHE_DIR/image-build*.log)"
  if [ "$1" = together ]; then
    nice -n 10 "$0" image cpu >"$CACHE_DIR/image-build.log" 2>&1 &
    nice -n 10 "$0" image cpu 2.21 >"$CACHE_DIR/image-build-2.21.log" 2>&1 &
  else
    { nice -n 10 "$0" image cpu && nice -n 10 "$0" image cpu 2.21; } >"$CACHE_DIR/image-build.log" 2>&1 &
  fi
}

# prebuild_environments NAME...: build.sh commands that make environments, in turn.
prebuild_environments() {
  log "making environments in the background: $* (log: $CACHE_DIR/environments.log)"
  { for command in "$@"; do nice -n 10 "$0" $command || exit; done; } >"$CACHE_DIR/environments.log" 2>&1 &
}

# run_tiers MARKERS LINE_MARKERS [ARGS]: the 2.14 line's tests selected by MARKERS (pytest -m)
# and, beside them, the 2.21 line's (tests/lines.py) selected by LINE_MARKERS, sharing the machine's
# cores through one set of locks (tests/cores.py). Red if either line is.
run_tiers() {
  local markers="$1" line_markers="$2" line_log="$CACHE_DIR/line-2.21-tier.log" status=0 line_status=0 line_pid
  shift 2
  TRAINER_TEST_CORES="$(mktemp -d -t trainer-test-cores-XXXXXX)"
  export TRAINER_TEST_CORES
  log "the TensorFlow 2.21 line's tests run beside the 2.14 line's (log: $line_log; printed at the end)"
  test_line 2.21 -n 2 -m "$line_markers" >"$line_log" 2>&1 &  # two test processes beside the four
  line_pid=$!
  ( run_in_env python -m pytest -m "$markers" "$@" ) || status=$?
  wait "$line_pid" || line_status=$?
  log "the TensorFlow 2.21 line's tests (exit $line_status):"
  grep -v '^WARNING: Location' "$line_log" || true
  rm -rf "$TRAINER_TEST_CORES"
  unset TRAINER_TEST_CORES  # the next pytest run makes its own
  [ "$line_status" -eq 0 ] || status=$line_status
  return "$status"
}

# Every test of the run writes the cores it held to one CPU log (tests/cores.py), whose
# summary ends the run: the core-seconds its tests held, and its slowest tests.
start_cpu_log() {
  export TRAINER_TEST_CPU_LOG="${TRAINER_TEST_CPU_LOG:-$CACHE_DIR/test-cores.jsonl}"
  mkdir -p "$(dirname "$TRAINER_TEST_CPU_LOG")"
  : > "$TRAINER_TEST_CPU_LOG"
}

cpu_log_summary() {
  log "the cores the tests held (both lines; $TRAINER_TEST_CPU_LOG):"
  ( run_in_env python tests/cores.py "$TRAINER_TEST_CPU_LOG" ) || true
}

# Docker Engine for a run: its daemon started (docker/dockerd.sh), stopped when the script
# ends, so that podman is the engine again for anything after.
with_docker_engine() {
  "$ROOT/docker/dockerd.sh" start
  trap '"$ROOT/docker/dockerd.sh" stop' EXIT
}

engine() { "$ROOT/docker/engine.sh" name; }

# base_image [22.04|24.04]: the Ubuntu a line's Dockerfile starts FROM.
base_image() {
  local release="${1:-22.04}" eng
  "$ROOT/docker/engine.sh" setup
  eng="$(engine)"
  if "$eng" image inspect "docker.io/library/ubuntu:$release" >/dev/null 2>&1; then
    return 0
  fi
  timeout 60 "$eng" pull -q "docker.io/library/ubuntu:$release" >/dev/null 2>&1 && return 0
  log "no registry answers: making ubuntu:$release with debootstrap"
  "$ROOT/docker/base.sh" "$eng" "$release"
}

# image [cpu|gpu] [2.14|2.21]. The 2.14 line's images are also tagged `cpu` and `gpu`, the
# names every example and test uses (docs/image.md, "Versions").
image() {
  local flavour="${1:-cpu}" line="${2:-2.14}" file tag started eng format=() release=22.04 aliases=() args=() stage=""
  case "$flavour/$line" in
    cpu/2.14) file="$ROOT/lines/2.14/Dockerfile"; aliases=(cpu) ;;
    gpu/2.14) file="$ROOT/lines/2.14/Dockerfile.gpu"; aliases=(gpu); stage=build ;;
    cpu/2.21) file="$ROOT/lines/2.21/Dockerfile"; release=24.04 ;;
    gpu/2.21) file="$ROOT/lines/2.21/Dockerfile"; release=24.04; args=(--build-arg "TENSORFLOW=tensorflow[and-cuda]") ;;
    *) log "image: cpu or gpu, of line 2.14 or 2.21; not $flavour $line"; exit 2 ;;
  esac
  # One build at a time: the whole suite's early build (below) and the tests' own call.
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/image-$line-$flavour.lock"
  flock 9
  base_image "$release"
  eng="$(engine)"
  # podman builds OCI images by default, which drop the Dockerfile's SHELL; Docker Engine
  # builds Docker's format always and has no such flag.
  [ "$eng" = podman ] && format=(--format docker)
  tag="localhost/$IMAGE_NAME:$line-$flavour"
  started=$(date +%s)
  if [ -n "$stage" ]; then  # the compiler stage keeps a name, so the prune below leaves it cached
    "$eng" build "${format[@]}" -f "$file" --target "$stage" -t "$tag-$stage" "$ROOT"
  fi
  "$eng" build "${format[@]}" "${args[@]}" -f "$file" -t "$tag" "$ROOT"
  for alias in "${aliases[@]}"; do "$eng" tag "$tag" "localhost/$IMAGE_NAME:$alias"; done
  "$eng" image prune -f >/dev/null  # the layers a rebuild left without a name
  log "built $tag in $(( $(date +%s) - started )) s, $(( $("$eng" image inspect --format '{{.Size}}' "$tag") / 1000000 )) MB"
}

# keyed_venv NAME KEY INSTALL...: the venv $CACHE_DIR/NAME-KEY, made once (under a lock, also
# when the suite's background work is making it) by running INSTALL... with the venv's path
# as its last argument; prints that path. KEY is a hash of what the venv is made from.
keyed_venv() {
  local name="$1" key="$2" venv lock
  shift 2
  venv="$CACHE_DIR/$name-$key"
  mkdir -p "$CACHE_DIR"
  exec {lock}>"$CACHE_DIR/$name.lock"
  flock "$lock"
  if [ ! -f "$venv/.complete" ]; then
    log "creating $venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$@" "$venv" >&2
    touch "$venv/.complete"
  fi
  echo "$venv"
}

# The TensorFlow 2.21 line's environment for the tests that run the package on it (this
# machine's Python; the image's is 3.12): lines/2.21/requirements.txt under lines/2.21/constraints.txt,
# keyed by both. tensorflow-cpu first and named `tensorflow` (container/tensorflow-name.py), as
# in the image. Prints its python.
line_env() {
  local line="$1" hash venv
  [ "$line" = 2.21 ] || { log "line: 2.21 (the 2.14 line's environment is ./build.sh setup's)"; exit 2; }
  hash="$({ cat "$ROOT/lines/$line/requirements.txt" "$ROOT/lines/$line/constraints.txt" "$ROOT/requirements-dev.txt" \
              "$ROOT/container/tensorflow-name.py" "$ROOT/lines/requirements-horovod.txt" "$ROOT/docker/horovod-cmake" \
              "$ROOT/lines/$line/horovod.patch"; "$PYTHON" -c 'import sys; print(sys.version)'
            printf '%s\n' "${HOROVOD_BUILD_ENV[@]}"; } | sha256sum | cut -c1-16)"
  venv="$(keyed_venv "line-$line" "$hash" install_line "$line")"
  if [ "$(cat "$venv/.project-root" 2>/dev/null)" != "$ROOT" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT" >&2
    # `from sagemaker_tensorflow import PipeModeDataset`, as in the 2.21 image (container/).
    ln -sfn "$ROOT/container/sagemaker_tensorflow" "$(echo "$venv"/lib/python3*/site-packages)/sagemaker_tensorflow"
    echo "$ROOT" > "$venv/.project-root"
  fi
  # Keras 3's fit under multi-worker mirrored, fixed as in the image (trainer.script.keras_multi_worker_fit).
  cmp -s "$ROOT/container/trainer-keras-fit.pth" "$venv"/lib/python3*/site-packages/trainer-keras-fit.pth \
    || cp "$ROOT/container/trainer-keras-fit.pth" "$venv"/lib/python3*/site-packages/
  echo "$venv/bin/python"
}

install_line() {
  local line="$1" venv="$2"
  local pip=("$venv/bin/pip" install --quiet --disable-pip-version-check -c "$ROOT/lines/$line/constraints.txt")
  "${pip[@]}" pip setuptools wheel
  "${pip[@]}" "$(grep '^tensorflow-cpu==' "$ROOT/lines/$line/requirements.txt")"
  "$venv/bin/python" "$ROOT/container/tensorflow-name.py"
  "${pip[@]}" -r "$ROOT/lines/$line/requirements.txt" -r "$ROOT/requirements-dev.txt"
  "${pip[@]}" "$(horovod_wheel "$venv" "$line")"
}

# The tests that run on a line (their `line` marker: tests/lines.py), in that line's environment.
test_line() {
  local line="${1:?line}"
  shift
  ( cd "$ROOT" && run_in_line "$line" python -m pytest tests/unit tests/integration "$@" )
}

# line 2.21 CMD...: CMD with that environment's python first on PATH, from the caller's folder.
run_in_line() {
  local line="$1" python
  shift
  python="$(line_env "$line")"
  export VIRTUAL_ENV="$(dirname "$(dirname "$python")")" PATH="$(dirname "$python"):$PATH"
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  exec "$@"
}

# The SageMaker Python SDK's own environment, for the container tests: a venv keyed by its
# pins, and a `docker-compose` that records each job for the tests (tests/container/sdk/compose.py:
# podman-compose where no docker daemon runs, with a `docker` that is podman; else the real
# docker-compose). Prints the folder to put first on PATH.
# write_shim PATH LINE: an executable sh script of one line, put in place in one rename.
write_shim() {
  printf '#!/bin/sh\n%s\n' "$2" > "$1.new.$$"
  chmod +x "$1.new.$$"
  mv -f "$1.new.$$" "$1"
}

sdk_setup() {
  local major="${1:-2}" hash venv pins name
  case "$major" in
    2) name=sdk ;;  # sdk/2: SDK 2.x (Estimator, TensorFlow(distribution=...))
    3) name=sdk3 ;;  # sdk/3: SDK 3.x (ModelTrainer)
    *) log "sdk-setup [2|3]: the SDK's major version, not $major"; exit 2 ;;
  esac
  pins="$ROOT/sdk/$major"
  "$ROOT/docker/engine.sh" setup
  hash="$(cat "$pins/requirements.txt" "$pins/constraints.txt" | sha256sum | cut -c1-16)"
  venv="$(keyed_venv "$name-venv" "$hash" pip_install -c "$pins/constraints.txt" -r "$pins/requirements.txt")"
  mkdir -p "$venv/shims"
  # Replaced whole (another test process may be running a job through them), never half-written.
  if [ "$(engine)" = podman ]; then
    write_shim "$venv/shims/docker" 'exec podman "$@"'
    write_shim "$venv/shims/docker-compose" \
      "TRAINER_COMPOSE_ENGINE=podman exec \"$venv/bin/python\" \"$ROOT/tests/container/sdk/compose.py\" \"\$@\""
  else
    rm -f "$venv/shims/docker"  # the real docker
    if command -v docker-compose >/dev/null 2>&1; then  # the real one, with the tests' records
      write_shim "$venv/shims/docker-compose" "TRAINER_COMPOSE_ENGINE=docker TRAINER_DOCKER_COMPOSE=\"$(command -v docker-compose)\" exec \"$venv/bin/python\" \"$ROOT/tests/container/sdk/compose.py\" \"\$@\""
    else
      log "no docker-compose: the SDK's local mode cannot run jobs (docker/dockerd.sh start installs it)"
    fi
  fi
  echo "$venv/shims:$venv/bin"
}

# A benchmark's own environment (bench-envs/NAME.txt): another TensorFlow build, or a peer
# library, side by side with the project's. Keyed by its pins; prints its python.
bench_env() {
  local name="$1" file="$ROOT/bench-envs/$1.txt" hash venv
  local extra="$ROOT/bench-envs/$name.horovod.txt"  # a second step, when there is one
  [ -f "$extra" ] || extra=/dev/null
  hash="$(cat "$file" "$ROOT/lines/2.14/constraints.txt" "$extra" "$ROOT/docker/horovod-cmake" | sha256sum | cut -c1-16)"
  venv="$(keyed_venv "bench-$name" "$hash" install_bench_env "$file" "$extra")"
  echo "$venv/bin/python"
}

install_bench_env() {
  local file="$1" extra="$2" venv="$3"
  pip_install -c "$ROOT/lines/2.14/constraints.txt" -r "$file" "$venv"
  if [ "$extra" != /dev/null ]; then  # the project's Horovod wheel (see the extra file)
    pip_install -c "$ROOT/lines/2.14/constraints.txt" "$(horovod_wheel "$(venv_dir)")" "$venv"
  fi
}

# pip_install ARGS... VENV: pip install ARGS into VENV, quietly.
pip_install() {
  local venv="${*: -1}"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${@:1:$#-1}"
}

# bench [--line 2.21] NAME ...: in the 2.14 line's environment, or the other line's. `bench
# peer` and `bench build` (or `bench all`) run code in their own environments besides.
bench() {
  local run=(run_in_env)
  if [ "${1:-}" = --line ]; then run=(run_in_line "${2:?bench --line 2.21 NAME}"); shift 2; cd "$ROOT"; fi
  case "${1:-}" in
    peer|all) export TRAINER_BENCH_DEEPCTR_PYTHON="${TRAINER_BENCH_DEEPCTR_PYTHON:-$(bench_env deepctr)}" ;;&
    build|all) export TRAINER_BENCH_TF_CPU_PYTHON="${TRAINER_BENCH_TF_CPU_PYTHON:-$(bench_env tensorflow-cpu)}" ;;
    # The 2.21 line's own TensorFlow is stock tensorflow-cpu, AWS's build: scripts run the AWS
    # way in the line's environment.
    scripts) [ "${run[0]}" = run_in_line ] ||
               export TRAINER_BENCH_TF_CPU_PYTHON="${TRAINER_BENCH_TF_CPU_PYTHON:-$(bench_env tensorflow-cpu)}" ;;
  esac
  "${run[@]}" trainer bench "$@"
}

# The image's lock (its Python differs from this machine's): what a build resolved, frozen.
image_lock() {
  local line="${1:-2.14}" eng lock
  local tag="localhost/$IMAGE_NAME:$line-cpu"
  lock="$ROOT/lines/$line/image-constraints.txt"
  [ -f "$lock" ] || { log "image-lock: 2.14 or 2.21, not $line"; exit 2; }
  eng="$(engine)"
  { sed -n '1,2p' "$lock"
    # Not the CPU image's metadata-only `tensorflow` (container/tensorflow-name.py): the GPU
    # image installs TensorFlow itself, at its own version, under this lock.
    "$eng" run --rm --entrypoint python3 "$tag" -m pip freeze --all --exclude-editable \
      | grep -v ' @ file://' | grep -v '^tensorflow=='
  } > "$lock.new"
  mv "$lock.new" "$lock"
  log "wrote ${lock#"$ROOT/"} from $tag"
}

# The header above, up to the line that sets the shell's options.
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

cmd="${1:-help}"
shift || true
case "$cmd" in
  setup) setup ;;
  exec) run_here_in_env "$@" ;;
  demo) setup; run_in_env trainer demo "$@" ;;
  test)
    # Every apt-get before the background work, which would otherwise run its own beside it.
    install_system_packages
    with_docker_engine
    [ $# -eq 0 ] && prebuild_images together
    setup
    if [ $# -gt 0 ]; then ( run_in_env python -m pytest "$@" ); exit; fi
    prebuild_environments sdk-setup "sdk-setup 3"
    start_cpu_log
    status=0
    run_tiers "(gate or not slow) and not gpu_image" "gate or not slow" || status=$?
    cpu_log_summary
    exit "$status" ;;
  test-all)
    install_system_packages
    "$ROOT/docker/engine.sh" setup
    [ "$(engine)" = podman ] || log "a Docker daemon answers: the container tests run with docker, not podman"
    prebuild_images in-turn
    setup
    prebuild_environments bench-envs sdk-setup "sdk-setup 3"
    start_cpu_log
    status=0
    # The container tests with podman: the gate's too, which ran with Docker Engine.
    run_tiers "((slow and not gate) or container) and not docker_engine and not gpu_image" "slow and not gate" || status=$?
    ( run_in_env python -m pytest -m gpu_image ) || status=$?
    # Then Docker Engine's own (the gate ran the rest with it), against images Docker builds.
    with_docker_engine
    # shellcheck disable=SC2046
    ( run_in_env python -m pytest -m "not gate and not gpu_image" tests/container/test_docker_engine.py \
      $(grep -v '^#' "$ROOT/tests/container/docker_tier.txt") ) || status=$?
    cpu_log_summary
    exit "$status" ;;
  test-line) [ $# -ge 1 ] || { log "test-line 2.21 [ARGS]"; exit 2; }; test_line "$@" ;;
  test-fast) setup; run_in_env python -m pytest -m "not slow" "$@" ;;
  bench) setup; bench "$@" ;;
  base) base_image "$@" ;;
  image) image "$@" ;;
  image-lock) image_lock "$@" ;;
  line) [ $# -ge 2 ] || { log "line 2.21 CMD..."; exit 2; }; run_in_line "$@" ;;
  sdk-setup) sdk_setup "$@" ;;
  bench-envs) setup; for name in "$ROOT"/bench-envs/*.txt; do
                case "$name" in *.horovod.txt) ;; *) bench_env "$(basename "$name" .txt)" >/dev/null ;; esac
              done ;;
  preflight) base_image; "$ROOT/docker/engine.sh" preflight docker.io/library/ubuntu:22.04 ;;
  push) "$ROOT/docker/engine.sh" setup; "$ROOT/docker/push.sh" "$(engine)" "$@" ;;
  help|-h|--help) usage ;;
  *) log "unknown command: $cmd"; usage >&2; exit 2 ;;
esac
