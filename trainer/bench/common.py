"""What several benchmarks share: the default DeepFM, generated data read through the job's
own pipeline, and timing in interleaved rounds (the machine's noise hits every case alike;
the figure is the median round)."""
from __future__ import annotations

import os
import statistics
import time

from trainer.contract.hyperparameters import SPEC_BY_NAME


def job_cpu_settings(environ=None):
    """The CPU settings a one-process job would get on this machine (the environment's
    OpenMP variables first, as in a job)."""
    from trainer import cpu
    from trainer.contract.hyperparameters import parse_hyperparameters
    from trainer.contract.job import physical_cores

    allowed = os.sched_getaffinity(0)
    return cpu.decide(parse_hyperparameters({}), len(allowed), physical_cores(allowed), 1, environ)


def apply_job_cpu_settings() -> None:
    """Run this benchmark process as a job's training process runs: call before TensorFlow loads."""
    from trainer import cpu

    settings = job_cpu_settings()
    cpu.apply_environment(settings)
    cpu.apply_tensorflow_threads(settings)


def default(name: str):
    return SPEC_BY_NAME[name].default


def default_model(feature_size: int | None = None, optimizer: str | None = None, **compile_options):
    """DeepFM with the job's default hyperparameters, compiled as `train` compiles it."""
    import tensorflow as tf

    from trainer.models.deepfm import build_deepfm
    from trainer.models.optimizers import build_optimizer_state, make_optimizer

    model = build_deepfm(default("field_size"), feature_size or default("feature_size"), default("embedding_size"),
                         default("deep_layers"), default("dropout"), default("l2_reg"), seed=0)
    model.compile(optimizer=make_optimizer(optimizer or default("optimizer"), default("learning_rate")),
                  loss=tf.keras.losses.BinaryCrossentropy(), **compile_options)
    build_optimizer_state(model.optimizer, model.trainable_variables)
    return model


def generated_input(folder: str, rows: int, data_format: str = "tfrecord", files: int = 4, cache: bool = False,
                    batch_size: int | None = None):
    """`rows` generated records in `folder`, as the job's File-mode pipeline reads them."""
    from trainer.contract.job import Channel
    from trainer.data import datagen
    from trainer.data.pipeline import EpochInput, InputSpec
    from trainer.data.records import batch_parser

    data = datagen.generate(os.path.join(folder, data_format), rows, 0, files=files, data_format=data_format)
    spec = InputSpec.for_channels([Channel("training", "File", "FullyReplicated", "", data["train"])], data_format)
    return EpochInput(spec, batch_parser(data_format, default("field_size")), batch_size or default("batch_size"),
                      default("shuffle_buffer"), seed=0, cache=cache)


class _StepClock:
    """Times training steps from the end of the first batch to the end of the last, as a
    job's samples/sec does: fit's setup and the iterator's start (the shuffle buffer's
    first fill) are left out, being once an epoch, not once a step."""

    def __init__(self):
        import tensorflow as tf

        clock = self

        class Callback(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                now = time.perf_counter()
                if clock.first is None:
                    clock.first = now
                clock.last, clock.steps = now, clock.steps + 1

        self.callback = Callback()
        self.first = self.last = None
        self.steps = 0


def fit_rate(model, dataset, steps: int, batch_size: int) -> float:
    """Samples per second of Keras fit on `dataset` (repeated) over `steps` steps."""
    clock = _StepClock()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[clock.callback])
    return (clock.steps - 1) * batch_size / (clock.last - clock.first)


def interleaved(cases: dict, rounds: int) -> dict:
    """{name: median of `rounds` calls of cases[name]()}, the cases taking turns."""
    samples = {name: [] for name in cases}
    for _ in range(rounds):
        for name, measure in cases.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}
