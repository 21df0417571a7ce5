#!/bin/sh
# A shell entry point: set something up, then train (its arguments are the hyperparameters).
set -e
echo "shell entry point on $SM_CURRENT_HOST with: $*"
exec python keras_train.py "$@"
