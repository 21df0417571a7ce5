"""`train` end to end through `trainer local`: real TensorFlow, real files and FIFOs."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import PROJECT_ROOT, run_local
from tensorboard_events import runs, series
from trainer.cpu.settings import bfloat16_supported
from trainer.local.runner import LocalJob
from trainer.report import METRIC_DEFINITIONS

pytestmark = [pytest.mark.slow, pytest.mark.cores(1)]  # one training process at a time


def check_saved_model(export_dir, field_size=39):
    assert os.path.exists(os.path.join(export_dir, "saved_model.pb"))
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    ids = tf.constant(np.arange(2 * field_size).reshape(2, field_size), tf.int64)
    out = serving(ids=ids, values=tf.ones((2, field_size)))
    probability = next(iter(out.values())).numpy()
    assert probability.shape == (2, 1) and np.all((probability > 0) & (probability < 1))


@pytest.fixture(scope="module")
def file_and_pipe_runs(aws_split, tmp_path_factory):
    """The DeepFM sample's data, 8,000/2,000, 3 epochs, default hyperparameters, priced as
    one ml.c5.2xlarge."""
    hp = {"feature_size": 117581, "log_steps": 8}
    return {mode: run_local(tmp_path_factory.mktemp(mode), aws_split, hp, input_mode=mode,
                            instance_type="ml.c5.2xlarge") for mode in ("File", "Pipe")}


@pytest.mark.line("2.14", "2.21")
@pytest.mark.parametrize("mode", ["File", "Pipe"])
def test_trains_evaluates_and_exports(file_and_pipe_runs, mode):
    run = file_and_pipe_runs[mode]
    assert run.exit_code == 0 and run.succeeded and run.failure is None, run.log[-3000:]
    metrics = run.metrics
    assert metrics["eval_auc"] >= 0.70, metrics
    assert 0 < metrics["eval_logloss"] < 0.6
    assert metrics["epochs"] == 3 and metrics["steps"] == 3 * 32  # 8,000 / 256 per epoch
    assert metrics["train_samples_per_sec"] > 0
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert os.listdir(os.path.join(run.job_dir, "checkpoints"))


def assert_tensorboard_curves(root: str, epochs: int, history: list) -> None:
    """The chief's runs, read back with TensorBoard's reader: the loss, the job's samples/sec
    and the learning rate by step; the evaluation by epoch, as the job's metrics say."""
    loss = series(os.path.join(root, "train"), "loss")
    steps = [step for step, _ in loss]
    assert len(loss) >= epochs and steps == sorted(set(steps)) and all(0 < value < 5 for _, value in loss), loss
    assert all(rate > 0 for _, rate in series(os.path.join(root, "train"), "samples_per_sec"))
    assert all(rate > 0 for _, rate in series(os.path.join(root, "train"), "learning_rate"))
    auc = series(os.path.join(root, "epoch"), "eval_auc")
    assert [epoch for epoch, _ in auc] == list(range(1, epochs + 1))
    assert [round(value, 5) for _, value in auc] == [round(h["eval_auc"], 5) for h in history]
    assert [epoch for epoch, _ in series(os.path.join(root, "epoch"), "loss")] == list(range(1, epochs + 1))


def test_tensorboard_curves_where_sagemaker_uploads_them(file_and_pipe_runs):
    run = file_and_pipe_runs["File"]
    root = os.path.join(run.job_dir, "output", "tensorboard")
    assert runs(root) == {"train": 1, "epoch": 1}  # one process: no rank runs; one writer per run
    assert_tensorboard_curves(root, 3, run.metrics["history"])
    assert "TensorBoard, live: tensorboard --logdir" in run.log


def test_file_and_pipe_mode_agree(file_and_pipe_runs):
    auc = {mode: run.metrics["eval_auc"] for mode, run in file_and_pipe_runs.items()}
    assert abs(auc["File"] - auc["Pipe"]) <= 0.01, auc


def test_log_lines_match_the_metric_definitions(file_and_pipe_runs):
    log = file_and_pipe_runs["File"].log
    for definition in METRIC_DEFINITIONS:
        values = re.findall(definition["Regex"], log)
        assert values, definition
        assert all(float(v) >= 0 for v in values)
    metrics = file_and_pipe_runs["File"].metrics
    assert metrics["price_per_hour"] == 0.408 and "built-in table" in metrics["price_source"]
    expected = metrics["train_samples_per_sec"] * 3600 / 0.408  # samples/sec is rounded to 0.1 in the file
    assert abs(metrics["samples_per_dollar"] - expected) <= 0.05 * 3600 / 0.408 + 1
    assert re.search(r"CPU settings: intra_op_threads=\d+\(\w+\) inter_op_threads=\d+\(\w+\) OMP_NUM_THREADS=\d+"
                     r"\(\w+\) KMP_AFFINITY=\S+ KMP_BLOCKTIME=\d+\(\w+\)", log)


# input mode -> how each channel's file is named and its settings (SageMaker's TrainingInput).
# Training and evaluation read differently in each job: a channel read wrong shows in the
# steps (training) or the AUC (evaluation).
COMPRESSED_AND_WRAPPED = {
    "File: training .gz files, evaluation CompressionType Gzip": ("File", {
        "training": ("{}.tfrecord.gz", ()), "evaluation": ("{}-part-0", ("CompressionType=Gzip",))}),
    "Pipe: training CompressionType Gzip (streamed decompressed), evaluation RecordWrapperType RecordIO": ("Pipe", {
        "training": ("{}.tfrecord.gz", ("CompressionType=Gzip",)), "evaluation": ("{}.tfrecord", ("RecordWrapperType=RecordIO",))}),
}


@pytest.mark.parametrize("case", COMPRESSED_AND_WRAPPED)
def test_gzip_and_recordio_channels(aws_split, tmp_path, case):
    """Gzip TFRecords in File mode (by CompressionType or the .gz suffix) and in Pipe mode
    (SageMaker streams them decompressed), and a Pipe channel whose objects SageMaker wraps
    in RecordIO records: the same job, the same steps and model quality."""
    import gzip

    input_mode, layouts = COMPRESSED_AND_WRAPPED[case]
    channels, config = {}, []
    for channel, (name, settings) in layouts.items():
        data = open(aws_split[channel], "rb").read()
        path = tmp_path / "data" / channel / name.format(channel)
        path.parent.mkdir(parents=True)
        compressed = name.endswith(".gz") or "CompressionType=Gzip" in settings
        path.write_bytes(gzip.compress(data, compresslevel=1) if compressed else data)
        channels[channel] = str(path.parent)
        config += [f"{channel}:{setting}" for setting in settings]
    run = run_local(tmp_path / "job", channels, {"num_epochs": 1}, input_mode=input_mode, channel_config=config)
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["steps"] == 32 and run.metrics["eval_auc"] > 0.65, run.metrics


@pytest.mark.parametrize("local_path", [False, True], ids=["opt-ml-checkpoints", "checkpointconfig-local-path"])
def test_resumes_from_its_checkpoint(file_and_pipe_runs, aws_split, tmp_path, local_path):
    """From /opt/ml/checkpoints, or from the LocalPath of the job's checkpointconfig.json
    (the SDK's checkpoint_local_path), which `trainer plan` shows: the checkpoints of the
    3-epoch File-mode job above, copied there, and that job restarted (its name) for 4 epochs."""
    checkpoints = tmp_path / "spot-checkpoints" if local_path else tmp_path / "job" / "checkpoints"
    shutil.copytree(os.path.join(file_and_pipe_runs["File"].job_dir, "checkpoints"), checkpoints)
    where = {"checkpoint_local_path": checkpoints} if local_path else {}
    hp = {"feature_size": 117581, "log_steps": 8, "num_epochs": 4}
    if local_path:
        LocalJob({name: [path] for name, path in aws_split.items()}, {k: str(v) for k, v in hp.items()},
                 checkpoint_local_path=str(checkpoints)).lay_out(str(tmp_path / "job"))
        plan = subprocess.run([sys.executable, "-m", "trainer", "plan", "--job-dir", str(tmp_path / "job")],
                              capture_output=True, text=True, cwd=PROJECT_ROOT)
        assert json.loads(plan.stdout)["folders"]["checkpoints"] == str(checkpoints), plan.stdout + plan.stderr
    resumed = run_local(tmp_path / "job", aws_split, hp, job_name=file_and_pipe_runs["File"].job_name, **where)
    assert resumed.exit_code == 0, resumed.log[-3000:]
    assert f"resumed from {checkpoints}" in resumed.log and "3 epochs and 96 steps done" in resumed.log
    assert resumed.metrics["steps"] == 128 and resumed.metrics["epochs"] == 4
    assert resumed.metrics["resumed_from_epoch"] == 3
    assert [h["epoch"] for h in resumed.metrics["history"]] == [4]
    if local_path:
        assert not os.listdir(tmp_path / "job" / "checkpoints")


@pytest.mark.parametrize("switches", [
    {"mixed_precision": "mixed_bfloat16", "profile_steps": "5,8"},
    {"mixed_precision": "mixed_float16", "jit_compile": "true"},
], ids=["bfloat16-profiled", "float16-xla"])
def test_speed_switches_train_and_export(aws_split, tmp_path, switches):
    run = run_local(tmp_path, aws_split, {"num_epochs": 2, **switches})
    if switches["mixed_precision"] == "mixed_bfloat16" and not bfloat16_supported():
        assert run.exit_code == 1 and run.failure.startswith(
            "hyperparameter 'mixed_precision': mixed_bfloat16 needs a CPU with AVX-512"), run.log[-3000:]
        return  # this CPU has no AVX-512: the job must fail first, saying so (asserted), not train
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["eval_auc"] > 0.65 and run.metrics["steps"] == 2 * 32
    assert f"mixed precision: {switches['mixed_precision']}" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))  # serves float32 probabilities
    if "profile_steps" in switches:
        traces = glob.glob(os.path.join(run.job_dir, "output", "tensorboard", "profile", "**", "*.xplane.pb"),
                           recursive=True)
        assert traces, "no profiler trace under output/tensorboard/profile"


@pytest.mark.parametrize("mode", ["File", "Pipe"])
def test_libsvm_channels(criteo_libsvm, tmp_path, mode):
    run = run_local(tmp_path, {"training": criteo_libsvm, "evaluation": criteo_libsvm[-1]},
                    {"batch_size": 32, "num_epochs": 2}, input_mode=mode)
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["steps"] == 2 * 7  # 200 rows / 32, last batch partial
    assert "libsvm" in run.log


USER_MODULE = '''
import tensorflow as tf

def model_fn(hp):
    """Logistic regression on the DeepFM layout: a user's own Keras model."""
    ids = tf.keras.Input((hp["field_size"],), dtype=tf.int64, name="ids")
    values = tf.keras.Input((hp["field_size"],), name="values")
    weights = tf.keras.layers.Embedding(hp["feature_size"], 1, name="weights")(ids)[:, :, 0]
    logit = tf.reduce_sum(weights * values, axis=1, keepdims=True) + float(hp["bias"])
    return tf.keras.Model({"ids": ids, "values": values}, tf.keras.layers.Activation("sigmoid")(logit))

def optimizer_fn(hp):
    return tf.keras.optimizers.legacy.Adagrad(0.1)
'''


def test_user_module_replaces_the_model(aws_split, tmp_path):
    module = tmp_path / "my_model.py"
    module.write_text(USER_MODULE)
    run = run_local(tmp_path / "job", aws_split, {"user_module": str(module), "bias": "-1.0", "num_epochs": 2,
                                                  "log_steps": 8})
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["model"] == "my_model" and run.metrics["eval_auc"] > 0.6
    assert_tensorboard_curves(os.path.join(run.job_dir, "output", "tensorboard"), 2, run.metrics["history"])
    assert "user module my_model provides: model_fn, optimizer_fn" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))


def test_script_mode_program_from_its_submit_directory(aws_split, tmp_path):
    """What the SDK's TensorFlow estimator sends: sagemaker_program, sagemaker_submit_directory,
    model_dir, and the script's own hyperparameters."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_model.py").write_text(USER_MODULE)
    run = run_local(tmp_path / "job", aws_split, {
        "sagemaker_program": "my_model.py", "sagemaker_submit_directory": str(code),
        "model_dir": "s3://bucket/job/model", "bias": "-1.0", "num_epochs": 1})
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["model"] == "my_model"


def test_tune_threads_measures_settings_then_trains(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, {"num_epochs": 1, "tune_threads": "true", "tune_seconds": 10})
    assert run.exit_code == 0, run.log[-3000:]
    assert re.search(r"tune_threads: \d+ settings measured in \d+ s", run.log)
    assert run.metrics["steps"] == 32
