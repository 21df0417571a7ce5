"""The planner over a table of jobs: whole plans, the four sharding cases, the SDK's keys."""
import dataclasses

import pytest

from trainer.contract.hyperparameters import parse_hyperparameters
from trainer.contract.job import Channel, Job
from trainer.contract.user_code import EntryPoint
from trainer.errors import JobError
from trainer.plan.clusters import mwms_cluster, ps_cluster, sagemaker_ps_cluster, translate_master
from trainer.launch.host import describe
from trainer.plan.mpi import CPU_CYCLE_TIME_MS, cpu_binding
from trainer.planner.planner import make_plan
from trainer.plan.types import SshTrust
from trainer.tf_line import LEGACY_KERAS_ENV, LINES

T, E = "training", "evaluation"


def job(hosts=1, gpus=0, cpus=8, cores=4, channels=None, mode="File", s3="FullyReplicated", hp=None, sdk=None,
        line="2.14"):
    names = [f"algo-{i + 1}" for i in range(hosts)]
    channels = channels or {T: s3, E: "FullyReplicated"}
    return Job(
        base_dir="/opt/ml", hosts=tuple(names), current_host=names[0], instance_type="ml.c5.2xlarge",
        network_interface="eth0", num_cpus=cpus, num_physical_cores=cores, num_gpus=gpus,
        channels={name: Channel(name, mode, dist, "", f"/opt/ml/input/data/{name}") for name, dist in channels.items()},
        hyperparameters=parse_hyperparameters(hp or {}), framework_params=sdk or {},
        model_dir="/opt/ml/model", output_dir="/opt/ml/output", output_data_dir="/opt/ml/output/data",
        checkpoint_dir="/opt/ml/checkpoints", tf_line=LINES[line])


def table(plan):
    """Every process as (host, role, rank, local_rank, channels, shard, eval_shard, gpu)."""
    return [(p.host[-1:], p.role, p.rank, p.local_rank, p.channels, p.shard, p.eval_shard, p.gpu)
            for p in plan.processes]


def summary(plan):
    return (plan.mode, plan.processes_per_host, plan.world_size, plan.replicas_per_process,
            plan.global_batch_size, plan.learning_rate_scale, plan.launch.kind)


def with_hooks(the_job, hooks):
    return dataclasses.replace(the_job, entry_point=EntryPoint("hooks.py", "/opt/ml/code", "hooks", "hooks", hooks))


def with_model_fn(the_job):
    return with_hooks(the_job, ("model_fn", "parse_fn"))


MPI_2 = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}
PS = {"distribution": "parameter_server"}
CASES = {
    "1 CPU host: single": (
        job(), ("single", 1, 1, 1, 256, 1.0, "in_process"),
        [("1", "chief", 0, 0, (T,), (1, 0), (1, 0), None)]),
    "1 host, 1 GPU: single on it": (
        job(gpus=1), ("single", 1, 1, 1, 256, 1.0, "in_process"),
        [("1", "chief", 0, 0, (T,), (1, 0), (1, 0), 0)]),
    "1 host, 4 GPUs: horovod, one process per GPU, shared channel shard(4, rank)": (
        job(gpus=4), ("horovod", 4, 4, 1, 1024, 4.0, "mpirun"),
        [("1", "chief", 0, 0, (T,), (4, 0), (4, 0), 0), ("1", "worker", 1, 1, (T,), (4, 1), (4, 1), 1),
         ("1", "worker", 2, 2, (T,), (4, 2), (4, 2), 2), ("1", "worker", 3, 3, (T,), (4, 3), (4, 3), 3)]),
    "1 host, 8 GPUs, SDK mpi 8 per host": (
        job(gpus=8, sdk={"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 8}),
        ("horovod", 8, 8, 1, 2048, 8.0, "mpirun"), None),
    "2 CPU hosts, the built-in DeepFM: local_sgd, one process per host with its CPUs": (
        job(hosts=2), ("local_sgd", 1, 2, 1, 512, 2.0, "sagemaker_mpi"),
        [("1", "chief", 0, 0, (T,), (2, 0), (2, 0), None), ("2", "worker", 1, 0, (T,), (2, 1), (2, 1), None)]),
    "2 CPU hosts, a DeepFM of 10M ids (local SGD's average would send more than Horovod's steps): horovod": (
        job(hosts=2, hp={"feature_size": "10000000"}), ("horovod", 1, 2, 1, 512, 2.0, "sagemaker_mpi"), None),
    "2 CPU hosts, hooks with their own model_fn (its size unknown before it is built): horovod": (
        with_model_fn(job(hosts=2)), ("horovod", 1, 2, 1, 512, 2.0, "sagemaker_mpi"), None),
    "2 CPU hosts, hooks without a model_fn (the built-in DeepFM): local_sgd": (
        with_hooks(job(hosts=2), ("parse_fn",)), ("local_sgd", 1, 2, 1, 512, 2.0, "sagemaker_mpi"), None),
    "2 CPU hosts, a hooks module by name: horovod": (
        job(hosts=2, hp={"user_module": "my_hooks"}), ("horovod", 1, 2, 1, 512, 2.0, "sagemaker_mpi"), None),
    "2 CPU hosts, distribution parameter_server": (
        job(hosts=2, hp=PS), ("parameter_server", 1, 2, 1, 512, 1.0, "parameter_server"),
        [("1", "chief", None, 0, (T,), (1, 0), (1, 0), None),
         ("1", "worker", 0, 0, (T,), (2, 0), None, None), ("1", "ps", None, 0, (), (1, 0), None, None),
         ("2", "worker", 1, 0, (T,), (2, 1), None, None), ("2", "ps", None, 0, (), (1, 0), None, None)]),
    "2 hosts, SDK parameter_server": (
        job(hosts=2, sdk={"sagemaker_parameter_server_enabled": True}),
        ("parameter_server", 1, 2, 1, 512, 1.0, "parameter_server"), None),
    "1 host, SDK parameter_server: one process, as AWS's container": (
        job(sdk={"sagemaker_parameter_server_enabled": True}), ("single", 1, 1, 1, 256, 1.0, "in_process"), None),
    "2 hosts, SDK multi-worker mirrored": (
        job(hosts=2, sdk={"sagemaker_multi_worker_mirrored_strategy_enabled": True}),
        ("multi_worker_mirrored", 1, 2, 1, 512, 2.0, "in_process"),
        [("1", "chief", 0, 0, (T,), (2, 0), (2, 0), None), ("2", "worker", 1, 0, (T,), (2, 1), (2, 1), None)]),
    "2 GPU hosts: horovod": (
        job(hosts=2, gpus=4), ("horovod", 4, 8, 1, 2048, 8.0, "sagemaker_mpi"), None),
    # P3, 2 hosts x 2 processes: the four sharding cases
    "shared channel, FullyReplicated: shard(world, rank)": (
        job(hosts=2, sdk=MPI_2), ("horovod", 2, 4, 1, 1024, 4.0, "sagemaker_mpi"),
        [("1", "chief", 0, 0, (T,), (4, 0), (4, 0), None), ("1", "worker", 1, 1, (T,), (4, 1), (4, 1), None),
         ("2", "worker", 2, 0, (T,), (4, 2), (4, 2), None), ("2", "worker", 3, 1, (T,), (4, 3), (4, 3), None)]),
    "shared channel, ShardedByS3Key: shard(per_host, local_rank)": (
        job(hosts=2, sdk=MPI_2, s3="ShardedByS3Key"), ("horovod", 2, 4, 1, 1024, 4.0, "sagemaker_mpi"),
        [("1", "chief", 0, 0, (T,), (2, 0), (4, 0), None), ("1", "worker", 1, 1, (T,), (2, 1), (4, 1), None),
         ("2", "worker", 2, 0, (T,), (2, 0), (4, 2), None), ("2", "worker", 3, 1, (T,), (2, 1), (4, 3), None)]),
    "channel per process, FullyReplicated: shard(hosts, host_index)": (
        job(hosts=2, sdk=MPI_2, channels={"training-2": "FullyReplicated", "training-1": "FullyReplicated"}),
        ("horovod", 2, 4, 1, 1024, 4.0, "sagemaker_mpi"),
        [("1", "chief", 0, 0, ("training-1",), (2, 0), None, None), ("1", "worker", 1, 1, ("training-2",), (2, 0), None, None),
         ("2", "worker", 2, 0, ("training-1",), (2, 1), None, None), ("2", "worker", 3, 1, ("training-2",), (2, 1), None, None)]),
    "channel per process, ShardedByS3Key: no sharding": (
        job(hosts=2, sdk=MPI_2, channels={"training": "ShardedByS3Key", "training-2": "ShardedByS3Key"}),
        ("horovod", 2, 4, 1, 1024, 4.0, "sagemaker_mpi"),
        [("1", "chief", 0, 0, ("training",), (1, 0), None, None), ("1", "worker", 1, 1, ("training-2",), (1, 0), None, None),
         ("2", "worker", 2, 0, ("training",), (1, 0), None, None), ("2", "worker", 3, 1, ("training-2",), (1, 0), None, None)]),
    "Pipe mode, channel per process; the eval FIFO is read by local rank 0 only": (
        job(sdk=MPI_2, mode="Pipe", channels={"training": "FullyReplicated", "training-2": "FullyReplicated",
                                              "evaluation": "FullyReplicated"}),
        ("horovod", 2, 2, 1, 512, 2.0, "mpirun"),
        [("1", "chief", 0, 0, ("training",), (1, 0), (1, 0), None),
         ("1", "worker", 1, 1, ("training-2",), (1, 0), None, None)]),
    "one process, several channels: it reads them all": (
        job(channels={"training-1": "FullyReplicated", "training-2": "FullyReplicated"}),
        ("single", 1, 1, 1, 256, 1.0, "in_process"),
        [("1", "chief", 0, 0, ("training-1", "training-2"), (1, 0), None, None)]),
    "tower on CPU: vCPUs - 1 replicas, global batch and rate scaled": (
        job(hp={"distribution": "tower"}), ("tower", 1, 1, 7, 1792, 7.0, "in_process"), None),
    "tower with 2 replicas, rate not scaled": (
        job(hp={"distribution": "tower", "replicas": "2", "scale_learning_rate": "false"}),
        ("tower", 1, 1, 2, 512, 1.0, "in_process"), None),
    "mirrored on 4 GPUs": (
        job(gpus=4, hp={"distribution": "mirrored"}), ("mirrored", 1, 1, 4, 1024, 4.0, "in_process"), None),
    "the hyperparameter beats the SDK's keys": (
        job(hosts=2, hp={"distribution": "horovod"}, sdk={"sagemaker_parameter_server_enabled": True}),
        ("horovod", 1, 2, 1, 512, 2.0, "sagemaker_mpi"), None),
    "PS before MPI, as AWS's container orders them": (
        job(hosts=2, sdk={"sagemaker_parameter_server_enabled": True, "sagemaker_mpi_enabled": True}),
        ("parameter_server", 1, 2, 1, 512, 1.0, "parameter_server"), None),
    "2 CPU hosts, local_sgd: MPI ranks, the learning rate scaled as Horovod's": (
        job(hosts=2, hp={"distribution": "local_sgd"}), ("local_sgd", 1, 2, 1, 512, 2.0, "sagemaker_mpi"), None),
    "SDK keys as strings": (
        job(hosts=2, sdk={"sagemaker_multi_worker_mirrored_strategy_enabled": "True"}),
        ("multi_worker_mirrored", 1, 2, 1, 512, 2.0, "in_process"), None),
}


@pytest.mark.parametrize("name", CASES)
def test_plan(name):
    the_job, expected_summary, expected_table = CASES[name]
    plan = make_plan(the_job)
    assert summary(plan) == expected_summary
    if expected_table is not None:
        assert table(plan) == expected_table
    assert plan.learning_rate == pytest.approx(0.001 * plan.learning_rate_scale)
    assert plan.reason


PS_LAYOUTS = {  # (one training channel or one per worker, ShardedByS3Key) -> (channels, shard(hosts, i), row)
    ("one", False): ((T,), True, "one channel per process, FullyReplicated: shard(hosts, host_index)"),
    ("one", True): ((T,), False, "one channel per process and ShardedByS3Key: no sharding in code"),
    ("per worker", False): ((T, "training-2", "training-3"), True,
                            "one channel per process, FullyReplicated: shard(hosts, host_index)"),
    ("per worker", True): ((T, "training-2", "training-3"), False,
                           "one channel per process and ShardedByS3Key: no sharding in code"),
}


@pytest.mark.parametrize("hosts", [2, 3])
@pytest.mark.parametrize("mode", ["File", "Pipe"])
@pytest.mark.parametrize("layout, sharded", list(PS_LAYOUTS))
def test_parameter_server_layouts(hosts, mode, layout, sharded):
    """P3 for parameter servers (one worker per host): every worker reads each training
    channel on its own host, sharded by host unless S3 sharded it; the coordinator reads
    only the evaluation channel; in Pipe mode each reads its host's FIFOs."""
    names, by_host, row = PS_LAYOUTS[(layout, sharded)]
    s3 = "ShardedByS3Key" if sharded else "FullyReplicated"
    plan = make_plan(job(hosts=hosts, mode=mode, channels={**{n: s3 for n in names}, E: "FullyReplicated"}, hp=PS))
    assert (plan.mode, plan.input_mode, plan.sharding, plan.world_size) == ("parameter_server", mode, row, hosts)
    assert plan.steps_per_execution == 32 and plan.learning_rate_scale == 1.0  # asynchronous: not scaled
    epoch = "_<epoch>" if mode == "Pipe" else ""
    chief, *others = plan.processes
    assert (chief.role, chief.host, chief.eval_shard, chief.reads) == (
        "chief", "algo-1", (1, 0), (f"input/data/{E}{epoch}",))
    workers = [p for p in others if p.role == "worker"]
    assert [w.host for w in workers] == [f"algo-{i + 1}" for i in range(hosts)]
    for index, worker in enumerate(workers):
        assert worker.channels == names and worker.eval_shard is None
        assert worker.shard == ((hosts, index) if by_host else (1, 0))
        assert worker.reads == tuple(f"input/data/{n}{epoch}" for n in names)
        assert worker.tf_config["task"] == {"type": "worker", "index": index}  # its index: its shard
    assert [p.host for p in others if p.role == "ps"] == [f"algo-{i + 1}" for i in range(hosts)]


@pytest.mark.parametrize("the_job, message", [
    (job(sdk=MPI_2, mode="Pipe"), "Pipe mode: 1 training channel(s) (training) for 2 training processes per host"),
    (job(hosts=2, hp={"distribution": "single"}), "distribution single runs on one host; this job has 2"),
    (job(gpus=4, hp={"distribution": "horovod", "processes_per_host": "8"}), "8 Horovod processes per host for 4 GPUs"),
    (job(hosts=2, channels={"training": "ShardedByS3Key", "training-2": "FullyReplicated"}),
     "training channels mix ShardedByS3Key and FullyReplicated"),
    (job(hp={"distribution": "parameter_server"}), "distribution parameter_server needs several hosts"),
    (job(hosts=2, gpus=1, hp={"distribution": "local_sgd"}), "local_sgd trains on CPU hosts; this job has GPUs: "
                                                              "use horovod"),
    (job(hosts=2, gpus=1, hp={"distribution": "local_sgd"}, line="2.21"),
     "local_sgd trains on CPU hosts; this job has GPUs: use multi_worker_mirrored"),
    (job(gpus=2, hp={"distribution": "local_sgd"}, line="2.21"),
     "local_sgd trains on CPU hosts; this job has GPUs: use mirrored"),
    (job(hosts=2, mode="Pipe", hp={**PS, "pipe_reader": "pipemodedataset"}),
     "'pipe_reader': with parameter servers each worker reads its host's FIFOs through the worker task"),
    (job(hosts=2, mode="Pipe", hp={"distribution": "multi_worker_mirrored"}), "multi_worker_mirrored needs File mode"),
    (job(hosts=2, hp={**PS, "processes_per_host": "2"}), "'processes_per_host': 2 is for horovod"),
    (job(channels={"evaluation": "FullyReplicated"}), "training channel 'training' is missing"),
    (job(sdk=MPI_2, hp={"jit_compile": "true"}), "'jit_compile': XLA cannot compile the training step of "
                                                  "distribution horovod"),
    (job(hosts=2, hp={**PS, "jit_compile": "true"}), "distribution parameter_server; turn it off"),
    (job(sdk=MPI_2, hp={"tune_threads": "true"}), "'tune_threads': it tunes one process that owns its host"),
    (job(mode="Pipe", hp={"tune_threads": "true"}), "this job is single in Pipe mode"),
    (job(hp={"distribution": "tower", "steps_per_execution": "8"}), "'steps_per_execution': distribution tower"),
    (job(hosts=2, hp={"distribution": "multi_worker_mirrored", "steps_per_execution": "8"}),
     "distribution multi_worker_mirrored runs one step per call"),
    (job(hosts=2, hp={"steps_per_execution": "12"}),
     "'steps_per_execution': 12 steps a call do not divide average_every_steps=64"),
])
def test_impossible_jobs_are_clear_errors(the_job, message):
    with pytest.raises(JobError) as error:
        make_plan(the_job)
    assert message in str(error.value)


def as_script(the_job):
    return dataclasses.replace(the_job, entry_point=EntryPoint("train.py", "/opt/ml/code", "script", "a script"))


# Both lines have Horovod: on CPU hosts auto picks alike on them. GPUs differ: the 2.14 line's
# Horovod has NCCL; the 2.21 line's has CPU collectives only, so TensorFlow's strategies train GPUs.
LINE_CASES = {
    **{f"{line}, {name}": (dataclasses.replace(the_job, tf_line=LINES[line]), expected)
       for line in ("2.14", "2.21") for name, (the_job, expected) in {
           "2 CPU hosts: local SGD": (job(hosts=2), ("local_sgd", 1, 2, 1)),
           "2 CPU hosts, a table too large to average: horovod": (job(hosts=2, hp={"feature_size": "2000000"}),
                                                                  ("horovod", 1, 2, 1)),
           "1 CPU host: single": (job(), ("single", 1, 1, 1)),
           "a script with the SDK's MPI key: mpirun of the script": (as_script(job(sdk=MPI_2)), ("horovod", 2, 2, 1)),
       }.items()},
    "2.14, 1 host, 4 GPUs: horovod": (job(gpus=4), ("horovod", 4, 4, 1)),
    "2.14, 2 hosts with GPUs: horovod": (job(hosts=2, gpus=1), ("horovod", 1, 2, 1)),
    "2.21, 1 host, 4 GPUs: mirrored over them": (job(gpus=4, line="2.21"), ("mirrored", 1, 1, 4)),
    "2.21, 2 hosts with GPUs: multi-worker mirrored": (job(hosts=2, gpus=1, line="2.21"),
                                                        ("multi_worker_mirrored", 1, 2, 1)),
}


@pytest.mark.parametrize("name", LINE_CASES)
def test_modes_on_each_line(name):
    the_job, (mode, per_host, world, replicas) = LINE_CASES[name]
    plan = make_plan(the_job)
    assert (plan.mode, plan.processes_per_host, plan.world_size, plan.replicas_per_process) == \
        (mode, per_host, world, replicas)


def test_a_keras_3_script_is_refused_on_the_2_14_line_naming_the_line_to_use():
    keras_3 = EntryPoint("train.py", "/opt/ml/code", "script", "a script", keras_3="line 7: keras.ops")
    with pytest.raises(JobError) as error:
        make_plan(dataclasses.replace(job(), entry_point=keras_3))
    assert str(error.value) == ("entry point train.py: line 7: keras.ops is Keras 3's, written for TensorFlow 2.16 "
                                "or later; this image's TensorFlow 2.14 line runs Keras 2.14 (tf.keras): use the "
                                "2.21 image (tag 2.21-cpu)")
    assert make_plan(dataclasses.replace(job(line="2.21"), entry_point=keras_3)).mode == "single"


def test_a_horovod_script_for_standalone_keras_is_refused_on_the_keras_3_line_naming_what_to_use():
    standalone = EntryPoint("train.py", "/opt/ml/code", "script", "a script", horovod_keras="line 3: horovod.keras")
    with pytest.raises(JobError) as error:
        make_plan(dataclasses.replace(job(sdk=MPI_2, line="2.21"), entry_point=standalone))
    assert str(error.value) == (
        "entry point train.py: line 3: horovod.keras is Horovod's API for the standalone Keras 2 package, and "
        "`import keras` on this image's TensorFlow 2.21 line is Keras 3, which Horovod does not support: use "
        "horovod.tensorflow.keras with tf.keras (this container gives the script tf.keras as Keras 2, tf-keras), "
        "horovod.tensorflow's DistributedGradientTape in a custom loop, or the 2.14 image (tag 2.14-cpu)")
    assert make_plan(dataclasses.replace(job(sdk=MPI_2), entry_point=standalone)).mode == "horovod"


@pytest.mark.parametrize("horovod_keras, keras_3, mode, switched", [
    ("line 3: horovod.tensorflow.keras", "", MPI_2, "horovod.tensorflow.keras (its line 3) wraps Keras 2's optimizers"),
    ("", "", MPI_2, ""),  # horovod.tensorflow in a custom loop: Keras 3 trains
    ("", "", {"sagemaker_parameter_server_enabled": True}, "Keras 3's fit cannot train under parameter_server"),
    ("", "", {"sagemaker_multi_worker_mirrored_strategy_enabled": True}, ""),  # fixed by the image
    ("line 3: horovod.tensorflow.keras", "line 9: keras.ops", MPI_2, None),  # it asked for Keras 3: it keeps it
])
def test_a_script_s_tf_keras_is_keras_2_on_the_keras_3_line_where_keras_3_cannot_train_it(
        horovod_keras, keras_3, mode, switched, monkeypatch):
    monkeypatch.delenv(LEGACY_KERAS_ENV, raising=False)
    entry = EntryPoint("train.py", "/opt/ml/code", "script", "a script", keras_3=keras_3, horovod_keras=horovod_keras)
    plan = make_plan(dataclasses.replace(job(hosts=2, sdk=mode, line="2.21"), entry_point=entry))
    assert dict(plan.script_environment) == ({LEGACY_KERAS_ENV: "1"} if switched else {})
    assert plan.script_keras_2_why == (switched or "")
    if not keras_3:  # (a Keras 3 script is refused on the 2.14 line)
        on_2_14 = make_plan(dataclasses.replace(job(hosts=2, sdk=mode), entry_point=entry))
        assert on_2_14.script_environment == () and on_2_14.script_keras_2_why == ""


@pytest.mark.parametrize("the_job, expected", [
    (job(), 32),                                                   # the default
    (job(sdk=MPI_2), 32),                                          # horovod: collectives inside the loop
    (job(hp={"log_steps": "10"}), 10),                             # no more steps than one log line
    (job(hp={"profile_steps": "5,8"}), 1),                         # the profiler counts calls
    (job(hosts=2, hp=PS), 32),                                     # parameter_server: a call ends with its worker's pass
    (job(hosts=2, hp={"distribution": "multi_worker_mirrored"}), 1),  # replicas end their data apart
    (job(hp={"distribution": "mirrored"}), 1),                     # replicas end their data apart
    (job(hp={"steps_per_execution": "4"}), 4),                     # asked for
    (job(sdk=MPI_2, hp={"steps_per_execution": "1", "log_steps": "10"}), 1),
    # local_sgd averages at the end of a call: a call's steps divide average_every_steps
    (job(hosts=2), 32),                                            # auto's local SGD, averaging every 64
    (job(hosts=2, hp={"average_every_steps": "16"}), 16),
    (job(hosts=2, hp={"average_every_steps": "100"}), 25),         # the most that divide it, up to 32
    (job(hosts=2, hp={"average_every_steps": "37"}), 1),           # a prime above 32
    (job(hosts=2, hp={"average_every_steps": "64", "log_steps": "20"}), 16),
    (job(hosts=2, hp={"average_every_steps": "64", "steps_per_execution": "64"}), 64),  # asked for
])
def test_steps_per_execution(the_job, expected):
    assert make_plan(the_job).steps_per_execution == expected


def test_mpirun_command_for_cpu_workers():
    plan = make_plan(job(cpus=8, cores=8, sdk={**MPI_2, "sagemaker_mpi_custom_mpi_options": "-x NCCL_DEBUG=INFO"},
                         hp={"horovod_autotune": "true", "horovod_fusion_threshold": "33554432",
                             "horovod_cycle_time": "3.5", "mpi_options": "--verbose"}))
    command = " ".join(plan.launch.command)
    assert command.startswith("mpirun --allow-run-as-root -np 2 --host localhost:2 ")
    assert "--map-by slot:PE=4 --bind-to core -mca mpi_yield_when_idle 1" in command  # P10
    assert "-mca btl_vader_single_copy_mechanism none -x OMPI_MCA_btl_vader_single_copy_mechanism=none" in command  # P11
    assert "-x HOROVOD_AUTOTUNE -x HOROVOD_CYCLE_TIME -x HOROVOD_FUSION_THRESHOLD" in command  # P27
    assert command.endswith("-x NCCL_DEBUG=INFO --verbose python -m trainer.worker")
    assert plan.launch.env == {"HOROVOD_AUTOTUNE": "1", "HOROVOD_FUSION_THRESHOLD": "33554432",
                               "HOROVOD_CYCLE_TIME": "3.5", "HOROVOD_STALL_CHECK_TIME_SECONDS": "60"}
    assert plan.warmup_steps == 100


@pytest.mark.parametrize("the_job, expected", [
    # job -> HOROVOD_CYCLE_TIME (ms) every rank gets; None: Horovod's own default
    (job(hosts=2, sdk=MPI_2), str(CPU_CYCLE_TIME_MS)),                      # CPU hosts: a short cycle
    (job(sdk=MPI_2), str(CPU_CYCLE_TIME_MS)),                               # CPU ranks on one host too
    (job(cpus=1, cores=1, sdk=MPI_2), None),                                # more ranks than CPUs: no polling
    (job(hosts=2, gpus=4, hp={"distribution": "horovod"}), None),           # GPU steps: Horovod's default
    (job(hosts=2, sdk=MPI_2, hp={"horovod_cycle_time": "5"}), "5.0"),       # the job's own, on CPUs
    (job(gpus=4, hp={"distribution": "horovod", "horovod_cycle_time": "0.5"}), "0.5"),  # and on GPUs
    (job(hosts=2), None),                                                   # auto's local SGD: no Horovod
    (job(hosts=2, hp={"distribution": "local_sgd", "horovod_cycle_time": "5"}), None),  # nothing to set
])
def test_horovod_cycle_time(the_job, expected):
    assert make_plan(the_job).launch.env.get("HOROVOD_CYCLE_TIME") == expected


YIELDS = "-mca mpi_yield_when_idle 1"
BINDING_CASES = {
    # job, ranks per host -> mpirun's binding options, whether the host has more ranks than CPUs
    "1 host, 4 cores, 2 ranks: 2 cores each (P10)": (job(cpus=8, cores=4), 2,
                                                     "--map-by slot:PE=2 --bind-to core " + YIELDS, False),
    "1 host, 2 cores, 2 ranks: a core each": (job(cpus=2, cores=2), 2, "--map-by slot:PE=1 --bind-to core " + YIELDS,
                                              False),
    "1 host, 1 rank: its threads use every CPU": (job(cpus=2, cores=2), 1, "--bind-to none " + YIELDS, False),
    "1 host, 4 cores and 8 vCPUs, 6 ranks: not bound": (job(cpus=8, cores=4), 6, "--bind-to none " + YIELDS, False),
    "1 host, 2 vCPUs, 4 ranks: more ranks than CPUs": (job(cpus=2, cores=2), 4, "--bind-to none " + YIELDS, True),
    "2 hosts, 8 vCPUs, 2 ranks each: as the toolkit's mpirun": (job(hosts=2, cpus=8, cores=4), 2,
                                                                "--bind-to none " + YIELDS, False),
    "2 hosts, 2 vCPUs, 4 ranks each: more ranks than CPUs": (job(hosts=2, cpus=2, cores=2), 4,
                                                             "--bind-to none " + YIELDS, True),
    "1 host, 4 GPUs, 4 ranks: one GPU each, NCCL moves the data": (job(gpus=4, cpus=32, cores=16), 4, "--bind-to none",
                                                                   False),
    "1 host, 4 GPUs and 2 vCPUs, 4 ranks: more ranks than CPUs": (job(gpus=4, cpus=2, cores=2), 4,
                                                                 "--bind-to none " + YIELDS, True),
}


@pytest.mark.parametrize("case", BINDING_CASES)
def test_how_ranks_share_a_hosts_cpus(case):
    the_job, per_host, options, oversubscribed = BINDING_CASES[case]
    binding = cpu_binding(the_job, per_host)
    assert " ".join(binding.options) == options and binding.oversubscribed == oversubscribed
    assert ("more ranks than CPUs" in binding.why) == oversubscribed
    assert ("mpi_yield_when_idle" in binding.why) == (YIELDS in options)


def test_the_plan_the_log_and_the_toolkits_mpirun_say_how_ranks_share_the_cpus():
    hp = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 4}
    for hosts in (1, 2):
        plan = make_plan(job(hosts=hosts, cpus=2, cores=2, sdk=hp))
        assert YIELDS in " ".join(plan.launch.command)
        assert plan.launch.cpu_binding.startswith("4 ranks per host on 2 vCPU(s), more ranks than CPUs")
        assert plan.to_dict()["launch"]["cpu_binding"] == plan.launch.cpu_binding  # trainer plan's JSON
        assert "; ranks 4 ranks per host on 2 vCPU(s), more ranks than CPUs" in describe(plan, False)
    assert YIELDS not in " ".join(make_plan(job(hosts=2, gpus=4, cpus=32, cores=16, sdk=hp)).launch.command)


def test_tf_config_for_parameter_servers():
    plan = make_plan(job(hosts=2, hp=PS))
    cluster = {"chief": ["algo-1:2222"], "ps": ["algo-1:2223", "algo-2:2223"],
               "worker": ["algo-1:2224", "algo-2:2224"]}
    assert [(p.role, p.host, p.tf_config) for p in plan.processes] == [
        ("chief", "algo-1", {"cluster": cluster, "task": {"type": "chief", "index": 0}}),
        ("worker", "algo-1", {"cluster": cluster, "task": {"type": "worker", "index": 0}}),
        ("ps", "algo-1", {"cluster": cluster, "task": {"type": "ps", "index": 0}}),
        ("worker", "algo-2", {"cluster": cluster, "task": {"type": "worker", "index": 1}}),
        ("ps", "algo-2", {"cluster": cluster, "task": {"type": "ps", "index": 1}}),
    ]
    assert plan.chief.writes_outputs and not plan.process(0).writes_outputs


def test_tf_config_for_multi_worker_mirrored():
    plan = make_plan(job(hosts=3, hp={"distribution": "multi_worker_mirrored"}))
    cluster = {"chief": ["algo-1:8890"], "worker": ["algo-2:8890", "algo-3:8890"]}
    assert [p.tf_config for p in plan.processes] == [
        {"cluster": cluster, "task": {"type": "chief", "index": 0}},
        {"cluster": cluster, "task": {"type": "worker", "index": 0}},
        {"cluster": cluster, "task": {"type": "worker", "index": 1}}]


def test_master_becomes_chief():
    sagemaker = {"cluster": sagemaker_ps_cluster(["algo-1", "algo-2"]), "task": {"type": "master", "index": 0}}
    assert sagemaker["cluster"]["master"] == ["algo-1:2222"]
    assert translate_master(sagemaker) == {
        "cluster": {"chief": ["algo-1:2222"], "ps": ["algo-1:2223", "algo-2:2223"], "worker": ["algo-2:2222"]},
        "task": {"type": "chief", "index": 0}}
    assert "master" not in ps_cluster(["a", "b"]) and "master" not in mwms_cluster(["a", "b"])


def test_plan_is_json():
    import json

    data = json.loads(json.dumps(make_plan(job(hosts=2, hp=PS)).to_dict()))
    assert data["mode"] == "parameter_server" and len(data["processes"]) == 5


def test_every_mode_has_a_runtime_and_is_a_distribution():
    from trainer import modes
    from trainer.modes.base import Runtime

    assert set(modes.names()) == {"single", "tower", "mirrored", "horovod", "local_sgd", "parameter_server",
                                  "multi_worker_mirrored"}
    assert all(issubclass(modes.get(name).runtime, Runtime) for name in modes.names())
    for name in modes.names():  # each a value of the `distribution` hyperparameter
        hosts = 1 if modes.get(name).in_process else 2
        assert make_plan(job(hosts=hosts, hp={"distribution": name, "replicas": "2"})).mode == name


def on_host(base: Job, index: int) -> Job:
    return dataclasses.replace(base, current_host=base.hosts[index])


PS_WAITS = [("algo-2", 2225, "train"), ("algo-2", 2223, "ps task"), ("algo-2", 2224, "worker task")]
PEER_CASES = {
    # (job, host index) -> (what the host waits for before its multi-host work, the leader)
    "one host: no wait, no leader": (job(), 0, [], None),
    "one host, horovod: none either": (job(gpus=4), 0, [], None),
    "PS coordinator's host: the other's train, ps and worker task": (job(hosts=2, hp=PS), 0, PS_WAITS, "algo-1"),
    "PS other host: the coordinator's train": (job(hosts=2, hp=PS), 1, [("algo-1", 2225, "train")], "algo-1"),
    "MPI master: every other host's train": (
        job(hosts=3, sdk=MPI_2), 0, [("algo-2", 2225, "train"), ("algo-3", 2225, "train")], "algo-1"),
    "MPI worker: every other host's train": (
        job(hosts=3, sdk=MPI_2), 2, [("algo-1", 2225, "train"), ("algo-2", 2225, "train")], "algo-1"),
    "multi-worker mirrored: no leader, every host ends by itself": (
        job(hosts=2, sdk={"sagemaker_multi_worker_mirrored_strategy_enabled": True}), 1,
        [("algo-1", 2225, "train")], None),
}


@pytest.mark.parametrize("name", PEER_CASES)
def test_peer_waits_and_leader(name):
    base, index, waits, leader = PEER_CASES[name]
    plan = make_plan(on_host(base, index))
    assert [(w.host, w.port, w.what) for w in plan.peer_waits] == waits
    assert plan.leader == leader


SSH_CASES = {
    # job -> who logs in to whom over ssh (None: no sshd anywhere, no key made)
    "one host, MPI on it: mpirun needs no ssh": (job(sdk=MPI_2), None),
    "MPI on 3 hosts: the master logs in to the others": (
        job(hosts=3, sdk=MPI_2), SshTrust(("algo-1",), ("algo-2", "algo-3"))),
    "parameter servers on 2 hosts": (job(hosts=2, hp=PS), None),
    "multi-worker mirrored on 2 hosts": (job(hosts=2, sdk={"sagemaker_multi_worker_mirrored_strategy_enabled": True}),
                                         None),
}


@pytest.mark.parametrize("name", SSH_CASES)
def test_ssh_only_where_mpi_crosses_hosts(name):
    the_job, trust = SSH_CASES[name]
    for index in range(len(the_job.hosts)):  # every host reads the same trust from its plan
        assert make_plan(on_host(the_job, index)).ssh_trust == trust
