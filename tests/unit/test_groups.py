"""Heterogeneous clusters in the planner: which instance groups train and which feed them,
for each mode, and the jobs whose groups cannot be used."""
import dataclasses

import pytest

from trainer.contract.hyperparameters import parse_hyperparameters
from trainer.contract.job import InstanceGroup
from trainer.errors import JobError
from trainer.planner.planner import make_plan
from trainer.plan.types import LaunchKind
from trainer.tf_line import LINES

from test_planner import job as homogeneous_job

CPU, GPU = "ml.c5.4xlarge", "ml.p3.8xlarge"


def job(groups, current="algo-1", hp=None, sdk=None, gpus=0, mode="File", script=False):
    """A job of instance groups [(name, instance type, hosts)], host names numbered across them."""
    hosts, made = [], []
    for name, instance_type, count in groups:
        names = tuple(f"algo-{len(hosts) + i + 1}" for i in range(count))
        hosts += names
        made.append(InstanceGroup(name, instance_type, names))
    base = homogeneous_job(hosts=len(hosts), gpus=gpus, mode=mode, hp=hp, sdk=sdk)
    entry = None
    if script:
        from trainer.contract.user_code import EntryPoint

        entry = EntryPoint(program="train.py", code_dir="/opt/ml/code", kind="script", why="it runs code at its top level",
                           hooks=())
        base = dataclasses.replace(base, hyperparameters=parse_hyperparameters(hp or {}, has_user_code=True,
                                                                               for_script=True))
    group = next(g for g in made if current in g.hosts)
    return dataclasses.replace(base, current_host=current, instance_groups=tuple(made), current_group=group.name,
                               entry_point=entry)


TWO = [("data", CPU, 2), ("train", GPU, 1)]
CASES = {  # name: (job, mode, training hosts, data hosts, why starts with)
    "GPU group trains, CPU group feeds": (
        job(TWO, current="algo-3", gpus=4), "horovod", ("algo-3",), ("algo-1", "algo-2"),
        "training: train (the groups of GPU instance types)"),
    "training_groups names it": (
        job([("a", CPU, 1), ("b", CPU, 1)], hp={"training_groups": "a"}), "single", ("algo-1",), ("algo-2",),
        "training: a (hyperparameter training_groups)"),
    "the SDK's distribution instance_groups": (
        job([("feed", CPU, 1), ("dnn", CPU, 2)], current="algo-2",
            sdk={"sagemaker_multi_worker_mirrored_strategy_enabled": True,
                 "sagemaker_distribution_instance_groups": ["dnn"]}),
        "multi_worker_mirrored", ("algo-2", "algo-3"), ("algo-1",),
        "training: dnn (the SDK's distribution instance_groups)"),
    "horovod 2 ranks on the training host": (
        job([("t", CPU, 1), ("d", CPU, 1)], hp={"training_groups": "t", "distribution": "horovod",
                                                 "processes_per_host": "2"}),
        "horovod", ("algo-1",), ("algo-2",), "training: t"),
    "every group trains: no data service": (
        job([("a", CPU, 1), ("b", CPU, 1)], hp={"training_groups": "a,b", "distribution": "multi_worker_mirrored"}),
        "multi_worker_mirrored", ("algo-1", "algo-2"), None, None),
    "a parameter-server script: its cluster on the training group": (
        job([("t", CPU, 2), ("d", CPU, 1)], script=True, sdk={"sagemaker_parameter_server_enabled": True,
                                                               "sagemaker_distribution_instance_groups": ["t"]}),
        "parameter_server", ("algo-1", "algo-2"), ("algo-3",), "training: t"),
    "a script: TF_CONFIG of the training group only": (
        job([("t", CPU, 2), ("d", CPU, 1)], script=True, sdk={"sagemaker_multi_worker_mirrored_strategy_enabled": True,
                                                               "sagemaker_distribution_instance_groups": ["t"]}),
        "multi_worker_mirrored", ("algo-1", "algo-2"), ("algo-3",), "training: t"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_which_groups_train(case):
    the_job, mode, training, data, why = CASES[case]
    plan = make_plan(the_job)
    assert plan.mode == mode and plan.hosts == training
    training_processes = [p for p in plan.processes if p.role not in ("dispatcher", "data_worker")]
    assert {p.host for p in training_processes} == set(training)
    if data is None:
        assert plan.data_service is None
        return
    assert plan.data_service.hosts == data and plan.data_service.why.startswith(why)
    assert plan.job_hosts == training + data
    # The dispatcher on the first data host, a worker on each.
    assert [(p.host, p.role) for p in plan.processes if p.rank is None and p.role in ("dispatcher", "data_worker")] == \
        [(data[0], "dispatcher")] + [(host, "data_worker") for host in data]
    for process in training_processes:
        if process.tf_config:  # the training group's cluster only
            hosts = {entry.split(":")[0] for entries in process.tf_config["cluster"].values() for entry in entries}
            assert hosts <= set(training), process.tf_config
    # A training host waits for the dispatcher and every worker before it trains.
    waits = {(w.host, w.what) for w in plan.peer_waits}
    assert (data[0], "tf.data dispatcher") in waits and all((h, "tf.data worker") in waits for h in data)


def test_a_data_host_serves_and_follows_the_first_training_host():
    plan = make_plan(job(TWO, current="algo-2", gpus=0, hp={"training_groups": "train"}))
    assert plan.launch.kind == LaunchKind.DATA_SERVICE and plan.current_host == "algo-2"
    assert plan.leader == "algo-3" and [(w.host, w.what) for w in plan.peer_waits] == [("algo-3", "train")]
    assert [p.role for p in plan.on_host("algo-2")] == ["data_worker"]
    assert [p.role for p in plan.on_host("algo-1")] == ["dispatcher", "data_worker"]
    assert plan.ssh_trust is None


@pytest.mark.parametrize("line, mode, why", [
    ("2.14", "local_sgd", "2 CPU hosts, the built-in DeepFM, TensorFlow 2.14: local_sgd, each host training"),
    ("2.21", "local_sgd", "2 CPU hosts, the built-in DeepFM, TensorFlow 2.21: local_sgd, each host training"),
    ("2.21 (a table too large to average)", "horovod", "2 CPU hosts, the built-in DeepFM, TensorFlow 2.21: horovod"),
])
def test_auto_gives_cpu_hosts_fed_by_a_data_group_a_mode_that_reads_through_it(line, mode, why):
    """What auto picks for CPU hosts reads through a data group: local SGD, and Horovod where
    the table is too large to average."""
    table = {"feature_size": "2000000"} if "too large" in line else {}
    line = line.split()[0]
    fed = job([("t", CPU, 2), ("d", CPU, 1)], hp={"training_groups": "t", **table})
    plan = make_plan(dataclasses.replace(fed, tf_line=LINES[line]))
    assert plan.mode == mode and plan.data_service is not None
    assert plan.reason.startswith(why), plan.reason
    asked = make_plan(job([("t", CPU, 2), ("d", CPU, 1)], hp={"training_groups": "t",
                                                              "distribution": "multi_worker_mirrored"}))
    assert asked.mode == "multi_worker_mirrored"


REFUSED = {
    "no GPU group, nothing said": (job([("a", CPU, 1), ("b", CPU, 1)]), "which of them train is not said"),
    "every group has GPUs, nothing said": (job([("a", GPU, 1), ("b", GPU, 1)]), "which of them train is not said"),
    "a training group that does not exist": (
        job(TWO, hp={"training_groups": "dnn"}), "hyperparameter 'training_groups': no instance group named dnn"),
    "GPUs in a group that only feeds": (
        job([("a", CPU, 1), ("b", GPU, 1)], hp={"training_groups": "a"}),
        "instance group b (ml.p3.8xlarge) has GPUs but does not train"),
    "parameter servers with a data group": (
        job([("t", CPU, 2), ("d", CPU, 1)], hp={"training_groups": "t", "distribution": "parameter_server"}),
        "parameter_server reads its input on each worker's own host"),
    "Pipe mode with a data group": (
        job([("t", CPU, 1), ("d", CPU, 1)], hp={"training_groups": "t"}, mode="Pipe"),
        "use File (or FastFile) mode for a job with a data group"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_groups_that_cannot_be_used_are_refused(case):
    the_job, message = REFUSED[case]
    with pytest.raises(JobError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_plan(the_job)


def test_a_script_may_run_on_the_data_hosts_itself():
    """data_hosts_run=script: as in AWS's container, the script runs on every host; the data
    hosts run no service, and the training hosts wait for their `train` only."""
    hp = {"training_groups": "t", "data_hosts_run": "script"}
    training = make_plan(job([("t", CPU, 1), ("d", CPU, 2)], hp=hp, script=True))
    assert not training.data_service.serves and "data_hosts_run=script" in training.data_service.reading
    assert [(w.host, w.what) for w in training.peer_waits] == [("algo-2", "train"), ("algo-3", "train")]
    data_host = make_plan(job([("t", CPU, 1), ("d", CPU, 2)], current="algo-3", hp=hp, script=True))
    assert data_host.launch.kind == LaunchKind.SCRIPT and [p.role for p in data_host.on_host("algo-3")] == ["data"]
    assert data_host.leader == "algo-1"
