"""The daily loop: today's job starts from yesterday's model, through the checkpoint folder it
shares with yesterday's job or through the model channel holding yesterday's model.tar.gz, and
trains its own epochs; a restart of the same job resumes instead (tests/integration/
test_train_local.py, tests/faults/test_process_faults.py); a damaged checkpoint is set aside."""
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time

import pytest

from bounds import within
from conftest import JOB_TIMEOUT_SEC, PROJECT_ROOT, JobRun, local_command, run_local
from trainer.supervision.supervise import END_GRACE_SEC

pytestmark = [pytest.mark.slow, pytest.mark.cores(1)]  # one training process a job, but where a test says otherwise

HP = {"feature_size": 117581, "log_steps": 8, "num_epochs": 1}
STEPS = 32  # an epoch of the DeepFM sample's 8,000 training rows at 256 a batch


def ok(run: JobRun) -> JobRun:
    assert run.exit_code == 0 and run.succeeded, run.log[-3000:]
    return run


def exported_weights(run: JobRun) -> str:
    return re.search(r"exported SavedModel to \S+ \(weights (\w+)\)", run.log).group(1)


def starting_weights(run: JobRun) -> list[str]:
    return re.findall(r"starts from weights (\w+)", run.log)


@pytest.fixture(scope="module")
def yesterday(aws_split, tmp_path_factory):
    """Yesterday's job: one epoch, its checkpoints in a folder of the user's (checkpoint_local_path)."""
    root = tmp_path_factory.mktemp("yesterday")
    return ok(run_local(root / "job", aws_split, HP, checkpoint_local_path=root / "checkpoints")), root / "checkpoints"


def shared_folder(yesterday, tmp_path):
    """The checkpoint folder today's job shares with yesterday's (a copy: each test its own)."""
    first, folder = yesterday
    shutil.copytree(folder, tmp_path / "checkpoints")
    return first, tmp_path / "checkpoints"


def test_a_new_job_continues_from_another_job_s_checkpoint(yesterday, aws_split, tmp_path):
    """Today's job, another name, the same checkpoint folder: it loads yesterday's weights and
    optimizer state, then trains its own epoch from step 0, numbering its checkpoints after
    yesterday's; its first epoch starts where yesterday's model was (a lower loss than
    yesterday's first epoch), and it ends with another model."""
    first, checkpoints = shared_folder(yesterday, tmp_path)
    today = ok(run_local(tmp_path / "job", aws_split, HP, checkpoint_local_path=checkpoints))
    assert today.job_name != first.job_name
    assert re.search(rf"start: warm start .* from checkpoint {checkpoints}/ckpt-{STEPS} \(job {first.job_name}, "
                     r"1 epochs done, step 32\): written by another job", today.log), today.log[-3000:]
    assert f"warm start from checkpoint {checkpoints}/ckpt-{STEPS}" in today.log
    assert starting_weights(today) == [exported_weights(first)]  # exactly yesterday's model
    metrics = today.metrics
    assert metrics["steps"] == STEPS and metrics["epochs"] == 1, metrics  # its own epoch, from step 0
    assert metrics["started_from"] == {"how": "warm_start", "kind": "checkpoint", "path": f"{checkpoints}/ckpt-{STEPS}",
                                       "job": first.job_name}
    assert metrics["history"][0]["train_loss"] < first.metrics["history"][0]["train_loss"], (metrics, first.metrics)
    assert metrics["eval_auc"] != first.metrics["eval_auc"]
    records = {name: json.load(open(checkpoints / name)) for name in os.listdir(checkpoints) if name.endswith(".json")}
    assert records[f"ckpt-{2 * STEPS}.json"]["job"] == today.job_name  # numbered after yesterday's ckpt-32
    assert records[f"ckpt-{STEPS}.json"]["job"] == first.job_name


def model_tar_gz(run: JobRun, folder) -> str:
    """The job's model as SageMaker uploads it: model.tar.gz of its model folder."""
    os.makedirs(folder)
    path = os.path.join(folder, "model.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for name in os.listdir(os.path.join(run.job_dir, "model")):
            tar.add(os.path.join(run.job_dir, "model", name), arcname=name)
    return path


@pytest.mark.line("2.14", "2.21")
@pytest.mark.parametrize("hosts", [1, pytest.param(2, marks=pytest.mark.cores(2))], ids=["one host", "two hosts auto"])
def test_the_model_channel_warm_starts_every_rank_from_yesterday_s_model(yesterday, aws_split, tmp_path, hosts):
    """Today's job gets yesterday's model.tar.gz in its model channel (SDK 2.x model_uri, 3.x an
    InputData named model): the chief loads it, every rank starts from its weights (the same
    weights yesterday's job exported), and today's own model is exported for tomorrow's job."""
    first, _ = yesterday
    archive = model_tar_gz(first, tmp_path / "yesterday-model")
    today = ok(run_local(tmp_path / "job", {**aws_split, "model": archive}, HP, hosts=hosts))
    assert re.search(r"start: warm start .* from model channel \S+/input/data/model/model\.tar\.gz: a new job with a "
                     r"'model' channel", today.log), today.log[-3000:]
    assert re.search(rf"warm start from channel 'model' \(\S+model\.tar\.gz \(1 inside\), job {first.job_name}, "
                     r"1 epochs\): its weights loaded", today.log), today.log[-3000:]
    ranks = starting_weights(today)
    assert len(ranks) >= hosts and set(ranks) == {exported_weights(first)}, ranks
    assert today.metrics["epochs"] == 1 and today.metrics["started_from"]["kind"] == "model", today.metrics
    assert today.metrics["history"][0]["train_loss"] < first.metrics["history"][0]["train_loss"]
    record = json.load(open(os.path.join(today.job_dir, "model", "1", "assets.extra", "trainer-model.json")))
    assert record["job"] == today.job_name and record["model"]["feature_size"] == HP["feature_size"]


def test_a_saved_model_folder_in_the_model_channel_and_init_from_none(yesterday, aws_split, tmp_path):
    """The channel may hold the SavedModel folder itself; init_from=none ignores it."""
    first, _ = yesterday
    folder = os.path.join(first.job_dir, "model")
    today = ok(run_local(tmp_path / "job", {**aws_split, "model": folder}, HP))
    assert starting_weights(today) == [exported_weights(first)]
    fresh = ok(run_local(tmp_path / "fresh", {**aws_split, "model": folder}, {**HP, "init_from": "none"}))
    assert "start: from scratch: init_from=none" in fresh.log and not starting_weights(fresh)
    assert fresh.metrics["started_from"] is None


def damage(prefix: str, how: str) -> None:
    if how == "index cut short":
        path = prefix + ".index"
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 3)
    else:
        path = prefix + ".data-00000-of-00001"
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            f.write(b"\0" * 4096)
            f.truncate(os.path.getsize(path) - 100)


@pytest.mark.parametrize("how", ["index cut short", "data overwritten and cut"])
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_older_one_resumes(aws_split, tmp_path, how):
    hp = {**HP, "num_epochs": 2}
    first = ok(run_local(tmp_path / "job", aws_split, hp))
    checkpoints = tmp_path / "job" / "checkpoints"
    damage(str(checkpoints / f"ckpt-{2 * STEPS}"), how)
    again = ok(run_local(tmp_path / "job", aws_split, {**hp, "num_epochs": 3}))  # the same job, restarted
    assert again.job_name == first.job_name
    assert re.search(rf"cannot read checkpoint {checkpoints}/ckpt-64 \(job {first.job_name}, 2 epochs done, step 64\) "
                     rf"\(.+\); moved to {checkpoints}/set-aside; trying the next", again.log), again.log[-3000:]
    assert f"resumed from {checkpoints}/ckpt-32: 1 epochs and 32 steps done" in again.log
    assert again.metrics["epochs"] == 3 and again.metrics["steps"] == 3 * STEPS
    assert sorted(os.listdir(checkpoints / "set-aside"))[:2] == ["ckpt-64.data-00000-of-00001", "ckpt-64.index"]


def test_no_intact_checkpoint_fails_at_once_naming_each(aws_split, tmp_path, record_fault):
    hp = {**HP, "num_epochs": 2}
    ok(run_local(tmp_path / "job", aws_split, hp))
    checkpoints = tmp_path / "job" / "checkpoints"
    damage(str(checkpoints / f"ckpt-{2 * STEPS}"), "index cut short")
    damage(str(checkpoints / f"ckpt-{STEPS}"), "data overwritten and cut")
    started = time.monotonic()
    again = run_local(tmp_path / "job", aws_split, {**hp, "num_epochs": 3}, timeout=within(END_GRACE_SEC))
    seconds = time.monotonic() - started
    assert again.exit_code == 1
    first_line = again.failure.splitlines()[0]
    assert re.match(rf"no checkpoint or model to start from can be read \(checkpoint folder {checkpoints}\); tried: "
                    rf"{checkpoints}/ckpt-64: .+; {checkpoints}/ckpt-32: .+", first_line), first_line
    record_fault("no intact checkpoint to resume from", first_line, seconds)


def test_a_model_of_another_shape_is_refused_before_training(yesterday, aws_split, tmp_path, record_fault):
    first, checkpoints = shared_folder(yesterday, tmp_path)
    started = time.monotonic()
    today = run_local(tmp_path / "job", aws_split, {**HP, "embedding_size": 4}, checkpoint_local_path=checkpoints)
    seconds = time.monotonic() - started
    assert today.exit_code == 1
    first_line = today.failure.splitlines()[0]
    assert first_line.startswith(f"checkpoint {checkpoints}/ckpt-{STEPS} holds a model of another shape "
                                 "(embedding_size=8 there, 4 here)"), first_line
    assert "epoch=1" not in today.log  # nothing trained
    record_fault("yesterday's model of another shape", first_line, seconds)


def test_a_sigkill_during_a_save_leaves_the_previous_checkpoint_usable(aws_split, tmp_path):
    """A job killed (SIGKILL, nothing can run after it) while it writes its second checkpoint:
    TensorFlow writes a checkpoint beside the others and names it in the folder's state last,
    so the first is intact and the job restarted resumes from it. A large embedding table
    (4M rows) makes the save long enough to be caught in the middle."""
    hp = {**HP, "num_epochs": 2, "feature_size": 4_000_000}
    job_dir, checkpoints = tmp_path / "job", tmp_path / "job" / "checkpoints"
    process = subprocess.Popen(local_command(job_dir, aws_split, hp), cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline, caught = time.monotonic() + JOB_TIMEOUT_SEC, None
    while time.monotonic() < deadline and process.poll() is None:
        names = os.listdir(checkpoints) if checkpoints.exists() else []
        if f"ckpt-{STEPS}.index" in names and any("_temp" in name for name in names):
            os.killpg(process.pid, signal.SIGKILL)
            caught = names
            break
        time.sleep(0.005)
    log = process.communicate()[0]
    assert caught, f"no save of a second checkpoint seen in progress: {names}\n{log[-3000:]}"
    assert process.returncode == -signal.SIGKILL
    assert not (checkpoints / f"ckpt-{2 * STEPS}.index").exists(), os.listdir(checkpoints)
    again = ok(run_local(job_dir, aws_split, hp))
    assert f"resumed from {checkpoints}/ckpt-{STEPS}: 1 epochs and {STEPS} steps done" in again.log, again.log[-3000:]
    assert again.metrics["epochs"] == 2 and again.metrics["steps"] == 2 * STEPS
