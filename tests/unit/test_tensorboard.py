"""TensorBoard's folder and runs: where SageMaker uploads from (the job's
TensorBoardOutputConfig), which runs each process writes (one writer per run), and scalars
read back with TensorBoard's own reader."""
import json
import os

import pytest

from tensorboard_events import runs, series
from trainer.contract.job import tensorboard_dir_of
from trainer.errors import JobError
from trainer.training import tensorboard

# tensorboardoutputconfig.json's content (None: no file) -> the folder
FOLDER_CASES = {
    "no TensorBoardOutputConfig: the SDK's default": (None, "/opt/ml/output/tensorboard"),
    "the job's LocalPath": ({"LocalPath": "/opt/ml/output/tb", "S3OutputPath": "s3://b/tb"}, "/opt/ml/output/tb"),
    "no LocalPath in it: the default": ({"S3OutputPath": "s3://b/tb"}, "/opt/ml/output/tensorboard"),
}


@pytest.mark.parametrize("name", FOLDER_CASES)
def test_the_folder_sagemaker_uploads_from(name, tmp_path):
    content, expected = FOLDER_CASES[name]
    if content is not None:
        (tmp_path / "tensorboardoutputconfig.json").write_text(json.dumps(content))
    assert tensorboard_dir_of(str(tmp_path), "/opt/ml/output") == expected


def test_a_malformed_config_is_named(tmp_path):
    (tmp_path / "tensorboardoutputconfig.json").write_text("[1, 2")
    with pytest.raises(JobError, match="tensorboardoutputconfig.json is not a JSON object with LocalPath"):
        tensorboard_dir_of(str(tmp_path), "/opt/ml/output")


# (rank, chief, several training processes) -> the runs that process writes
RUN_CASES = {
    "one process": ((0, True, False), ("train", "epoch")),
    "the chief of several": ((0, True, True), ("train", "epoch", "rank-0")),
    "another rank": ((3, False, True), ("rank-3",)),
    "a process that trains nothing of its own (a parameter server)": ((1, False, False), ()),
}


@pytest.mark.parametrize("name", RUN_CASES)
def test_which_runs_a_process_writes(name):
    arguments, expected = RUN_CASES[name]
    assert tensorboard.planned_runs(*arguments) == expected


def test_scalars_are_read_back_by_tensorboard(tmp_path):
    written = tensorboard.Runs(str(tmp_path), ("train", "rank-1"))
    for step in (10, 20, 30):
        written.write("train", step, {"loss": 1.0 / step, "learning_rate": None})  # None: not written
    written.write("rank-1", 30, {"samples_per_sec": 1234.5})
    written.write("epoch", 1, {"eval_auc": 0.7})  # not this process's run: nothing
    written.close()
    assert runs(str(tmp_path)) == {"train": 1, "rank-1": 1}
    loss = series(str(tmp_path / "train"), "loss")
    assert [step for step, _ in loss] == [10, 20, 30]
    assert [value for _, value in loss] == pytest.approx([0.1, 0.05, 1 / 30])
    assert series(str(tmp_path / "train"), "learning_rate") == []
    assert series(str(tmp_path / "rank-1"), "samples_per_sec") == [(30, 1234.5)]


def test_the_learning_rate_of_a_schedule_is_its_current_value():
    import tensorflow as tf

    schedule = tf.keras.optimizers.schedules.PiecewiseConstantDecay([5], [0.1, 0.01])
    optimizer = tf.keras.optimizers.Adam(schedule)
    weight = tf.Variable(1.0)
    optimizer.apply_gradients([(tf.constant(1.0), weight)])
    assert tensorboard.current_learning_rate(optimizer) == pytest.approx(0.1)
    for _ in range(10):  # past the boundary at step 5
        optimizer.apply_gradients([(tf.constant(1.0), weight)])
    assert tensorboard.current_learning_rate(optimizer) == pytest.approx(0.01)
    assert tensorboard.current_learning_rate(object()) is None


@pytest.mark.cores(0)
@pytest.mark.slow
def test_a_live_upload_sees_the_scalars_while_the_writer_is_open(tmp_path):
    """SageMaker uploads the folder while the job runs: what is written reaches the file
    within FLUSH_SECONDS even though nothing closes or flushes the writer."""
    import time

    written = tensorboard.Runs(str(tmp_path), ("train",))
    written.write("train", 8, {"loss": 0.5})
    time.sleep(tensorboard.FLUSH_SECONDS + 3)
    assert series(str(tmp_path / "train"), "loss") == [(8, 0.5)]
    written.close()
