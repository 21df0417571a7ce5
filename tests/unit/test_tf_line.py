"""Which line a TensorFlow version is on, and what each line gives the container's own training."""
import os

import pytest

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


def test_the_lines_differ_in_horovod_keras_and_openmp():
    old, new = LINES["2.14"], LINES["2.21"]
    assert (old.horovod, old.openmp, old.own_model_environment) == (True, True, ())
    assert (new.horovod, new.openmp) == (False, False)
    assert dict(new.own_model_environment) == {LEGACY_KERAS_ENV: "1"}


def test_the_installed_line_is_the_installed_tensorflow_s(monkeypatch):
    assert installed() is line_of(tensorflow_version())
    monkeypatch.delenv(LEGACY_KERAS_ENV, raising=False)
    installed().use_own_keras()
    assert os.environ.get(LEGACY_KERAS_ENV) == dict(installed().own_model_environment).get(LEGACY_KERAS_ENV)
