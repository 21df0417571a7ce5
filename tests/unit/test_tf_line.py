"""Which line a TensorFlow version is on, and what each line gives the container's own training."""
import json
import os
import subprocess
import sys

import pytest

from trainer.contract.user_code import horovod_keras_use, keras_3_use, keras_module_use
from trainer.tf_line import LEGACY_KERAS_ENV, LINES, installed, line_of, tensorflow_version


@pytest.mark.parametrize("version, line", [
    (None, "2.14"),          # no TensorFlow metadata: the default image's line
    ("2.14.0", "2.14"),
    ("2.15.1", "2.14"),      # the last release whose tf.keras is Keras 2
    ("2.16.1", "2.21"),      # tf.keras became Keras 3
    ("2.21.0", "2.21"),
    ("2.21.0rc1", "2.21"),
])
def test_line_of_a_version(version, line):
    assert line_of(version).name == line


def test_the_lines_differ_in_keras_horovod_s_gpu_collectives_and_openmp():
    old, new = LINES["2.14"], LINES["2.21"]
    assert (old.keras_3, old.horovod_on_gpus, old.openmp, old.own_model_environment) == (False, True, True, ())
    assert (new.keras_3, new.horovod_on_gpus, new.openmp) == (True, False, False)
    assert dict(new.own_model_environment) == {LEGACY_KERAS_ENV: "1"}


@pytest.mark.parametrize("line, keras_3_trains, uses_keras_3, environ, expected", [
    ("2.21", False, "", {}, {LEGACY_KERAS_ENV: "1"}),            # PS, Horovod's Keras API: Keras 3 cannot
    ("2.21", False, "", {LEGACY_KERAS_ENV: "0"}, {}),            # the job's own choice stands
    ("2.21", False, "", {LEGACY_KERAS_ENV: "1"}, {}),            # ... already set: nothing to add
    ("2.21", False, "line 3: keras.ops", {}, {}),                # a Keras 3 script keeps its Keras
    ("2.21", True, "", {}, {}),                                  # other modes: the Keras 3 AWS's 2.21 image gives
    ("2.14", False, "", {}, {}),                                 # tf.keras is Keras 2 on this line anyway
])
def test_what_a_script_s_processes_get_from_the_line(line, keras_3_trains, uses_keras_3, environ, expected):
    assert dict(LINES[line].script_environment(keras_3_trains, uses_keras_3, environ)) == expected


def test_the_installed_line_is_the_installed_tensorflow_s(monkeypatch):
    assert installed() is line_of(tensorflow_version())
    monkeypatch.delenv(LEGACY_KERAS_ENV, raising=False)
    installed().use_own_keras()
    assert os.environ.get(LEGACY_KERAS_ENV) == dict(installed().own_model_environment).get(LEGACY_KERAS_ENV)


# After a oneDNN matmul, the OpenMP runtimes the process has loaded (none: OMP_*/KMP_* cannot act).
OPENMP_RUNTIMES = """
import json, os, tensorflow as tf
tf.linalg.matmul(tf.ones((256, 512)), tf.ones((512, 256)))
print(json.dumps(sorted({os.path.basename(line.split()[-1]) for line in open("/proc/self/maps")
              if os.path.basename(line.split()[-1]).startswith(("libiomp", "libgomp", "libomp"))})))
"""


def test_the_installed_line_says_whether_its_tensorflow_runs_on_openmp():
    done = subprocess.run([sys.executable, "-c", OPENMP_RUNTIMES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    runtimes = json.loads(done.stdout.strip().splitlines()[-1])
    # intel-tensorflow (2.14) loads Intel's libiomp5; stock TensorFlow (2.21) none.
    assert bool(runtimes) == installed().openmp, runtimes
    assert runtimes in ([], ["libiomp5.so"])


@pytest.mark.parametrize("source, found", [
    ("import keras\nx = keras.ops.mean(y)\n", "line 2: keras.ops"),
    ("from keras import ops\n", "line 1: keras.ops"),
    ("import tensorflow as tf\n\n\ntf.keras.config.set_floatx('float16')\n", "line 4: keras.config"),
    ("import keras_hub\n", "line 1: keras_hub"),
    ("class Data(keras.utils.PyDataset):\n    pass\n", "line 1: keras.utils.PyDataset"),
    ("from keras.src import layers\n", "line 1: keras.src"),
    # Keras 2's own API, and names that only look alike: nothing.
    ("import tensorflow as tf\nm = tf.keras.Model()\nm.compile(optimizer=tf.keras.optimizers.AdamW())\n", ""),
    ("import keras\nkeras.layers.Dense(3)\nmy.ops.thing()\nkeras_ops = 1\n", ""),
    ("this is not python(", ""),
])
def test_what_only_keras_3_has_is_found_with_its_line(source, found):
    assert keras_3_use(source) == found


@pytest.mark.parametrize("source, found", [
    ("import horovod.tensorflow.keras as hvd\n", "line 1: horovod.tensorflow.keras"),
    ("import horovod.tensorflow as hvd\nfrom horovod.tensorflow.keras import callbacks\n",
     "line 2: horovod.tensorflow.keras"),
    ("import horovod.keras as hvd\n", "line 1: horovod.keras"),
    ("from horovod.keras.callbacks import BroadcastGlobalVariablesCallback\n", "line 1: horovod.keras"),
    ("import horovod.tensorflow as hvd\n", ""),  # DistributedGradientTape: any Keras
    ("def main():\n    import horovod.keras as hvd\n", "line 2: horovod.keras"),  # imported when it runs
    # Horovod when it is there, something else when not: the script runs on either line.
    ("try:\n    import horovod.keras as hvd\nexcept ImportError:\n    hvd = None\n", ""),
    ("import horovod_helpers\nhorovod = 1\n", ""),
    ("this is not python(", ""),
])
def test_a_script_s_use_of_horovod_s_keras_apis_is_found_with_its_line(source, found):
    assert horovod_keras_use(source) == found


@pytest.mark.parametrize("source, found", [
    ("import os\nimport keras\n", "line 2: keras"),
    ("from keras import layers\n", "line 1: keras"),
    ("from keras.layers import Dense\n", "line 1: keras"),
    ("import tensorflow as tf\nmodel = tf.keras.Sequential()\n", ""),
    ("from tensorflow import keras\n", ""),
    ("import keras_hub\n", ""),
])
def test_a_script_s_import_of_keras_itself_is_found_with_its_line(source, found):
    assert keras_module_use(source) == found
