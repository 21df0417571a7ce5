#!/usr/bin/env bash
# What a script written for AWS's TensorFlow training image finds there besides the training
# stack (both images run this once, after the stack): the `python` command, git (for
# `git+https` lines in requirements.txt), a C compiler (source-only packages), and the Python
# packages of requirements-image.txt, resolved under the image's lock so that none of them
# moves what TensorFlow and Horovod were built against.
set -euo pipefail
pins=/opt/pins
# Versions fixed by the Ubuntu release (jammy).
apt-get update
apt-get install -y --no-install-recommends python-is-python3 git gcc g++ make python3-dev
rm -rf /var/lib/apt/lists/*
python3 "$pins/tensorflow-name.py"
python3 -m pip install --no-cache-dir -c "$pins/constraints-py310.txt" -r "$pins/requirements-image.txt"
python3 "$pins/drop-private-keys.py" /usr/local/lib/python3.10/dist-packages /usr/lib/python3
python3 -m pip check
