"""The TensorFlow line this environment runs, and everything that differs between the lines.

The image comes in two lines (docs/image.md): 2.14 (intel-tensorflow, Keras 2 as tf.keras,
Horovod, AWS's PipeModeDataset) and 2.21 (stock TensorFlow, Keras 3, tf-keras beside it,
Horovod built against it with the project's patch, lines/2.21/horovod.patch). The rest of
the package asks this module, never TensorFlow's version, what the line has. It reads
installed packages' metadata only: planning must not load TensorFlow.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

# Keras 3 has no parameter-server training, and the container's own training is written on
# Keras 2's API (its optimizers' sparse updates, model.fit's hooks): on the 2.21 line its
# processes run Keras 2 from tf-keras, which TensorFlow serves as tf.keras when this is set
# before it is imported. A user's script gets the Keras it asks for (Keras 3 unless it sets it).
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"


@dataclass(frozen=True)
class Line:
    name: str  # the image tag's prefix: 2.14-cpu, 2.21-cpu
    keras: str  # what `import keras` and tf.keras give a script
    keras_3: bool  # a script's `import keras` is Keras 3
    # Horovod built with NCCL, its GPU collectives (2.14's GPU image); 2.21's Horovod has CPU
    # collectives only, so TensorFlow's own strategies (NCCL all-reduce) train GPUs there.
    horovod_on_gpus: bool
    # intel-tensorflow runs oneDNN on Intel OpenMP (the OMP_*/KMP_* variables act); stock
    # TensorFlow runs it on its own thread pool (only the intra/inter-op thread counts act).
    openmp: bool
    # Environment the container's own training processes need before TensorFlow loads.
    own_model_environment: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """The line in one line of the log and the plan."""
        threads = ("oneDNN on Intel OpenMP (OMP_*/KMP_* act)" if self.openmp
                   else "oneDNN on TensorFlow's thread pool (the intra/inter-op thread counts act)")
        own = "tf-keras (Keras 2)" if self.own_model_environment else "Keras 2"
        return (f"TensorFlow {self.name} line: TensorFlow {tensorflow_version()}, {threads}; scripts get "
                f"{self.keras}; the built-in model and hooks run on {own}; Horovod {installed_version('horovod')}")

    def script_environment(self, keras_3_trains: bool, uses_keras_3: str, environ) -> tuple[tuple[str, str], ...]:
        """What a user's script's processes get from the line: tf.keras as tf-keras (Keras 2)
        where Keras 3 cannot train it (`keras_3_trains`: its mode's strategy, Horovod's Keras
        API), unless the script uses what only Keras 3 has (`uses_keras_3`: where) or the job
        set the switch itself (`environ`: the container's environment, where the SDK's
        `environment=` lands). `import keras` stays Keras 3 either way: the switch changes
        tf.keras alone."""
        if self.keras_3 and not keras_3_trains and not uses_keras_3 and LEGACY_KERAS_ENV not in environ:
            return ((LEGACY_KERAS_ENV, "1"),)
        return ()

    def use_own_keras(self) -> None:
        """In a process of the container's own training, before TensorFlow is imported."""
        os.environ.update(dict(self.own_model_environment))


LINES = {
    "2.14": Line("2.14", keras="Keras 2.14 (tf.keras)", keras_3=False, horovod_on_gpus=True, openmp=True),
    "2.21": Line("2.21", keras="Keras 3 (tf.keras is Keras 3 unless TF_USE_LEGACY_KERAS=1 picks tf-keras)",
                 keras_3=True, horovod_on_gpus=False, openmp=False, own_model_environment=((LEGACY_KERAS_ENV, "1"),)),
}
# The first TensorFlow release of each line: 2.16 made Keras 3 tf.keras.
_FIRST_RELEASE = (((2, 16), "2.21"), ((0, 0), "2.14"))


def installed_version(distribution: str) -> str:
    """A distribution's installed version, or "not installed" (metadata only, no import)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def tensorflow_version() -> str | None:
    """The installed TensorFlow's version, from its distribution's metadata (no import)."""
    for distribution in ("tensorflow", "intel-tensorflow", "tensorflow-cpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def line_of(version: str | None) -> Line:
    """The line a TensorFlow version belongs to (none installed: 2.14, the default image's)."""
    if version is None:
        return LINES["2.14"]
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    return LINES[next(name for first, name in _FIRST_RELEASE if major_minor >= first)]


_installed: Line | None = None


def installed() -> Line:
    global _installed
    if _installed is None:
        _installed = line_of(tensorflow_version())
    return _installed
