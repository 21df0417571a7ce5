"""s3:// paths in a training script, against a real S3 API on this machine (moto's server on
loopback): a script in the style of AWS's parameter-server example saves its checkpoints to
its --model_dir on S3, a second job resumes from them, and both end with exit code 0 (the
S3 filesystem once aborted every process that used it when it exited). The endpoint reaches
TensorFlow the way the SageMaker SDK's local mode gives it to boto3: AWS_ENDPOINT_URL_S3."""
import os
import re

import pytest

from conftest import PROJECT_ROOT, run_local
from mnist_arrays import write_mnist_arrays
from s3_server import CREDENTIALS, S3Server

pytestmark = [pytest.mark.slow, pytest.mark.cores(1)]  # one process at a time
SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts", "aws_style")


@pytest.fixture
def s3(tmp_path):
    server = S3Server(tmp_path / "moto.log")
    yield server
    server.stop()


def test_checkpoints_on_s3_and_a_job_that_resumes_from_them(s3, tmp_path, monkeypatch):
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3.endpoint}.items():
        monkeypatch.setenv(name, value)
    bucket = s3.bucket()
    model_dir = f"s3://{bucket}/jobs/mnist/model"
    data = write_mnist_arrays(tmp_path / "mnist")["data-distributed"]
    hyperparameters = {"sagemaker_program": "ps_checkpoints.py", "sagemaker_submit_directory": SCRIPTS,
                       "model_dir": model_dir, "epochs": 1}
    first = run_local(tmp_path / "first", {"training": data}, hyperparameters)
    assert first.exit_code == 0, first.log[-3000:]
    steps = 10  # 1,000 rows in batches of 100, one epoch
    objects = [key for key in s3.keys(bucket, "jobs/mnist/model/") if not key.endswith("/")]  # not folder markers
    assert objects == [f"jobs/mnist/model/{name}" for name in (
        "checkpoint", f"model.ckpt-{steps}.data-00000-of-00001", f"model.ckpt-{steps}.index")]
    second = run_local(tmp_path / "second", {"training": data}, hyperparameters)
    assert second.exit_code == 0, second.log[-3000:]
    assert re.search(rf"resumed from {re.escape(model_dir)}/model.ckpt-{steps} at step {steps}\b", second.log)
    assert f"jobs/mnist/model/model.ckpt-{2 * steps}.index" in s3.keys(bucket, "jobs/mnist/model/")


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_file_written_as_the_script_ends_reaches_s3(s3, tmp_path, monkeypatch, exit_code):
    """output/intermediate is synced by the training toolkit's uploader; `train` waits for
    its last uploads before it exits, whether the script succeeded or failed."""
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3.endpoint, "TRAINING_JOB_NAME": "last-words"}.items():
        monkeypatch.setenv(name, value)
    bucket = s3.bucket()
    run = run_local(tmp_path / "job", {}, {"sagemaker_program": "writes_intermediate.py",
                                            "sagemaker_submit_directory": os.path.join(PROJECT_ROOT, "tests", "scripts"),
                                            "sagemaker_s3_output": f"s3://{bucket}/output", "exit_code": exit_code})
    assert run.exit_code == exit_code, run.log[-3000:]
    assert f"output/intermediate is uploaded to s3://{bucket}/output" in run.log
    assert "output/intermediate's uploads done" in run.log, run.log[-3000:]
    assert s3.keys(bucket, "output/last-words/output/intermediate/") == [
        "output/last-words/output/intermediate/last-words.bin"]
