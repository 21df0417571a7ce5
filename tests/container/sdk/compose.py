"""`docker-compose` for the SageMaker SDK's local mode, carried out by podman-compose.

For `up --abort-on-container-exit` the SDK reads the exit code as the job's outcome.
podman-compose returns 0 there unless told which container's code to return, so this
names the first host's (algo-1-...): when any host's container ends, the others are
stopped, and a failure anywhere shows in algo-1's code. Run by the SDK venv's Python.
"""
import os
import subprocess
import sys

import yaml

args = sys.argv[1:]
if "up" in args and "--abort-on-container-exit" in args and "-f" in args:
    with open(args[args.index("-f") + 1]) as f:
        services = sorted(yaml.safe_load(f)["services"])
    args += ["--exit-code-from", services[0]]
podman_compose = os.path.join(os.path.dirname(sys.executable), "podman-compose")
sys.exit(subprocess.call([podman_compose, *args]))
