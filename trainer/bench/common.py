"""What several benchmarks share: the default DeepFM, generated data read through the job's
own pipeline, and timing in interleaved rounds (the machine's noise hits every case alike;
the figure is the median round)."""
from __future__ import annotations

import os
import statistics

from trainer.contract.hyperparameters import SPEC_BY_NAME


def job_cpu_settings(environ=None):
    """The CPU settings a one-process job would get on this machine (the environment's
    OpenMP variables first, as in a job)."""
    from trainer.contract.hyperparameters import parse_hyperparameters
    from trainer.cpu import settings as cpu
    from trainer.cpu.settings import physical_cores

    allowed = os.sched_getaffinity(0)
    return cpu.decide(parse_hyperparameters({}), len(allowed), physical_cores(allowed), 1, environ)


def apply_job_cpu_settings() -> None:
    """Run this benchmark process as a job's training process runs: call before TensorFlow loads."""
    from trainer.cpu import settings as cpu

    settings = job_cpu_settings()
    cpu.apply_environment(settings)
    cpu.apply_tensorflow_threads(settings)


def default(name: str):
    return SPEC_BY_NAME[name].default


def default_model(feature_size: int | None = None, optimizer: str | None = None, **compile_options):
    """DeepFM with the job's default hyperparameters, compiled as `train` compiles it for a
    one-process job."""
    import tensorflow as tf

    from trainer import modes
    from trainer.contract.hyperparameters import parse_hyperparameters
    from trainer.models.deepfm import build_deepfm
    from trainer.models.optimizers import build_optimizer_state, make_optimizer
    from trainer.planner.planner import steps_per_execution

    model = build_deepfm(default("field_size"), feature_size or default("feature_size"), default("embedding_size"),
                         default("deep_layers"), default("dropout"), default("l2_reg"), seed=0)
    model.compile(optimizer=make_optimizer(optimizer or default("optimizer"), default("learning_rate")),
                  loss=tf.keras.losses.BinaryCrossentropy(),
                  **{"steps_per_execution": steps_per_execution(parse_hyperparameters({}), modes.get("single")), **compile_options})
    build_optimizer_state(model.optimizer, model.trainable_variables)
    return model


def generated_data(folder: str, rows: int, data_format: str = "tfrecord", files: int = 4, eval_rows: int = 0,
                   row_group_rows: int = 65536) -> dict:
    """datagen's rows (`rows` for training, `eval_rows` for evaluation) in `folder`, in one
    format: tfrecord, libsvm, csv, tsv, parquet, or any of them gzip-compressed (tsv.gz).
    The same seed gives the same rows in every format. Returns datagen's result."""
    import gzip
    import shutil

    from trainer.data import datagen

    plain = data_format.removesuffix(".gz")
    data = datagen.generate(os.path.join(folder, data_format), rows, eval_rows, files=files, data_format=plain,
                            row_group_rows=row_group_rows)
    if data_format.endswith(".gz"):
        for path in data["files"]:
            with open(path, "rb") as source, gzip.open(path + ".gz", "wb", compresslevel=1) as target:
                shutil.copyfileobj(source, target)
            os.remove(path)
    return data


def generated_spec(folder: str, rows: int, data_format: str = "tfrecord", files: int = 4):
    """`rows` generated records in `folder`, as the InputSpec of a File-mode training channel."""
    from trainer.contract.job import Channel
    from trainer.data.pipeline import InputSpec

    data = generated_data(folder, rows, data_format, files)
    return InputSpec.for_channels([Channel("training", "File", "FullyReplicated", "", data["train"])], None)


def job_input(spec, cache: bool = False, batch_size: int | None = None):
    """The job's own pipeline (defaults) over `spec`."""
    from trainer.data.pipeline import EpochInput

    return EpochInput(spec, spec.parser(default("field_size"), default("feature_size")),
                      batch_size or default("batch_size"), default("shuffle_buffer"), seed=0, cache=cache)


def cached_batches(batches: int = 64, feature_size: int | None = None, batch_size: int | None = None):
    """Generated batches held in memory, repeated: ids spread over the whole table (no input cost)."""
    import numpy as np
    import tensorflow as tf

    batch_size = batch_size or default("batch_size")
    rng = np.random.default_rng(0)
    rows, fields = batches * batch_size, default("field_size")
    ids = rng.integers(0, feature_size or default("feature_size"), (rows, fields))
    values = rng.random((rows, fields), dtype=np.float32)
    labels = (rng.random((rows, 1)) < 0.25).astype(np.float32)
    return (tf.data.Dataset.from_tensor_slices(({"ids": ids, "values": values}, labels))
            .batch(batch_size, drop_remainder=True).cache().repeat())


def local_job_metrics(job, folder: str) -> tuple[int, dict | None]:
    """Run a `trainer local` job in `folder`; (exit code, the chief's metrics.json or None)."""
    from trainer.local import runner
    from trainer.report import read_metrics

    chief_dir, exit_code = runner.run(job, folder)
    return exit_code, None if exit_code else read_metrics(os.path.join(chief_dir, "output", "data"))


def interleaved(cases: dict, rounds: int) -> dict:
    """{name: median of `rounds` calls of cases[name]()}, the cases taking turns."""
    samples = {name: [] for name in cases}
    for _ in range(rounds):
        for name, measure in cases.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}
