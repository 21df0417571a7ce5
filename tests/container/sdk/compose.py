"""`docker-compose` for the SageMaker SDK's local mode, carried out by podman-compose.

The SDK runs `up --abort-on-container-exit` and reads the exit code as the job's outcome.
Stopping every host when the first one ends would cut the others short where SageMaker
waits for all of them (a toolkit MPI worker can finish seconds before its master), and
podman-compose would then report the stopped ones, or nothing (0). So the job runs as on
SageMaker: every host to its own end, and the first failure (if any) stops the rest and
gives the exit code (podman-compose's --abort-on-container-failure). The SDK leaves the
ended containers behind (as docker-compose up does); they are removed once the job's
outputs are on the host's disk. The compose file's path is appended to $TRAINER_COMPOSE_RECORD
(when set), so a test that gives up on a job can still bring it down. Run by the SDK venv's
Python.
"""
import os
import subprocess
import sys

args = ["--abort-on-container-failure" if arg == "--abort-on-container-exit" else arg for arg in sys.argv[1:]]
podman_compose = os.path.join(os.path.dirname(sys.executable), "podman-compose")
record = os.environ.get("TRAINER_COMPOSE_RECORD")
if record and "-f" in args:  # the test that runs the job brings it down, whatever happens to this process
    with open(record, "a") as f:
        f.write(args[args.index("-f") + 1] + "\n")
status = subprocess.call([podman_compose, *args])
if "up" in args:
    subprocess.call([podman_compose, *args[:args.index("up")], "down"], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
sys.exit(status)
