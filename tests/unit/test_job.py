"""The contract reader: one typed view of the job folder, relocatable, with clear errors."""
import json
import os
import re

import pytest

from trainer.contract.channels import eval_channel_name, training_channels
from trainer.contract.job import read_job
from trainer.errors import JobError

RESOURCE = {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"],
            "current_instance_type": "ml.c5.2xlarge", "network_interface_name": "eth1"}
INPUT = {
    "training": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key", "ContentType": "application/x-tfrecord"},
    "training-2": {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated"},
    "evaluation": {"TrainingInputMode": "File"},
}
HYPER = {"batch_size": "64", "kmp_settings": "False", "deep_layers": "32,16",
         "sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2",
         "sagemaker_mpi_custom_mpi_options": "-x FOO=1"}


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(tmp_path))  # restored after the test
    for name in ("SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR", "SM_OUTPUT_DIR", "SM_NUM_CPUS", "SM_NUM_GPUS",
                 "SM_CHANNEL_TRAINING"):
        monkeypatch.delenv(name, raising=False)
    write(tmp_path, resource=RESOURCE, input=INPUT, hyper=HYPER)
    return tmp_path


def write(base, resource=None, input=None, hyper=None):
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    for name, value in (("resourceconfig.json", resource), ("inputdataconfig.json", input),
                        ("hyperparameters.json", hyper)):
        if value is not None:
            (config / name).write_text(value if isinstance(value, str) else json.dumps(value))


def test_reads_the_whole_contract(job_dir):
    job = read_job(str(job_dir))
    assert job.hosts == ("algo-1", "algo-2") and job.current_host == "algo-2" and job.host_index == 1
    assert job.instance_type == "ml.c5.2xlarge" and job.network_interface == "eth1"
    assert job.channels["training"].input_mode == "File"
    assert job.channels["training"].s3_distribution == "ShardedByS3Key"
    assert job.channels["training"].content_type == "application/x-tfrecord"
    assert job.channels["training"].path == str(job_dir / "input" / "data" / "training")
    assert job.channels["training-2"].is_pipe
    assert job.channels["training-2"].fifo_path(3) == str(job_dir / "input" / "data" / "training-2_3")
    assert job.channels["evaluation"].s3_distribution == "FullyReplicated"
    assert job.hyperparameters.batch_size == 64 and job.hyperparameters.kmp_settings is False
    assert job.hyperparameters.deep_layers == [32, 16]
    assert job.framework_params == {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2,
                                    "sagemaker_mpi_custom_mpi_options": "-x FOO=1"}
    assert job.model_dir == str(job_dir / "model")
    assert job.output_dir == str(job_dir / "output")
    assert job.output_data_dir == str(job_dir / "output" / "data")
    assert job.checkpoint_dir == str(job_dir / "checkpoints")
    assert job.num_cpus == len(os.sched_getaffinity(0)) and 1 <= job.num_physical_cores <= job.num_cpus
    assert job.entry_point is None


def test_relocates_with_sagemaker_base_dir(job_dir, tmp_path_factory, monkeypatch):
    other = tmp_path_factory.mktemp("other")
    write(other, resource={"current_host": "h", "hosts": ["h"]}, input={}, hyper={})
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(other))
    job = read_job()
    assert job.base_dir == str(other) and job.hosts == ("h",) and job.channels == {}
    assert job.model_dir == str(other / "model")
    assert read_job(str(job_dir)).hosts == ("algo-1", "algo-2")  # a second folder in one process


def test_sm_environment_overrides(job_dir, monkeypatch, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("data")
    monkeypatch.setenv("SM_MODEL_DIR", "/somewhere/model")
    monkeypatch.setenv("SM_CHANNEL_TRAINING", str(elsewhere))
    monkeypatch.setenv("SM_NUM_CPUS", "16")
    monkeypatch.setenv("SM_NUM_GPUS", "4")
    job = read_job(str(job_dir))
    assert job.model_dir == "/somewhere/model"
    assert job.channels["training"].path == str(elsewhere)
    assert job.num_cpus == 16 and job.num_gpus == 4


def test_script_mode_program(job_dir, tmp_path_factory):
    code = tmp_path_factory.mktemp("code")
    (code / "model.py").write_text("def model_fn(hyperparameters):\n    return None\n")
    write(job_dir, hyper={"sagemaker_program": "model.py", "sagemaker_submit_directory": str(code),
                          "model_dir": "s3://bucket/job/model"})
    job = read_job(str(job_dir))
    assert (job.entry_point.program, job.entry_point.code_dir, job.entry_point.kind) == ("model.py", str(code), "hooks")


def test_code_that_cannot_be_fetched_is_named(job_dir):
    write(job_dir, hyper={"sagemaker_program": "train.py", "sagemaker_submit_directory": "/nowhere/code.tar.gz"})
    with pytest.raises(JobError, match="sagemaker_submit_directory /nowhere/code.tar.gz: cannot fetch the code"):
        read_job(str(job_dir))


@pytest.mark.parametrize("files, message", [
    ({"resource": None}, "config file missing: {base}/input/config/resourceconfig.json"),
    ({"resource": "{not json"}, "config file {base}/input/config/resourceconfig.json is not valid JSON: line 1 column 2"),
    ({"resource": "[]"}, "resourceconfig.json must hold a JSON object, got list"),
    ({"resource": {"current_host": "algo-9", "hosts": ["algo-1"]}},
     "resourceconfig.json: current_host 'algo-9' is not one of hosts ['algo-1']"),
    ({"resource": {"current_host": "algo-1", "hosts": "algo-1"}}, "'hosts' must be a non-empty list of host names"),
    ({"resource": {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "instance_groups": [
        {"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
        {"instance_group_name": "gpu", "instance_type": "ml.g5.xlarge", "hosts": ["algo-3"]}]}},
     "resourceconfig.json: instance group 'gpu' lists host 'algo-3', which is not one of hosts ['algo-1', 'algo-2']"),
    ({"resource": {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "instance_groups": [
        {"instance_group_name": "cpu", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
        {"instance_group_name": "gpu", "instance_type": "ml.g5.xlarge", "hosts": ["algo-1", "algo-2"]}]}},
     "resourceconfig.json: host 'algo-1' is in instance groups 'cpu' and 'gpu'"),
    ({"resource": {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "instance_groups": [
        {"instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]}, {"instance_group_name": "b", "hosts": ["algo-2"]}]}},
     "resourceconfig.json: an instance group without instance_group_name"),
    ({"input": None}, "config file missing: {base}/input/config/inputdataconfig.json"),
    ({"input": {"training": {"TrainingInputMode": "Stream"}}},
     "inputdataconfig.json: channel 'training': TrainingInputMode 'Stream'; accepted: File, Pipe, FastFile"),
    ({"input": {"training": {"S3DistributionType": "Sharded"}}},
     "channel 'training': S3DistributionType 'Sharded'; accepted: FullyReplicated, ShardedByS3Key"),
    ({"resource": {"current_host": "algo-1", "hosts": ["algo-1", "algo-2", "algo-1"]}},
     "resourceconfig.json: 'hosts' names 'algo-1' more than once: ['algo-1', 'algo-2', 'algo-1']"),
    ({"hyper": None}, "config file missing: {base}/input/config/hyperparameters.json"),
    ({"hyper": "[1, 2]"}, "config file {base}/input/config/hyperparameters.json must hold a JSON object, got list"),
    ({"hyper": {"batch_size": "big"}}, "hyperparameter 'batch_size': expected an integer, got 'big'"),
])
def test_bad_config_is_a_clear_error(job_dir, files, message):
    config = job_dir / "input" / "config"
    for key, name in (("resource", "resourceconfig.json"), ("input", "inputdataconfig.json"),
                      ("hyper", "hyperparameters.json")):
        if key in files and files[key] is None:
            (config / name).unlink()
    write(job_dir, **{k: v for k, v in files.items() if v is not None})
    with pytest.raises(JobError) as error:
        read_job(str(job_dir))
    assert message.format(base=job_dir) in str(error.value)


def test_a_heterogeneous_clusters_groups(job_dir):
    """resourceconfig.json as SageMaker writes it for instance groups: every group with its
    hosts, and the current one's name; one group (SageMaker's homogeneousCluster) is none."""
    write(job_dir, resource={
        "current_host": "algo-3", "hosts": ["algo-1", "algo-2", "algo-3"], "current_instance_type": "ml.p3.2xlarge",
        "current_group_name": "dnn_group", "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge", "hosts": ["algo-2", "algo-1"]},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "hosts": ["algo-3"]}]})
    job = read_job(str(job_dir))
    assert job.current_group == "dnn_group" and job.instance_type == "ml.p3.2xlarge"
    assert [(g.name, g.instance_type, g.hosts) for g in job.instance_groups] == [
        ("data_group", "ml.c5.18xlarge", ("algo-2", "algo-1")), ("dnn_group", "ml.p3.2xlarge", ("algo-3",))]
    write(job_dir, resource={**RESOURCE, "instance_groups": [
        {"instance_group_name": "homogeneousCluster", "instance_type": "ml.c5.2xlarge", "hosts": ["algo-1", "algo-2"]}]})
    assert read_job(str(job_dir)).instance_groups == ()


def test_missing_job_folder(tmp_path):
    with pytest.raises(JobError, match="job folder .*nowhere does not exist"):
        read_job(str(tmp_path / "nowhere"))


@pytest.mark.parametrize("channels, hyper, train, evaluation", [
    ({"training": {}, "evaluation": {}}, {}, "training", "evaluation"),
    ({"train": {}, "eval": {}}, {}, "train", "eval"),
    ({"training": {}, "validation": {}, "test": {}}, {}, "training", "validation"),
    ({"training": {}}, {}, "training", None),
    ({"mine": {}, "holdout": {}}, {"train_channel": "mine", "eval_channel": "holdout"}, "mine", "holdout"),
    # SM_CHANNELS order is alphabetical; names decide, never positions (P2)
    ({"evaluation": {}, "training": {}, "training-2": {}}, {}, "training", "evaluation"),
])
def test_channels_are_picked_by_name(job_dir, channels, hyper, train, evaluation):
    write(job_dir, input=channels, hyper=hyper)
    job = read_job(str(job_dir))
    assert training_channels(job)[0].name == train
    assert eval_channel_name(job) == evaluation


@pytest.mark.parametrize("channels, hyper, message", [
    ({"evaluation": {}}, {}, "training channel 'training' is missing; channels given: evaluation"),
    ({"training": {}}, {"eval_channel": "holdout"}, "evaluation channel 'holdout' (eval_channel) is missing; channels given: training"),
])
def test_missing_channel_is_a_clear_error(job_dir, channels, hyper, message):
    write(job_dir, input=channels, hyper=hyper)
    job = read_job(str(job_dir))
    with pytest.raises(JobError) as error:
        training_channels(job)
        eval_channel_name(job)
    assert message in str(error.value)


# checkpointconfig.json's content (None: no file) -> the checkpoint folder (None: the job's default)
CHECKPOINT_CASES = {
    "no CheckpointConfig: /opt/ml/checkpoints": (None, None),
    "the SDK's checkpoint_local_path": ('{"LocalPath": "/opt/ml/spot-checkpoints", "S3Uri": "s3://b/c"}',
                                        "/opt/ml/spot-checkpoints"),
    "no LocalPath in it: the default": ('{"S3Uri": "s3://b/c"}', None),
    "not JSON: named": ("{LocalPath", "checkpointconfig.json is not a JSON object with LocalPath"),
    "a relative LocalPath: named": ('{"LocalPath": "checkpoints"}', "LocalPath must be an absolute path"),
}


@pytest.mark.parametrize("name", CHECKPOINT_CASES)
def test_checkpoints_go_where_checkpointconfig_says(job_dir, name):
    content, expected = CHECKPOINT_CASES[name]
    if content is not None:
        (job_dir / "input" / "config" / "checkpointconfig.json").write_text(content)
    if expected is not None and not expected.startswith("/"):
        with pytest.raises(JobError, match=expected):
            read_job(str(job_dir))
        return
    assert read_job(str(job_dir)).checkpoint_dir == (expected or str(job_dir / "checkpoints"))


@pytest.mark.parametrize("settings, expected", [
    ({}, ("None", "None")),
    ({"CompressionType": "Gzip", "RecordWrapperType": "RecordIO"}, ("Gzip", "RecordIO")),
    ({"CompressionType": "Zip"}, "channel 'training': CompressionType 'Zip'; accepted: None, Gzip"),
    ({"RecordWrapperType": "TFRecord"}, "channel 'training': RecordWrapperType 'TFRecord'; accepted: None, RecordIO"),
])
def test_a_channels_compression_and_record_wrapper(job_dir, settings, expected):
    write(job_dir, input={"training": {"TrainingInputMode": "Pipe", **settings}})
    if isinstance(expected, str):
        with pytest.raises(JobError, match=re.escape(expected)):
            read_job(str(job_dir))
        return
    channel = read_job(str(job_dir)).channels["training"]
    assert (channel.compression, channel.record_wrapper) == expected
    # In Pipe mode SageMaker decompresses a Gzip channel; it wraps objects in RecordIO in Pipe mode only.
    assert not channel.is_gzip and channel.is_recordio_wrapped == (expected[1] == "RecordIO")


def model_trainer_job(base, sourcecode: dict | str, distributed: dict | str | None = None, hyper=None):
    """A job folder as ModelTrainer lays it out for SourceCode(..., command="train")."""
    write(base, resource={**RESOURCE, "current_host": "algo-1"}, input={"training": {}, "code": {}, "sm_drivers": {}},
          hyper=hyper or {})
    drivers = base / "input" / "data" / "sm_drivers"
    drivers.mkdir(parents=True)
    (base / "input" / "data" / "code").mkdir()
    (base / "input" / "data" / "code" / "train.py").write_text("import tensorflow as tf\nprint(tf.__version__)\n")
    for name, value in (("sourcecode.json", sourcecode), ("distributed.json", distributed)):
        if value is not None:
            (drivers / name).write_text(value if isinstance(value, str) else json.dumps(value))


SOURCE_CODE = {"source_dir": "/home/me/src", "requirements": None, "entry_script": "train.py", "command": "train",
               "ignore_patterns": [".env"]}
MPI = {"process_count_per_node": 2, "mpi_additional_options": ["-x", "NCCL_DEBUG=INFO"]}

# distributed.json as ModelTrainer writes it -> the SDK keys read
MODEL_TRAINER_DISTRIBUTED = {
    "no distributed=": ({}, {}),
    "MPI(process_count_per_node=2, mpi_additional_options=[...])": (
        MPI, {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2,
              "sagemaker_mpi_custom_mpi_options": "-x NCCL_DEBUG=INFO"}),
    "MPI(): the driver's default of one per GPU, ours of the plan": (
        {"process_count_per_node": None, "mpi_additional_options": None}, {"sagemaker_mpi_enabled": True}),
}


@pytest.mark.parametrize("name", MODEL_TRAINER_DISTRIBUTED)
def test_model_trainer_s_source_code_and_distributed_are_the_entry_point_and_sdk_keys(job_dir, name):
    distributed, keys = MODEL_TRAINER_DISTRIBUTED[name]
    model_trainer_job(job_dir, SOURCE_CODE, distributed)
    job = read_job(str(job_dir))
    assert job.entry_point.program == "train.py" and job.runs_script
    assert job.entry_point.code_dir == str(job_dir / "input" / "data" / "code")
    assert job.framework_params == keys


def test_sagemaker_program_wins_over_model_trainer_s_entry_script(job_dir):
    model_trainer_job(job_dir, SOURCE_CODE, MPI, hyper={"sagemaker_program": "other.py",
                                                       "sagemaker_submit_directory": str(job_dir / "elsewhere"),
                                                       "sagemaker_mpi_num_of_processes_per_host": "4"})
    (job_dir / "elsewhere").mkdir()
    (job_dir / "elsewhere" / "other.py").write_text("print(1)\n")
    job = read_job(str(job_dir))
    assert job.entry_point.program == "other.py" and job.framework_params["sagemaker_mpi_num_of_processes_per_host"] == 4


@pytest.mark.parametrize("distributed, error", [
    ({"process_count_per_node": 2, "smp": None}, "torchrun launches PyTorch; for TensorFlow use distributed=MPI"),
    ('{"process_count_per_node": 2,', r"sm_drivers/distributed.json line 1: not JSON"),
    ("[1]", r"sm_drivers/distributed.json: expected a JSON object, got list"),
], ids=["Torchrun", "cut short", "not an object"])
def test_model_trainer_s_distributed_we_cannot_run_is_refused_by_name(job_dir, distributed, error):
    model_trainer_job(job_dir, SOURCE_CODE, distributed)
    with pytest.raises(JobError, match=error):
        read_job(str(job_dir))


def test_model_trainer_without_an_entry_script_trains_the_built_in_model(job_dir):
    model_trainer_job(job_dir, {**SOURCE_CODE, "entry_script": None})
    assert read_job(str(job_dir)).entry_point is None
