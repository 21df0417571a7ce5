#!/usr/bin/env bash
# Installs the trainer package copied to /opt/trainer (both images, as their last layer),
# then checks that `train` is on PATH and that the package and its modes import.
set -euo pipefail
python3 -m pip install --no-cache-dir --no-deps /opt/trainer
command -v train
python3 -c "import trainer.commands.train, trainer.modes; print('modes:', ', '.join(trainer.modes.names()))"
