"""`docker-compose` for the SageMaker SDK's local mode: podman-compose under podman, the
real docker-compose under Docker Engine, with the same records for the tests.

The SDK runs `up --abort-on-container-exit` and reads the exit code as the job's outcome.
That is kept as docker-compose does it: when the first container (host) exits, the others
are stopped (SIGTERM, then SIGKILL 10 s later), and the exit code is the first exited
container's. podman-compose stops the others the same way but always exits 0 unless told
which service's code to take, so under podman the exit code is worked out here from the
containers' own exit codes and end times. Every container's exit code is also appended, as
a JSON line, to $TRAINER_COMPOSE_RECORD.exits (when set): a test asserts that no host was
stopped into a failure.

The SDK leaves the ended containers behind (as docker-compose up does); they are removed
once the job's outputs are on the host's disk. The compose file's path is appended to
$TRAINER_COMPOSE_RECORD (when set), so a test that gives up on a job can still bring it
down. Run by the SDK venv's Python (`./build.sh sdk-setup` writes the command that runs it,
and sets $TRAINER_COMPOSE_ENGINE and, under Docker Engine, $TRAINER_DOCKER_COMPOSE); the
tests import `containers_of`.
"""
import functools
import json
import os
import re
import subprocess
import sys


@functools.cache
def engine() -> str:
    """The engine sdk-setup named, else docker/engine.sh's choice (one rule for both)."""
    if os.environ.get("TRAINER_COMPOSE_ENGINE"):
        return os.environ["TRAINER_COMPOSE_ENGINE"]
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # tests/container/sdk
    return subprocess.run([os.path.join(root, "docker", "engine.sh"), "name"], capture_output=True,
                          text=True).stdout.strip() or "podman"


def finished_ns(finished_at: str) -> int:
    """Docker's FinishedAt ("2026-11-27T05:40:12.123456789Z") in ns since 1970: datetime
    reads no more than microseconds."""
    from datetime import datetime, timezone

    stamp, _, fraction = finished_at.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def containers_of(compose_file: str) -> list[str]:
    """The containers of a compose file that are there: those it names (the SageMaker SDK's
    estimators name them), and those the compose command labelled with its folder
    (ModelTrainer's are not named)."""
    def names(*filters: str) -> set[str]:
        listed = subprocess.run([engine(), "ps", "-a", "--format", "{{.Names}}", *filters], capture_output=True,
                                text=True)
        return set(listed.stdout.split())

    named = re.findall(r"container_name: (\S+)", open(compose_file).read()) if os.path.exists(compose_file) else []
    folder = os.path.realpath(os.path.dirname(compose_file))
    labelled = names("--filter", f"label=com.docker.compose.project.working_dir={folder}")
    return sorted((set(named) & names()) | labelled)


def exits(names: list[str]) -> list[dict]:
    """Each container's name, exit code and end time (ns since 1970), in the order they ended."""
    found = []
    # podman's FinishedAt is a time; Docker's, a string.
    finished = "{{.State.FinishedAt.UnixNano}}" if engine() == "podman" else "{{.State.FinishedAt}}"
    for name in names:
        done = subprocess.run([engine(), "inspect", "--format", "{{.State.ExitCode}} " + finished, name],
                              capture_output=True, text=True)
        if done.returncode == 0:
            code, _, at = done.stdout.strip().partition(" ")
            found.append({"container": name, "exit_code": int(code),
                          "finished_ns": int(at) if engine() == "podman" else finished_ns(at)})
    return sorted(found, key=lambda e: e["finished_ns"])


def main(args: list[str]) -> int:
    compose = (os.path.join(os.path.dirname(sys.executable), "podman-compose") if engine() == "podman"
               else os.environ["TRAINER_DOCKER_COMPOSE"])
    record = os.environ.get("TRAINER_COMPOSE_RECORD")
    compose_file = args[args.index("-f") + 1] if "-f" in args else None
    if record and compose_file:  # the test that runs the job brings it down, whatever happens to this process
        with open(record, "a") as f:
            f.write(compose_file + "\n")
    status = subprocess.call([compose, *args])
    if "up" in args and compose_file:
        ended = exits(containers_of(compose_file))
        if record:
            with open(record + ".exits", "a") as f:
                for entry in ended:
                    f.write(json.dumps(entry) + "\n")
        if engine() == "podman" and status == 0 and ended:
            status = ended[0]["exit_code"]  # docker-compose's: the first container to exit
        subprocess.call([compose, *args[:args.index("up")], "down"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
