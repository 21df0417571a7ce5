"""The fix of Keras 3's fit under MultiWorkerMirroredStrategy (trainer.script.keras_multi_worker_fit):
applied when Keras 3's TensorFlow trainer is imported, whoever imports it; standing aside
where Keras has not what it replaces. That the fixed fit trains two workers as one process on
the global batch is tests/integration/test_line_2_21.py's."""
import subprocess
import sys
import types

import pytest

from trainer.script import keras_multi_worker_fit
from trainer.tf_line import installed

IMPORT_KERAS_AFTER_THE_HOOK = """
import sys
import trainer.script.keras_multi_worker_fit as fit
fit.install()
import keras
{check}
"""


@pytest.mark.skipif(not installed().keras_3, reason="Keras 3's trainer is on the 2.21 line")
def test_keras_3_s_trainer_is_fixed_when_it_is_imported():
    check = ("from keras.src.backend.tensorflow import trainer\n"
             "assert trainer.TensorFlowTrainer._maybe_symbolic_build.fixes == 'keras-team/keras#20585'\n"
             "assert trainer.reduce_per_replica.__name__ == 'reduce_across_workers'\n"
             "print('fixed')")
    done = subprocess.run([sys.executable, "-c", IMPORT_KERAS_AFTER_THE_HOOK.format(check=check)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "fixed", done.stderr[-3000:]


@pytest.mark.skipif(installed().keras_3, reason="Keras 2 is on the 2.14 line")
def test_keras_2_imports_as_before_with_the_hook_installed():
    done = subprocess.run([sys.executable, "-c", IMPORT_KERAS_AFTER_THE_HOOK.format(check="print(keras.__version__)")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().startswith("2."), done.stderr[-3000:]


@pytest.mark.parametrize("names", [
    (),                                                          # not Keras 3's trainer
    ("TensorFlowTrainer", "reduce_per_replica"),                 # no multi-worker test to key on
    ("reduce_per_replica", "_collective_all_reduce_multi_worker"),  # no trainer class
])
def test_a_keras_without_what_the_fix_replaces_is_left_as_it_is(names):
    module = types.ModuleType("keras_trainer_of_another_version")
    for name in names:
        setattr(module, name, type(name, (), {}) if name == "TensorFlowTrainer" else (lambda *args: None))
    before = dict(vars(module))
    assert keras_multi_worker_fit.fix(module) is False
    assert dict(vars(module)) == before
