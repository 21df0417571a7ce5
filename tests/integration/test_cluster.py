"""Several hosts on this machine (a network namespace each, SageMaker's host names and
ports): parameter servers and multi-worker mirrored, through `train` on every host."""
import glob
import os
import shutil

import pytest

from conftest import pids_of, run_local
from tensorboard_events import runs, series
from test_train_local import check_saved_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="simulated hosts need network namespaces: root and iproute2"),
]
CLUSTER_TIMEOUT_SEC = 400  # a hang guard


def no_task_left(job_dir):
    """No PS or worker task of this job is left (other tests' jobs may be running)."""
    return not any(pids_of("trainer.worker --serve", {"SAGEMAKER_BASE_DIR": os.path.join(str(job_dir), host)})
                   for host in ("algo-1", "algo-2"))


@pytest.fixture(scope="module")
def uneven_parts(aws_split, tmp_path_factory):
    """The 8,000 training records in three files of 4,000, 2,000 and 2,000: sharded by S3
    key over two hosts, algo-1 streams 6,000 of them and algo-2 2,000."""
    from trainer.data.split import split

    folder = tmp_path_factory.mktemp("uneven")
    split(aws_split["training"], [4000, 2000, 2000], [str(folder / f"part-{i}.tfrecords") for i in range(3)])
    return str(folder)


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_parameter_servers_in_pipe_mode_each_worker_reads_its_own_fifo(uneven_parts, aws_split, tmp_path):
    """The DeepFM demo's job: parameter servers on CPU hosts in Pipe mode, asked for with the
    SDK's key as the demo's estimator does. Each worker streams its own host's FIFO; algo-2's ends first and the epoch
    goes on until algo-1's has ended too."""
    channels = {"training": uneven_parts, "evaluation": aws_split["evaluation"]}
    run = run_local(tmp_path, channels, {"log_steps": "4", "sagemaker_parameter_server_enabled": "true"},
                    input_mode="Pipe", hosts=2, sharded=("training",),
                    timeout=CLUSTER_TIMEOUT_SEC)
    assert run.exit_code == 0 and run.succeeded, run.log[-5000:]
    metrics = run.metrics
    assert metrics["distribution"] == "parameter_server"
    # Every record once an epoch: ceil(6,000 / 256) steps on algo-1 and ceil(2,000 / 256) on algo-2.
    assert metrics["steps"] == 3 * (24 + 8), metrics
    assert metrics["eval_auc"] >= 0.68, metrics
    assert "one channel per process and ShardedByS3Key: no sharding in code" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert os.listdir(os.path.join(run.job_dir, "checkpoints"))
    root = os.path.join(run.job_dir, "output", "tensorboard")
    assert [epoch for epoch, _ in series(os.path.join(root, "epoch"), "eval_auc")] == [1, 2, 3]
    assert series(os.path.join(root, "train"), "samples_per_sec")
    assert no_task_left(tmp_path)


@pytest.mark.line("2.14", "2.21")
def test_multi_worker_mirrored_on_two_hosts(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, {"sagemaker_multi_worker_mirrored_strategy_enabled": "true", "log_steps": 4},
                    hosts=2, timeout=CLUSTER_TIMEOUT_SEC)
    assert run.exit_code == 0 and run.succeeded, run.log[-5000:]
    metrics = run.metrics
    assert metrics["distribution"] == "multi_worker_mirrored" and metrics["world_size"] == 2
    assert metrics["steps"] == 3 * 16 and metrics["eval_auc"] >= 0.68, metrics
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert not os.path.exists(os.path.join(os.path.dirname(run.job_dir), "algo-2", "model", "1"))
    # Each host uploads its own folder: the chief's curves and rate, the other host's rate.
    assert runs(os.path.join(run.job_dir, "output", "tensorboard")) == {"train": 1, "epoch": 1, "rank-0": 1}
    second = os.path.join(os.path.dirname(run.job_dir), "algo-2", "output", "tensorboard")
    assert runs(second) == {"rank-1": 1} and series(os.path.join(second, "rank-1"), "samples_per_sec")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Planted-signal data (`trainer datagen`: labels from a hidden factorization machine),
    5,721 ids, a weak signal (oracle eval AUC near 0.82, as noisy as click logs), enough rows
    for one host to have converged in 5 epochs."""
    from trainer.data import datagen

    return datagen.generate(str(tmp_path_factory.mktemp("planted")), 120_000, 30_000, files=4, feature_size=5721,
                            signal=0.55)


@pytest.fixture(scope="module")
def one_host_on_planted(planted, tmp_path_factory):
    """One host's 5 epochs on the planted data: the AUC two hosts are held to."""
    run = run_local(tmp_path_factory.mktemp("one-host"), {"training": planted["train"], "evaluation": planted["eval"]},
                    {"num_epochs": "5"})
    assert run.exit_code == 0, run.log[-3000:]
    return run


# What the first simulated host logs where resourceconfig.json names an interface it lacks.
INTERFACE_CHOSEN = ("network: resourceconfig.json names the network interface ethwe, which host algo-1 does not have: "
                    "using eth0, which holds algo-1's address 10.234.0.1")

@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(2)  # a CPU of its own for each host
def test_local_sgd_on_two_hosts_of_one_cpu_trains_as_well_as_one_host(planted, one_host_on_planted, tmp_path):
    """Each rank trains its own shard and the ranks average every 64 steps, each average sent
    while the next steps train: 5 epochs reach one host's eval AUC within 0.01, every epoch
    ends where the shards do (each host's 60,000 records: 235 batches), rank 0 exports.
    resourceconfig.json names SageMaker's ethwe, as ModelTrainer's local mode does, on hosts
    that have eth0 only: MPI talks over eth0, which holds the host's address."""
    channels = {"training": planted["train"], "evaluation": planted["eval"]}
    two = run_local(tmp_path, channels, {"num_epochs": "5", "distribution": "local_sgd"}, hosts=2, host_cpus=1,
                    timeout=CLUSTER_TIMEOUT_SEC, network_interface="ethwe")
    assert two.exit_code == 0 and two.succeeded, two.log[-5000:]
    assert INTERFACE_CHOSEN in two.log and "btl_tcp_if_include eth0" in two.log, two.log[-5000:]
    assert two.metrics["distribution"] == "local_sgd" and two.metrics["world_size"] == 2
    # Rank 0's updates: its 60,000 records in 235 batches an epoch, each trained once.
    assert two.metrics["steps"] == 5 * 235, two.metrics
    auc = {"one host": one_host_on_planted.metrics["eval_auc"], "local_sgd, 2 hosts": two.metrics["eval_auc"]}
    print(auc)
    assert abs(auc["local_sgd, 2 hosts"] - auc["one host"]) <= 0.01, auc
    assert "learning rate 0.002 (x2)" in two.log  # scaled as Horovod's: a mean of the ranks' changes
    check_saved_model(os.path.join(two.job_dir, "model", "1"), field_size=39)
    assert not os.path.exists(os.path.join(str(tmp_path), "algo-2", "model", "1"))


@pytest.mark.cores(2)  # a CPU of its own for each host
def test_parameter_servers_train_on_hosts_of_one_cpu_each(aws_split, tmp_path):
    """Each host on one CPU of its own, as separate small instances: the tasks' servers get
    threads enough to run the coordinator's functions (with one, the workers deadlocked
    before their first step), and every worker's pass is trained."""
    run = run_local(tmp_path, aws_split, {"sagemaker_parameter_server_enabled": "true"}, hosts=2, host_cpus=1,
                    timeout=CLUSTER_TIMEOUT_SEC)
    assert run.exit_code == 0 and run.succeeded, run.log[-5000:]
    assert run.metrics["distribution"] == "parameter_server"
    assert run.log.count("of the parameter-server cluster (its server's threads: 2 inter-op, 1 intra-op)") == 4


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_parameter_servers_on_two_hosts_train_as_well_as_one_host(planted, one_host_on_planted, tmp_path):
    """Default hyperparameters, 5 epochs: parameter servers on 2 hosts reach one host's eval
    AUC within 0.01 (when every worker read the first worker's shard, they fell 0.03 short);
    the embedding is partitioned over the hosts' PS tasks, the coordinator alone writes the
    checkpoints, the model and the curves, and no task outlives the job."""
    channels = {"training": planted["train"], "evaluation": planted["eval"]}
    one = one_host_on_planted
    two = run_local(tmp_path / "two", channels, {"num_epochs": "5", "sagemaker_parameter_server_enabled": "true"},
                    hosts=2, timeout=CLUSTER_TIMEOUT_SEC)
    assert two.exit_code == 0 and two.succeeded, two.log[-5000:]
    # Each worker's 60,000 records once an epoch, its last batch partial: 2 x ceil(60,000 / 256).
    assert two.metrics["distribution"] == "parameter_server" and two.metrics["steps"] == 5 * 2 * 235
    auc = {"one host": one.metrics["eval_auc"], "parameter servers, 2 hosts": two.metrics["eval_auc"]}
    print(auc)
    assert auc["one host"] > 0.75, (auc, planted["oracle_eval_auc"])  # the planted signal was learnt
    assert abs(auc["parameter servers, 2 hosts"] - auc["one host"]) <= 0.01, auc
    assert "embedding/table partitioned over 2 parameter servers" in two.log  # P13
    assert "[algo-2]" in two.log and "the coordinator on algo-1 is done" in two.log
    check_saved_model(os.path.join(two.job_dir, "model", "1"), field_size=39)
    assert os.listdir(os.path.join(two.job_dir, "checkpoints"))  # the chief's (P26)
    # The coordinator writes the curves, by step as in every mode, and no rank runs.
    root = os.path.join(two.job_dir, "output", "tensorboard")
    assert runs(root) == {"train": 1, "epoch": 1}
    steps = [step for step, _ in series(os.path.join(root, "train"), "samples_per_sec")]
    # A point where a round of the coordinator's calls crosses a multiple of log_steps (100): the
    # last at or after 2,300 of the 2,350 steps; where the rounds end depends on which worker
    # ran each call first, so not necessarily at 2,350 itself.
    last = 5 * 2 * 235
    assert len(steps) >= 5 and steps == sorted(set(steps)) and last // 100 * 100 <= steps[-1] <= last, steps
    assert [epoch for epoch, _ in series(os.path.join(root, "epoch"), "eval_auc")] == [1, 2, 3, 4, 5]
    assert no_task_left(tmp_path / "two")  # every PS and worker task ended with the job


def test_horovod_on_two_hosts_of_two_ranks(aws_split, tmp_path):
    """MPI across hosts on this machine, over eth0 where resourceconfig.json names ethwe: the
    first host's mpirun logs in to the second's sshd with this job's key (each simulated host's ssh files apart), 4 ranks train on their
    quarters, evaluate sharded and rank 0 exports; no sshd or key folder is left. Before
    training, the first host logs what `trainer plan --probe` predicts for the job
    (probe_scaling), measured with real Horovod ranks on its CPUs."""
    hp = {"distribution": "horovod", "processes_per_host": "2", "log_steps": "4", "probe_scaling": "true"}
    run = run_local(tmp_path, aws_split, hp, hosts=2, timeout=CLUSTER_TIMEOUT_SEC, network_interface="ethwe")
    assert run.exit_code == 0 and run.succeeded, run.log[-5000:]
    assert INTERFACE_CHOSEN in run.log and "btl_tcp_if_include eth0" in run.log, run.log[-5000:]
    [predicted] = [line for line in run.log.splitlines() if "probe_scaling: 2 hosts with horovod: predicted " in line]
    assert "x one host's " in predicted and "the exchange adds " in predicted, predicted
    assert run.log.index(predicted) < run.log.index("horovod rank 0 of 4"), "the prediction comes before training"
    assert "probe_scaling: the job runs 2 processes per host; the probe measures one per host" in run.log
    metrics = run.metrics
    assert metrics["distribution"] == "horovod" and metrics["world_size"] == 4
    assert metrics["steps"] == 3 * 8 and metrics["eval_auc"] >= 0.65, metrics  # ceil(2,000 / 256) per epoch
    assert "--host algo-1:2,algo-2:2" in run.log and "ssh: sshd on 10.234.0.2 lets in root from 10.234.0.1 only" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert not os.path.exists(os.path.join(str(tmp_path), "algo-2", "model", "1"))  # rank 0 alone writes (P8)
    algo_2 = {"SAGEMAKER_BASE_DIR": os.path.join(str(tmp_path), "algo-2")}
    assert not pids_of("sshd", algo_2) and not pids_of("trainer.worker", algo_2)
    assert not [folder for folder in glob.glob("/tmp/trainer-ssh-algo-*") if str(tmp_path) in read_or_empty(
        os.path.join(folder, "sshd_config"))]


def read_or_empty(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""
