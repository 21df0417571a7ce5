#!/usr/bin/env bash
# Installs the trainer package copied to /opt/trainer (both images, as their last layer),
# then checks that `train` is on PATH and that the package and its modes import.
set -euo pipefail
python3 -m pip install --no-cache-dir --no-deps /opt/trainer
command -v train
python3 -c "import trainer.commands.train, trainer.modes; print('modes:', ', '.join(trainer.modes.names()))"
# Python processes that `train` did not start (SageMaker's ModelTrainer runs its own driver
# as the entry point) get the image's defaults and their share of the CPUs at start-up
# (trainer.image_environment).
site_packages="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo 'import trainer.image_environment as _trainer_image; _trainer_image.at_python_start()' \
  > "$site_packages/trainer-image-environment.pth"
env -i PATH="$PATH" python3 -c 'import os; assert os.environ["KMP_BLOCKTIME"] == "1", dict(os.environ)'
# Keras 3's fit under MultiWorkerMirroredStrategy, fixed in every process that imports it
# (trainer.script.keras_multi_worker_fit).
cp /opt/container/trainer-keras-fit.pth "$site_packages/"
python3 -c 'import sys, trainer.script.keras_multi_worker_fit as fit; assert any(isinstance(f, fit._FixAfterImport) for f in sys.meta_path)'
