"""The CPU image runs real jobs: `train` in a container with the job folder mounted at
/opt/ml (as SageMaker does), File mode, and Pipe mode with 2 Horovod processes reading 2
channels through AWS's PipeModeDataset and through the project's own reader; the
toolkit's own `train` stays reachable."""
import json
import os
import subprocess
import uuid

import pytest

from conftest import IMAGE, remove_containers
from trainer.data.split import split
from trainer.local.runner import LocalJob, PipeFeeder

pytestmark = [pytest.mark.slow, pytest.mark.container]
RUN_TIMEOUT_SEC = 240  # a hang guard (these jobs take well under a minute)


def run_in_container(engine, job_dir, data_dirs, timeout=RUN_TIMEOUT_SEC, image=IMAGE, env=None):
    """`docker run <image> train` with the job folder as /opt/ml and no network; the
    container is removed however the run ends (a hang guard stops only the client)."""
    mounts = [arg for name, value in (env or {}).items() for arg in ("-e", f"{name}={value}")]
    mounts += ["-v", f"{job_dir}:/opt/ml"]
    for folder in data_dirs:  # the job's channel links point here
        mounts += ["-v", f"{folder}:{folder}:ro"]
    name = f"trainer-test-{uuid.uuid4().hex[:8]}"
    command = [engine, "run", "--rm", "--name", name, "--network", "none", "--shm-size", "1g", *mounts, image, "train"]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    finally:
        remove_containers(engine, name)


def metrics_of(job_dir):
    with open(os.path.join(job_dir, "output", "data", "metrics.json")) as f:
        return json.load(f)


@pytest.mark.cores(1)
def test_file_mode_job(image, aws_split, tmp_path):
    job = LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                   {"num_epochs": "2"})
    folder = job.lay_out(str(tmp_path / "job"))["algo-1"]
    done = run_in_container(image, folder, [os.path.dirname(aws_split["training"])])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert os.path.exists(os.path.join(folder, "output", "success"))
    assert os.path.exists(os.path.join(folder, "model", "1", "saved_model.pb"))
    assert metrics_of(folder)["eval_auc"] > 0.65
    # The image's environment defaults (container/environment) reached `train` and its CPU settings.
    assert "KMP_BLOCKTIME=1(environment)" in done.stdout


@pytest.mark.cores(1)
def test_the_toolkit_s_train_stays_reachable(image, aws_split, tmp_path):
    """`train` is this image's; an image that names its own framework module the toolkit's
    way (SAGEMAKER_TRAINING_MODULE) gets the toolkit's `train`, which runs it."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_framework.py").write_text(
        "def main():\n    open('/opt/ml/output/data/toolkit-ran', 'w').write('yes')\n")
    job = LocalJob({"training": [aws_split["training"]]}, {})
    folder = job.lay_out(str(tmp_path / "job"))["algo-1"]
    done = run_in_container(image, folder, [os.path.dirname(aws_split["training"]), str(code)],
                            env={"SAGEMAKER_TRAINING_MODULE": "my_framework:main", "PYTHONPATH": str(code)})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "SAGEMAKER_TRAINING_MODULE=my_framework:main: the SageMaker training toolkit runs the job" in done.stdout
    assert open(os.path.join(folder, "output", "data", "toolkit-ran")).read() == "yes"


@pytest.mark.parametrize("reader, wrapped", [("pipemodedataset", ()), ("project", ("training-1",))],
                         ids=["pipemodedataset", "project, one channel RecordIO-wrapped"])
def test_pipe_mode_two_horovod_processes(image, aws_split, tmp_path, reader, wrapped):
    """Each rank its own channel, read by AWS's PipeModeDataset (the image's choice) or by the
    project's reader, which also unwraps a channel that SageMaker streams RecordIO-wrapped
    (RecordWrapperType=RecordIO): here rank 0's, while rank 1's is plain."""
    halves = [str(tmp_path / "t1.tfrecords"), str(tmp_path / "t2.tfrecords")]
    split(aws_split["training"], [4000, 4000], halves)
    channels = {"training-1": [halves[0]], "training-2": [halves[1]], "evaluation": [aws_split["evaluation"]]}
    job = LocalJob(channels, {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2",
                              "num_epochs": "2", **({"pipe_reader": reader} if reader == "project" else {})},
                   input_mode="Pipe", channel_config=tuple((name, "RecordWrapperType", "RecordIO") for name in wrapped))
    folder = job.lay_out(str(tmp_path / "job"))["algo-1"]
    feeders = [PipeFeeder(os.path.join(folder, "input", "data", name), job.files(name, 0), recordio=name in wrapped)
               for name in job.channels]
    for feeder in feeders:
        feeder.start()
    try:
        done = run_in_container(image, folder, [])
    finally:
        for feeder in feeders:
            feeder.stop()
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert f"Pipe read by {reader}" in log  # auto picks PipeModeDataset in the image
    metrics = metrics_of(folder)
    assert metrics["world_size"] == 2 and metrics["steps"] == 2 * 16 and metrics["eval_auc"] > 0.65


@pytest.mark.cores(1)
def test_what_other_drivers_need_is_in_the_image(image):
    """SageMaker's ModelTrainer runs its own driver instead of `train`: its MPI driver needs
    sshd, ssh, mpirun, paramiko and mpi4py; a script on s3:// needs tensorflow_io; and a
    Python process started outside `train` gets the image's CPU defaults."""
    name = f"trainer-test-{uuid.uuid4().hex[:8]}"
    check = ("import os, shutil, paramiko, mpi4py, tensorflow_io; "
             "print([shutil.which(p) for p in ('sshd', 'ssh', 'mpirun')]); "
             "print(os.environ['KMP_AFFINITY'], os.environ['OMP_NUM_THREADS'], os.environ['TF_NUM_INTRAOP_THREADS'])")
    try:
        done = subprocess.run([image, "run", "--rm", "--name", name, "--network", "none", "--entrypoint", "python3",
                               IMAGE, "-c", check], capture_output=True, text=True, timeout=RUN_TIMEOUT_SEC)
    finally:
        remove_containers(image, name)
    assert done.returncode == 0, done.stderr[-3000:]
    executables, settings = done.stdout.strip().splitlines()[-2:]
    assert "None" not in executables, executables
    affinity, omp, intra = settings.split()
    assert affinity == ("disabled" if int(omp) == 1 else "granularity=fine,compact,1,0") and int(intra) >= 1
