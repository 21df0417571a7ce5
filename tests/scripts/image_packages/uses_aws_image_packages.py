"""A script that relies on what AWS's TensorFlow training image ships besides TensorFlow:
each package imported and used a little, the `python`, `git`, `aws` commands, and a C
extension compiled against Python's headers."""
import os
import subprocess
import sys
import sysconfig
import tempfile

import cv2
import numpy as np
import pandas as pd
import sklearn.metrics
import tensorflow as tf
import tensorflow_datasets as tfds
import tensorflow_hub
import tensorflow_text
from sagemaker.experiments import load_run  # noqa: F401 (Experiments, as AWS's examples use it)
from sagemaker_tensorflow_container import training as aws_toolkit  # AWS's TensorFlow toolkit, as its image has it

frame = pd.DataFrame({"label": [0, 1, 1, 0], "score": [0.1, 0.8, 0.7, 0.3]})
print("sklearn auc", sklearn.metrics.roc_auc_score(frame.label, frame.score))
print("cv2 resize", cv2.resize(np.zeros((4, 4), np.uint8), (2, 2)).shape)
print("text tokens", tensorflow_text.WhitespaceTokenizer().tokenize(["split these words"]).to_list())
print("aws toolkit", aws_toolkit.__name__)
print("tfds", tfds.__version__, "hub", tensorflow_hub.__version__, "tf", tf.__version__)
for command in (["python", "-c", "print('python runs')"], ["git", "--version"], ["aws", "--version"]):
    print(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())

build = tempfile.mkdtemp()
with open(os.path.join(build, "native.c"), "w") as source:
    source.write('#include <Python.h>\n'
                 'static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }\n'
                 'static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};\n'
                 'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "native", NULL, -1, methods};\n'
                 'PyMODINIT_FUNC PyInit_native(void) { return PyModule_Create(&module); }\n')
subprocess.run(["gcc", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], "native.c", "-o",
                "native" + sysconfig.get_config_var("EXT_SUFFIX")], cwd=build, check=True)
sys.path.insert(0, build)
import native  # noqa: E402

print("compiled extension says", native.answer())
os.makedirs(os.path.join(os.environ["SM_MODEL_DIR"], "1"), exist_ok=True)
