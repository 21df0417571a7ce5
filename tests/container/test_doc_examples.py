"""Every SageMaker SDK example of README.md and docs/ runs as written, in the
image: through the SDK's local mode where it has what the example uses, else (Pipe mode,
checkpoint_s3_uri) the same job, with the settings the SDK would hand the container,
through `trainer local`; and each metric definition of an example finds its figures in the
job's log. The other Python blocks (a hooks module, a training script) run as the files
they are. A Python block of those pages that no test here runs fails the suite."""
from __future__ import annotations

import os
import pathlib
import re
import shutil

import pytest

from conftest import PROJECT_ROOT, run_local
from sdk_jobs import (ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC, every_host_succeeded, model_trainer_root,
                      saved_model_members, sdk_job)
from sdk_jobs import sdk3_path, sdk_path  # noqa: F401
from conftest import IMAGE, IMAGE_2_21
from mnist_arrays import write_mnist_arrays

pytestmark = [pytest.mark.slow, pytest.mark.container]
ROOT = pathlib.Path(PROJECT_ROOT)


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)


def block(page: str, starts: str) -> str:
    found = [code for code in python_blocks(page) if code.startswith(starts)]
    assert len(found) == 1, f"{page}: {len(found)} Python blocks start with {starts!r}"
    return found[0]


PAGES = ["README.md"] + sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))
MODEL_TRAINER = "from sagemaker.train import ModelTrainer\nfrom sagemaker.train.configs import Compute, InputData"
DAILY, ESTIMATOR = "docs/daily-retraining.md", "from sagemaker.estimator import Estimator\n"
# (page, how the block starts) -> the test that runs it
RUN_BY = {
    ("README.md", MODEL_TRAINER + "\n"): "test_the_model_trainer_algorithm_examples",
    ("README.md", MODEL_TRAINER + ", SourceCode\n"): "test_the_readme_model_trainer_script_example",
    ("docs/first-job.md", MODEL_TRAINER + "\n"): "test_the_model_trainer_algorithm_examples",
    ("docs/your-model.md", MODEL_TRAINER + ", SourceCode\nfrom sagemaker.train.distributed import MPI"):
        "test_the_model_trainer_hooks_example",
    ("docs/your-script.md", MODEL_TRAINER + ", SourceCode\n\n"): "test_the_model_trainer_multi_worker_mirrored_example",
    ("README.md", "from sagemaker.tensorflow import TensorFlow"): "test_the_readme_script_example",
    ("docs/first-job.md", "from sagemaker.debugger import TensorBoardOutputConfig"): "test_the_algorithm_example",
    ("docs/your-model.md", "# my_model.py"): "test_the_hooks_example",
    ("docs/your-model.md", "from sagemaker.tensorflow import TensorFlow"): "test_the_hooks_example",
    ("docs/your-script.md", "# train.py"): "tests/integration/test_scripts.py::test_the_documented_kit_script",
    ("docs/distribution.md", "from sagemaker.estimator import Estimator\nfrom sagemaker.instance_group import"):
        "tests/container/test_data_groups_in_containers.py::test_the_documented_heterogeneous_job",
    (DAILY, MODEL_TRAINER + "\n"): "test_the_daily_model_trainer_example",
    (DAILY, ESTIMATOR + "\nyesterday"): "test_the_daily_model_uri_example",
    (DAILY, ESTIMATOR + "\ncheckpoints"): "test_the_daily_checkpoint_example",
}


@pytest.mark.cores(0)
def test_every_python_example_is_run():
    for page in PAGES:
        for code in python_blocks(page):
            runners = [name for (where, starts), name in RUN_BY.items() if where == page and code.startswith(starts)]
            assert runners, f"{page}: no test runs the example starting {code.splitlines()[0]!r}"
    for name in RUN_BY.values():  # a test of another module: it exists
        path, _, function = name.rpartition("::")
        assert not path or f"def {function}(" in (ROOT / path).read_text(), name


@pytest.fixture(scope="module")
def bucket(aws_split, tmp_path_factory):
    """s3://bucket/ of the examples, as a folder: their channels hold the sample's records."""
    folder = tmp_path_factory.mktemp("bucket")
    for prefix in ("deepfm/", ""):
        for channel, name in (("training", "train"), ("evaluation", "eval")):
            os.makedirs(folder / f"{prefix}{name}")
            shutil.copy(aws_split[channel], folder / f"{prefix}{name}" / f"{name}.tfrecords")
    return folder


def run_example(sdk_path, tmp_path, bucket, code: str, timeout: float, then_fit=None):
    return sdk_job(sdk_path, tmp_path, {"code": code, "bucket": str(bucket), "then_fit": then_fit}, timeout,
                   driver="run_doc_example.py")


def run_with_trainer_local(settings: dict, job_dir) -> str:
    """The job an example describes, through `trainer local` in the image's place; its log."""
    channels = {name: value["path"] for name, value in settings["channels"].items()}
    run = run_local(job_dir, channels, settings["hyperparameters"], settings["input_mode"], TWO_HOST_TIMEOUT_SEC,
                    settings["instance_count"], settings["instance_type"])
    assert run.exit_code == 0 and run.succeeded, run.log[-4000:]
    return run.log


def assert_metrics_found(definitions: list[dict], log: str) -> None:
    for definition in definitions:
        values = re.findall(definition["Regex"], log)
        assert values and all(float(v) >= 0 for v in values), definition


@pytest.mark.cores(1)
def test_the_algorithm_example(sdk_path, tmp_path, bucket):
    """One host in File mode with TrainingInputs and a checkpoint URI (not in local mode:
    through `trainer local`); TensorBoard's scalars where SageMaker uploads them."""
    code = block("docs/first-job.md", "from sagemaker.debugger import TensorBoardOutputConfig")
    result, log, _ = run_example(sdk_path, tmp_path, bucket, code, ONE_HOST_TIMEOUT_SEC)
    settings = result.get("trainer_local")
    assert settings and settings["lacks"] == ["checkpoint_s3_uri"], (result, log[-3000:])
    assert settings["channels"]["training"]["content_type"] == "application/x-tfrecord"
    assert settings["hyperparameters"]["optimizer"] == "Adam" and settings["hyperparameters"]["deep_layers"] == "256,128,64"
    job_log = run_with_trainer_local(settings, tmp_path / "job")
    assert_metrics_found(settings["metric_definitions"], job_log)
    assert os.listdir(tmp_path / "job" / "output" / "tensorboard")


def test_the_readme_script_example(sdk_path, tmp_path, bucket):
    """A Horovod script (src/train.py) on 2 hosts x 2 ranks, through the SDK's local mode."""
    source = tmp_path / "src"
    shutil.copytree(os.path.join(PROJECT_ROOT, "tests", "scripts"), source)
    shutil.copy(source / "hvd_train.py", source / "train.py")
    code = block("README.md", "from sagemaker.tensorflow import TensorFlow")
    then_fit = {"training": "s3://bucket/train/", "evaluation": "s3://bucket/eval/"}
    result, log, _ = run_example(sdk_path, tmp_path, bucket, code, TWO_HOST_TIMEOUT_SEC, then_fit)
    every_host_succeeded(result, log)
    assert "Epoch 3/3" in log, log[-3000:]  # the example's hyperparameters reached the script
    assert any(name.endswith("saved_model.pb") for name in saved_model_members(result["model_data"]))


def test_the_hooks_example(sdk_path, tmp_path, bucket):
    """my_model.py as the docs show it, trained by the container with Horovod on 2 hosts x 2
    ranks (the training toolkit's MPI runner and sshd in every container), through the SDK's
    local mode."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "my_model.py").write_text(block("docs/your-model.md", "# my_model.py"))
    code = block("docs/your-model.md", "from sagemaker.tensorflow import TensorFlow")
    result, log, _ = run_example(sdk_path, tmp_path, bucket, code, TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "entry point: hooks my_model.py" in log and "distribution: horovod" in log, log[-3000:]
    assert "user module my_model provides: model_fn, parse_fn, optimizer_fn" in log, log[-3000:]
    # 4 ranks over 8,000 records: 2,000 each, 8 steps of 256 an epoch
    assert "world size 4" in log and "epoch=1 steps=8 " in log, log[-3000:]
    assert any(name.endswith("saved_model.pb") for name in saved_model_members(result["model_data"]))


def run_model_trainer_example(sdk3_path, tmp_path, bucket, code: str, image: str, timeout: float):
    """A ModelTrainer example of the docs through SDK 3.x's local-container mode, in `tmp_path`
    (its `src/`), on `image` (which the test's fixtures built)."""
    return sdk_job(sdk3_path, tmp_path, {"code": code, "image": image, "bucket": str(bucket),
                                         "root": str(model_trainer_root(tmp_path))}, timeout,
                   driver="run_model_trainer_example.py")


# page -> what its ModelTrainer algorithm example runs: 2 hosts (auto's local SGD, over eth0
# where local mode names ethwe) or 1 (one process)
ALGORITHM_EXAMPLES = {"README.md": ("local_sgd (2 CPU hosts, the built-in DeepFM", TWO_HOST_TIMEOUT_SEC),
                      "docs/first-job.md": ("single (1 CPU host", ONE_HOST_TIMEOUT_SEC)}


@pytest.mark.cores(2)
@pytest.mark.parametrize("page", ALGORITHM_EXAMPLES)
def test_the_model_trainer_algorithm_examples(image_2_21, sdk3_path, tmp_path, bucket, page):
    """The built-in model with no code, the image and hyperparameters only, on the 2.21 image."""
    distribution, timeout = ALGORITHM_EXAMPLES[page]
    code = block(page, MODEL_TRAINER + "\n")
    result, log, _ = run_model_trainer_example(sdk3_path, tmp_path, bucket, code, IMAGE_2_21, timeout)
    every_host_succeeded(result, log)
    assert f"distribution: {distribution}" in log and "epoch=3 " in log, log[-3000:]
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(2)
def test_the_readme_model_trainer_script_example(image, sdk3_path, tmp_path, bucket):
    """A Horovod script (src/train.py) with distributed=MPI(process_count_per_node=2) on 2
    hosts: 4 ranks, 2 on each host, run by the image's train."""
    source = tmp_path / "src"
    shutil.copytree(os.path.join(PROJECT_ROOT, "tests", "scripts"), source)
    shutil.copy(source / "hvd_train.py", source / "train.py")
    code = block("README.md", MODEL_TRAINER + ", SourceCode\n")
    result, log, _ = run_model_trainer_example(sdk3_path, tmp_path, bucket, code, IMAGE, TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "--host algo-1:2,algo-2:2" in log and "Epoch 3/3" in log, log[-3000:]
    assert any(name.endswith("saved_model.pb") for name in saved_model_members(result["model_data"]))


@pytest.mark.cores(2)
def test_the_model_trainer_hooks_example(image, sdk3_path, tmp_path, bucket):
    """my_model.py as the docs show it, as SourceCode's entry script: trained by the container
    with Horovod, 2 hosts x 2 ranks."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "my_model.py").write_text(block("docs/your-model.md", "# my_model.py"))
    code = block("docs/your-model.md", MODEL_TRAINER + ", SourceCode\nfrom sagemaker.train.distributed import MPI")
    result, log, _ = run_model_trainer_example(sdk3_path, tmp_path, bucket, code, IMAGE, TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "entry point: hooks my_model.py" in log and "distribution: horovod" in log, log[-3000:]
    assert "world size 4" in log and "epoch=3 " in log, log[-3000:]
    assert any(name.endswith("saved_model.pb") for name in saved_model_members(result["model_data"]))


@pytest.mark.cores(2)
def test_the_model_trainer_multi_worker_mirrored_example(image_2_21, sdk3_path, tmp_path, bucket):
    """A Keras 3 script (src/train.py: tests/scripts/aws_style/mnist_keras3.py) on 2 hosts,
    with the TF_CONFIG `train` writes."""
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(os.path.join(PROJECT_ROOT, "tests", "scripts", "aws_style", "mnist_keras3.py"), source / "train.py")
    arrays = write_mnist_arrays(tmp_path / "mnist")["data"]
    shutil.copytree(arrays, bucket / "mnist", dirs_exist_ok=True)  # s3://bucket/mnist/
    code = block("docs/your-script.md", MODEL_TRAINER + ", SourceCode\n\n")
    result, log, _ = run_model_trainer_example(sdk3_path, tmp_path, bucket, code, IMAGE_2_21,
                                               TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: multi_worker_mirrored" in log and log.count("epoch 2: loss=") == 2, log[-3000:]
    assert '"environment": "cloud"' in log, log[-3000:]


# --- docs/daily-retraining.md: each example run on two days, the second starting from the first

DAYS = ("2026-12-06", "2026-12-07")


@pytest.fixture
def daily_bucket(aws_split, tmp_path):
    """s3://bucket/ of the daily examples: each day's click logs (the sample's records) and, once
    the first day's job has run, its model."""
    folder = tmp_path / "bucket"
    for day in DAYS:
        for channel, name in (("training", "train"), ("evaluation", "eval")):
            os.makedirs(folder / "clicks" / day / name)
            shutil.copy(aws_split[channel], folder / "clicks" / day / name / f"{name}.tfrecords")
    return folder


def yesterday_s_job(code: str, model_line: str) -> str:
    """The example as the first day's job: its own day's logs, no model to start from."""
    first, found = re.subn(model_line, "", code.replace(DAYS[1], DAYS[0]))
    assert found == 1, f"no {model_line!r} in the example:\n{code}"
    return first


def keep_as_yesterday_s_model(model_data: str, bucket) -> None:
    os.makedirs(bucket / "models" / DAYS[0])
    shutil.copy(model_data[len("file://"):], bucket / "models" / DAYS[0] / "model.tar.gz")


def assert_warm_started_from(log: str, yesterday_log: str, source: str) -> None:
    """Today's job started from yesterday's exported weights and trained its own epoch."""
    assert re.search(rf"start: warm start .* from {source}", log), log[-4000:]
    exported = re.search(r"exported SavedModel to \S+ \(weights (\w+)\)", yesterday_log).group(1)
    assert re.findall(r"starts from weights (\w+)", log) == [exported], log[-4000:]
    assert "epoch=1 " in log, log[-4000:]


def yesterday_then_today(tmp_path, bucket, code: str, model_line: str, run_day) -> list[str]:
    """The example run as yesterday's job (its model kept in the bucket), then as written; their
    logs. `run_day(folder, example)`: (result, log) of one job."""
    logs = []
    for day, example in zip(DAYS, (yesterday_s_job(code, model_line), code)):
        os.makedirs(tmp_path / day)
        result, log = run_day(tmp_path / day, example)
        every_host_succeeded(result, log)
        logs.append(log)
        if day == DAYS[0]:
            keep_as_yesterday_s_model(result["model_data"], bucket)
    return logs


@pytest.mark.cores(1)
def test_the_daily_model_trainer_example(image_2_21, sdk3_path, tmp_path, daily_bucket):
    """SDK 3.x: today's ModelTrainer job gets yesterday's model.tar.gz as InputData "model"."""
    yesterday, today = yesterday_then_today(
        tmp_path, daily_bucket, block(DAILY, MODEL_TRAINER + "\n"), r"\n *InputData\(channel_name=\"model\".*",
        lambda folder, example: run_model_trainer_example(sdk3_path, folder, daily_bucket, example, IMAGE_2_21,
                                                          ONE_HOST_TIMEOUT_SEC)[:2])
    assert_warm_started_from(today, yesterday, r"model channel /opt/ml/input/data/model/model\.tar\.gz")


@pytest.mark.cores(1)
def test_the_daily_model_uri_example(sdk_path, tmp_path, daily_bucket):
    """SDK 2.x: model_uri= with model_channel_name="model", through the SDK's local mode."""
    yesterday, today = yesterday_then_today(
        tmp_path, daily_bucket, block(DAILY, ESTIMATOR + "\nyesterday"),
        r",\s*model_uri=yesterday, model_channel_name=\"model\"",
        lambda folder, example: run_example(sdk_path, folder, daily_bucket, example, ONE_HOST_TIMEOUT_SEC)[:2])
    assert_warm_started_from(today, yesterday, r"model channel /opt/ml/input/data/model/model\.tar\.gz")


@pytest.mark.cores(1)
def test_the_daily_checkpoint_example(sdk_path, tmp_path, daily_bucket):
    """SDK 2.x: the same checkpoint_s3_uri every day (not in local mode: through `trainer local`,
    one checkpoint folder in the URI's place, as SageMaker syncs it into every day's job)."""
    code = block(DAILY, ESTIMATOR + "\ncheckpoints")
    checkpoints, days = tmp_path / "checkpoints", []
    for day in DAYS:
        os.makedirs(tmp_path / day)
        result, log, _ = run_example(sdk_path, tmp_path / day, daily_bucket, code.replace(DAYS[1], day),
                                     ONE_HOST_TIMEOUT_SEC)
        settings = result.get("trainer_local")
        assert settings and settings["lacks"] == ["checkpoint_s3_uri"], (result, log[-3000:])
        assert settings["channels"]["training"]["path"].endswith(f"/clicks/{day}/train/"), settings
        run = run_local(tmp_path / day / "job", {name: value["path"] for name, value in settings["channels"].items()},
                        settings["hyperparameters"], settings["input_mode"], ONE_HOST_TIMEOUT_SEC,
                        checkpoint_local_path=checkpoints)
        assert run.exit_code == 0 and run.succeeded, run.log[-4000:]
        days.append(run.log)
    assert_warm_started_from(days[1], days[0], rf"checkpoint {checkpoints}/ckpt-\d+ \(job trainer-local-")
