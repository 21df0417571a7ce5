"""`docker-compose` for the SageMaker SDK's local mode, carried out by podman-compose.

The SDK runs `up --abort-on-container-exit` and reads the exit code as the job's outcome.
That is kept as docker-compose does it: when the first container (host) exits, the others
are stopped (SIGTERM, then SIGKILL 10 s later), and the exit code is the first exited
container's. podman-compose stops the others the same way but always exits 0 unless told
which service's code to take, so the exit code is worked out here from the containers'
own exit codes and end times. Every container's exit code is also appended, as a JSON
line, to $TRAINER_COMPOSE_RECORD.exits (when set): a test asserts that no host was stopped
into a failure.

The SDK leaves the ended containers behind (as docker-compose up does); they are removed
once the job's outputs are on the host's disk. The compose file's path is appended to
$TRAINER_COMPOSE_RECORD (when set), so a test that gives up on a job can still bring it
down. Run by the SDK venv's Python; the tests import `containers_of`.
"""
import json
import os
import re
import subprocess
import sys


def containers_of(compose_file: str) -> list[str]:
    """The containers of a compose file that are there: those it names (the SageMaker SDK's
    estimators name them), and those podman-compose labelled with its folder (ModelTrainer's
    are not named)."""
    def names(*filters: str) -> set[str]:
        listed = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}", *filters], capture_output=True,
                                text=True)
        return set(listed.stdout.split())

    named = re.findall(r"container_name: (\S+)", open(compose_file).read()) if os.path.exists(compose_file) else []
    folder = os.path.realpath(os.path.dirname(compose_file))
    labelled = names("--filter", f"label=com.docker.compose.project.working_dir={folder}")
    return sorted((set(named) & names()) | labelled)


def exits(names: list[str]) -> list[dict]:
    """Each container's name, exit code and end time (ns since 1970), in the order they ended."""
    found = []
    for name in names:
        done = subprocess.run(["podman", "inspect", "--format", "{{.State.ExitCode}} {{.State.FinishedAt.UnixNano}}",
                               name], capture_output=True, text=True)
        if done.returncode == 0:
            code, _, finished = done.stdout.strip().partition(" ")
            found.append({"container": name, "exit_code": int(code), "finished_ns": int(finished)})
    return sorted(found, key=lambda e: e["finished_ns"])


def main(args: list[str]) -> int:
    podman_compose = os.path.join(os.path.dirname(sys.executable), "podman-compose")
    record = os.environ.get("TRAINER_COMPOSE_RECORD")
    compose_file = args[args.index("-f") + 1] if "-f" in args else None
    if record and compose_file:  # the test that runs the job brings it down, whatever happens to this process
        with open(record, "a") as f:
            f.write(compose_file + "\n")
    status = subprocess.call([podman_compose, *args])
    if "up" in args and compose_file:
        ended = exits(containers_of(compose_file))
        if record:
            with open(record + ".exits", "a") as f:
                for entry in ended:
                    f.write(json.dumps(entry) + "\n")
        if status == 0 and ended:
            status = ended[0]["exit_code"]  # docker-compose's: the first container to exit
        subprocess.call([podman_compose, *args[:args.index("up")], "down"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
