"""What training starts from (trainer.plan.start), and the checkpoint folder and model channel
it reads (trainer.contract.checkpoint_folder, trainer.contract.model_channel)."""
import io
import json
import os
import tarfile

import pytest

from trainer.contract import checkpoint_folder as folder
from trainer.contract.checkpoint_folder import CheckpointRecord, checkpoints_in
from trainer.contract.job import Channel
from trainer.contract.model_channel import RECORD, find_model, unpacked
from trainer.errors import JobError
from trainer.plan.start import Source, choose_start, refuse_another_shape


def record(number, job, epoch=1, step=None):
    return CheckpointRecord(f"/ckpt/ckpt-{number}", number, job, epoch, 0, number if step is None else step)


MODEL = Source("model", "/opt/ml/input/data/model/model.tar.gz", resume=False, job="day-1", epoch=1)
A64, A32, B96 = record(64, "job-a", 2), record(32, "job-a", 1), record(96, "job-b", 1, 32)


@pytest.mark.parametrize("checkpoints, job, init_from, model, how, paths, why", [
    # a restart resumes its own newest, then its older ones
    ((A64, A32), "job-a", "auto", None, "resume", ["/ckpt/ckpt-64", "/ckpt/ckpt-32"], "a restart of job job-a"),
    # a restart resumes even where it was told to start from a model: the model is its fallback
    ((A64,), "job-a", "model", MODEL, "resume", ["/ckpt/ckpt-64", MODEL.path], "a restart of job job-a"),
    ((A64,), "job-a", "none", None, "resume", ["/ckpt/ckpt-64"], "a restart"),
    # a new job beside another job's checkpoints: warm start from the newest, then the older
    ((A64, A32), "job-b", "auto", None, "warm_start", ["/ckpt/ckpt-64", "/ckpt/ckpt-32"], "written by another job"),
    ((A64,), "job-b", "checkpoint", MODEL, "warm_start", ["/ckpt/ckpt-64"], "written by another job"),
    # the model channel comes first for a new job (auto), or alone (model)
    ((A64,), "job-b", "auto", MODEL, "warm_start", [MODEL.path], "a new job with a 'model' channel"),
    ((A64,), "job-b", "model", MODEL, "warm_start", [MODEL.path], "init_from=model"),
    ((), "job-b", "auto", MODEL, "warm_start", [MODEL.path], "'model' channel"),
    # a restart of a warm-started job whose own checkpoint is its only one: then the other job's
    ((B96, A64), "job-b", "auto", None, "resume", ["/ckpt/ckpt-96", "/ckpt/ckpt-64"], "a restart of job job-b"),
    # nothing to start from, or told to start from nothing
    ((), "job-b", "auto", None, "fresh", [], "no checkpoint in /ckpt and no 'model' channel"),
    ((), "job-b", "checkpoint", None, "fresh", [], "no checkpoint in /ckpt"),
    ((), "job-b", "checkpoint", MODEL, "fresh", [], "the 'model' channel is not used (init_from=checkpoint)"),
    ((A64,), "job-b", "none", MODEL, "fresh", [], "init_from=none; the checkpoints of another job in /ckpt"),
    # a checkpoint without a record, or a job without a name: resumed, as before
    ((CheckpointRecord("/ckpt/ckpt-5", 5),), "job-b", "auto", None, "resume", ["/ckpt/ckpt-5"],
     "the checkpoint does not record its job"),
    ((A64,), None, "auto", MODEL, "resume", ["/ckpt/ckpt-64", MODEL.path], "the job has no name"),
])
def test_what_training_starts_from(checkpoints, job, init_from, model, how, paths, why):
    start = choose_start(checkpoints, job, init_from, model, "/ckpt")
    assert start.how == how
    assert [s.path for s in start.sources] == paths
    assert why in start.why, start.why
    # a job's own checkpoints resume; anything else starts this job's epochs from step 0
    assert [s.resume for s in start.sources] == [s.kind == "checkpoint" and (job is None or s.job in (job, None))
                                                 for s in start.sources]
    assert start.describe()


def test_init_from_model_without_the_channel_is_refused():
    with pytest.raises(JobError, match="hyperparameter 'init_from' is model, but the job has no channel 'prior'"):
        choose_start((A64,), "job-b", "model", None, "/ckpt", model_channel="prior")


def test_what_the_plan_says():
    start = choose_start((A64, A32), "job-b", "auto", None, "/ckpt")
    assert start.describe() == (
        "warm start (weights, then this job's own epochs from step 0) from checkpoint /ckpt/ckpt-64 (job job-a, "
        "2 epochs done, step 64): written by another job; this one is job-b: its weights start this job, which "
        "trains its own epochs (init_from=auto; none: from scratch); if it cannot be read: /ckpt/ckpt-32")


SHAPE = {"feature_size": 1000, "field_size": 39, "embedding_size": 8, "deep_layers": [64, 32]}


@pytest.mark.parametrize("there, message", [
    ({**SHAPE, "feature_size": 2000}, "feature_size=2000 there, 1000 here"),
    ({**SHAPE, "field_size": 13, "embedding_size": 4},
     "field_size=13 there, 39 here; embedding_size=4 there, 8 here"),
    ({**SHAPE, "deep_layers": [64]}, "deep_layers=64 there, 64,32 here"),
])
def test_a_model_of_another_shape_is_refused_naming_both_values(there, message):
    with pytest.raises(JobError, match="checkpoint /c/ckpt-3 holds a model of another shape") as error:
        refuse_another_shape(there, SHAPE, "checkpoint /c/ckpt-3")
    assert message in str(error.value)


@pytest.mark.parametrize("there", [SHAPE, {**SHAPE, "deep_layers": (64, 32)}, None, {}])
def test_a_model_of_the_same_shape_or_unknown_shape_passes(there):
    refuse_another_shape(there, SHAPE, "checkpoint /c/ckpt-3")


# --- the checkpoint folder, read without TensorFlow ------------------------------------------

def touch(path, text=""):
    with open(path, "w") as f:
        f.write(text)


def test_the_folder_s_checkpoints_newest_first_with_their_records(tmp_path):
    for number in (3, 12):
        touch(tmp_path / f"ckpt-{number}.index")
        folder.write_record(CheckpointRecord(str(tmp_path / f"ckpt-{number}"), number, "job-a", number // 3, 0, number,
                                             SHAPE, "adam"))
    touch(tmp_path / "ckpt-20.json", "{}")  # a record whose checkpoint never completed (no index): not one
    touch(tmp_path / "checkpoint", 'model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths: "ckpt-3"\n'
                                   'all_model_checkpoint_paths: "ckpt-12"\n')
    found = checkpoints_in(str(tmp_path))
    assert [(r.number, r.job, r.epoch, r.step, r.optimizer) for r in found] == [(12, "job-a", 4, 12, "adam"),
                                                                             (3, "job-a", 1, 3, "adam")]
    assert found[0].model == SHAPE and found[0].prefix == str(tmp_path / "ckpt-12")


def test_a_checkpoint_listed_but_without_its_index_or_record_is_still_tried(tmp_path):
    touch(tmp_path / "checkpoint", 'model_checkpoint_path: "/elsewhere/ckpt-7"\n')
    touch(tmp_path / "ckpt-9.index")
    touch(tmp_path / "ckpt-9.json", "not json")
    assert [(r.number, r.job) for r in checkpoints_in(str(tmp_path))] == [(9, None), (7, None)]
    assert checkpoints_in(str(tmp_path / "absent")) == ()


def test_records_of_checkpoints_no_longer_kept_go(tmp_path):
    for number in (1, 2, 3):
        touch(tmp_path / f"ckpt-{number}.json", "{}")
    folder.prune_records(str(tmp_path), [str(tmp_path / "ckpt-3")])
    assert sorted(os.listdir(tmp_path)) == ["ckpt-3.json"]


def test_a_damaged_checkpoint_is_set_aside_with_its_record(tmp_path):
    for name in ("ckpt-3.index", "ckpt-3.data-00000-of-00001", "ckpt-3.json", "ckpt-30.index", "checkpoint"):
        touch(tmp_path / name)
    aside = folder.set_aside(str(tmp_path / "ckpt-3"))
    assert sorted(os.listdir(aside)) == ["ckpt-3.data-00000-of-00001", "ckpt-3.index", "ckpt-3.json"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-30.index", "set-aside"]


# --- the model channel ------------------------------------------------------------------------

def channel(path, mode="File"):
    return Channel("model", mode, "FullyReplicated", "", str(path))


def saved_model(root, version="1", record=None):
    path = root / version
    (path / "variables").mkdir(parents=True)
    touch(path / "saved_model.pb")
    touch(path / "variables" / "variables.index")
    if record is not None:
        (path / "assets.extra").mkdir()
        touch(path / RECORD, json.dumps(record))
    return path


def test_a_saved_model_folder_and_its_record(tmp_path):
    saved_model(tmp_path, "1")
    saved_model(tmp_path, "2", {"job": "day-1", "epoch": 1})
    found = find_model(channel(tmp_path))
    assert found.saved_model == str(tmp_path / "2") and found.record == {"job": "day-1", "epoch": 1}


def test_a_model_tar_gz_is_unpacked_by_the_chief_alone(tmp_path):
    source = tmp_path / "export"
    saved_model(source, "1", {"job": "day-1", "epoch": 3})
    data = tmp_path / "data"
    data.mkdir()
    with tarfile.open(data / "model.tar.gz", "w:gz") as tar:
        tar.add(source / "1", arcname="1")
    found = find_model(channel(data))
    assert found.archive == str(data / "model.tar.gz") and found.saved_model == ""  # not opened to plan
    opened = unpacked(found, str(tmp_path / "scratch"))
    assert opened.saved_model == str(tmp_path / "scratch" / "1")
    assert os.path.isfile(os.path.join(opened.saved_model, "variables", "variables.index"))
    assert opened.record == {"job": "day-1", "epoch": 3}


@pytest.mark.parametrize("layout, message", [
    ("nothing", "expected a SavedModel folder (saved_model.pb) or one model.tar.gz in {path}; found nothing"),
    ("two archives", "expected a SavedModel folder (saved_model.pb) or one model.tar.gz in {path}; found a.tar.gz, "
                     "b.tar.gz"),
    ("two models", "holds several SavedModels (a, b): keep one, or number their folders as versions"),
    ("pipe", "a model channel is read in File or FastFile mode, not Pipe mode"),
])
def test_a_model_channel_without_one_model_is_named(tmp_path, layout, message):
    if layout == "two archives":
        touch(tmp_path / "a.tar.gz")
        touch(tmp_path / "b.tar.gz")
    if layout == "two models":
        saved_model(tmp_path, "a")
        saved_model(tmp_path, "b")
    with pytest.raises(JobError, match="channel 'model': ") as error:
        find_model(channel(tmp_path, "Pipe" if layout == "pipe" else "File"))
    assert message.format(path=tmp_path) in str(error.value)


@pytest.mark.parametrize("content, message", [
    (b"not a tar at all", "is not a readable tar archive, truncated or damaged"),
    ("empty tar", "holds no SavedModel (saved_model.pb); it holds nothing"),
])
def test_a_model_archive_that_cannot_be_used_is_named(tmp_path, content, message):
    archive = tmp_path / "model.tar.gz"
    if content == "empty tar":
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz"):
            pass
        archive.write_bytes(buffer.getvalue())
    else:
        archive.write_bytes(content)
    with pytest.raises(JobError, match=f"channel 'model': {archive}") as error:
        unpacked(find_model(channel(tmp_path)), str(tmp_path / "scratch"))
    assert message in str(error.value)
