"""`trainer local`'s job folders: the job's name (a new one per job, kept by a restart in the
same folder, or given), and a model channel laid out as SageMaker hands it (File mode, its
folders kept)."""
import json
import os
import re

from trainer.local.runner import JOB_NAME_FILE, LocalJob


def test_every_job_gets_a_name_that_a_restart_in_its_folder_keeps(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINING_JOB_NAME", raising=False)
    job = LocalJob({}, {})
    first = job.job_name_in(str(tmp_path / "a"))
    assert re.fullmatch(r"trainer-local-\d{4}(-\d\d){5}-\d{3}", first), first
    assert job.job_name_in(str(tmp_path / "a")) == first  # the same folder: the job restarted
    assert (tmp_path / "a" / JOB_NAME_FILE).read_text().strip() == first
    named = LocalJob({}, {}, job_name="day-2")
    assert named.job_name_in(str(tmp_path / "a")) == "day-2"  # given: it wins, and is kept
    assert job.job_name_in(str(tmp_path / "a")) == "day-2"
    monkeypatch.setenv("TRAINING_JOB_NAME", "from-the-environment")  # as SageMaker sets it: above the folder's
    assert job.job_name_in(str(tmp_path / "a")) == "from-the-environment"
    assert named.job_name_in(str(tmp_path / "b")) == "day-2"  # --job-name above both


def test_a_model_channel_is_laid_out_in_file_mode_with_its_folders(tmp_path):
    model = tmp_path / "yesterday" / "model"
    (model / "1" / "variables").mkdir(parents=True)
    (model / "1" / "saved_model.pb").write_bytes(b"")
    (model / "1" / "variables" / "variables.index").write_bytes(b"")
    data = tmp_path / "data.tfrecord"
    data.write_bytes(b"")
    job = LocalJob({"training": [str(data)], "model": [str(model)]}, {}, input_mode="Pipe")
    folder = job.lay_out(str(tmp_path / "job"))["algo-1"]
    config = json.load(open(os.path.join(folder, "input", "config", "inputdataconfig.json")))
    assert config["training"]["TrainingInputMode"] == "Pipe" and config["model"]["TrainingInputMode"] == "File"
    channel = os.path.join(folder, "input", "data", "model")
    assert os.path.isfile(os.path.join(channel, "1", "variables", "variables.index"))
    assert not os.path.exists(os.path.join(folder, "input", "data", "training"))  # a FIFO's, made when fed
    renamed = LocalJob({"training": [str(data)], "prior": [str(model)]}, {"model_channel": "prior"})
    assert renamed.is_model_channel("prior") and not renamed.is_model_channel("model")
