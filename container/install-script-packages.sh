#!/usr/bin/env bash
# What a script written for AWS's TensorFlow training image finds there besides the training
# stack (every image runs this once, after the stack): the `python` command, git (for
# `git+https` lines in requirements.txt), a C compiler (source-only packages), and the Python
# packages of the line's image requirements, resolved under the image's lock so that none of
# them moves what TensorFlow (and Horovod) were built against.
#
#   install-script-packages.sh   (the image's line's files, copied to /opt/pins from lines/<line>/)
set -euo pipefail
pins=/opt/pins
lock="$pins/image-constraints.txt"
requirements="$pins/requirements-image.txt"
# Versions fixed by the Ubuntu release.
apt-get update
apt-get install -y --no-install-recommends python-is-python3 git gcc g++ make python3-dev
rm -rf /var/lib/apt/lists/*
python3 "$pins/tensorflow-name.py"
python3 -m pip install --no-cache-dir -c "$lock" -r "$requirements"
python3 "$pins/drop-private-keys.py" "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" /usr/lib/python3
python3 -m pip check
