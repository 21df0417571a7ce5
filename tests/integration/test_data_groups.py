"""Heterogeneous clusters through `trainer local --groups` (each host in its own network
namespace): the training group's processes read their batches from the data group's
tf.data service, for the built-in model, hooks and each mode that trains on the training
group; the model ends as good as the same job without a data group."""
import os
import shutil

import pytest

from conftest import PROJECT_ROOT, run_local

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="simulated hosts need network namespaces: root and iproute2"),
]
AUC_TOLERANCE = 0.01  # the same job without a data group; the service changes the order of batches only

PARSE_HOOKS = '''
import tensorflow as tf

def parse_fn(serialized, hp):
    """A user's own parsing (it runs on the data hosts): the DeepFM layout, values clipped."""
    n = hp["field_size"]
    parsed = tf.io.parse_example(serialized, {"ids": tf.io.FixedLenFeature([n], tf.int64),
                                              "values": tf.io.FixedLenFeature([n], tf.float32),
                                              "label": tf.io.FixedLenFeature([1], tf.float32)})
    return {"ids": parsed["ids"], "values": tf.clip_by_value(parsed["values"], -10.0, 10.0)}, parsed["label"]
'''

CASES = {  # name: (training hosts, data hosts, hyperparameters); the built-in parsing runs on the data
    # hosts in the last two, the hooks' in the first, which splits the input over two data hosts
    "single, hooks' parse_fn on 2 data hosts": (1, 2, {"user_module": "HOOKS"}),
    # Local SGD's ranks read as Horovod's (its runtime's input is Horovod's): what auto runs on CPU hosts.
    "local_sgd 2 ranks, 1 data host": (1, 1, {"distribution": "local_sgd", "processes_per_host": 2}),
    # Its two hosts read other batches alone than through the service (each its own shard):
    # 5 epochs, so that the order's effect on AUC has faded (3 left 0.008 between the two).
    "multi_worker_mirrored on 2 hosts, 1 data host": (2, 1, {"distribution": "multi_worker_mirrored", "num_epochs": 5}),
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Planted-signal data (`trainer datagen`), enough rows for a model to learn the signal
    in 3 epochs (to AUC 0.757-0.769 in one run of every case, 0.000-0.008 apart with and
    without a data group), so the batches' order (which the service changes) moves its AUC
    by little."""
    from trainer.data import datagen

    generated = datagen.generate(str(tmp_path_factory.mktemp("planted")), 120_000, 30_000, files=3, feature_size=5721,
                                 signal=0.55)
    return {"training": generated["train"], "evaluation": generated["eval"]}


# Multi-worker mirrored's hosts wait on each other's collectives: its jobs keep about one of
# the two cores busy (measured with TRAINER_TEST_CPU_LOG), so a one-core test may run beside.
ONE_CORE = {"multi_worker_mirrored on 2 hosts, 1 data host"}
# The cases the 2.21 line runs too (tests/lines.py): one host, and multi-worker mirrored.
ON_BOTH_LINES = {"single, hooks' parse_fn on 2 data hosts", "multi_worker_mirrored on 2 hosts, 1 data host"}


def marks_of(case: str) -> list:
    return ([pytest.mark.cores(1)] if case in ONE_CORE else []) + \
        ([pytest.mark.line("2.14", "2.21")] if case in ON_BOTH_LINES else [])


@pytest.mark.parametrize("case", [pytest.param(case, marks=marks_of(case)) for case in CASES])
def test_a_data_group_feeds_the_training_group(planted, tmp_path, case):
    training, data, extra = CASES[case]
    if extra.get("user_module") == "HOOKS":
        module = tmp_path / "parse_hooks.py"
        module.write_text(PARSE_HOOKS)
        extra = {**extra, "user_module": str(module)}
    hp = {"num_epochs": 3, "feature_size": 5721, "training_groups": "train", **extra}
    fed = run_local(tmp_path / "fed", planted, hp, groups=f"train={training},data={data}")
    assert fed.exit_code == 0, fed.log[-4000:]
    data_hosts = ", ".join(f"algo-{training + i + 1}" for i in range(data))
    assert f"through the data hosts' tf.data service ({data_hosts})" in fed.log
    assert fed.log.count("tf.data service worker") == data
    alone = run_local(tmp_path / "alone", planted, {k: v for k, v in hp.items() if k != "training_groups"},
                      hosts=training)
    assert alone.exit_code == 0, alone.log[-4000:]
    # Each process reads its own shard whole, in the same batches: the same steps.
    assert fed.metrics["steps"] == alone.metrics["steps"]
    auc = {"with a data group": fed.metrics["eval_auc"], "without": alone.metrics["eval_auc"]}
    print(case, auc)
    # The planted signal was learnt (chance is 0.5, the hidden model's own AUC near 0.82), so
    # that the two AUCs' closeness says something.
    assert alone.metrics["eval_auc"] > 0.72, auc
    assert abs(auc["with a data group"] - auc["without"]) <= AUC_TOLERANCE, auc


SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
@pytest.mark.parametrize("reader", ["own", "kit"])
def test_a_script_reads_through_the_data_hosts(aws_split, tmp_path, reader):
    """A script's own pipeline through trainer.kit.from_data_service, or trainer.kit.dataset:
    read on the data host, every example once a pass."""
    run = run_local(tmp_path / "job", aws_split, {
        "sagemaker_program": "data_service_train.py", "sagemaker_submit_directory": SCRIPTS, "reader": reader,
        "training_groups": "train"}, groups="train=1,data=1")
    assert run.exit_code == 0, run.log[-4000:]
    assert "algo-1: one pass of 8000 examples; TRAINER_DATA_SERVICE=grpc://algo-2:2226" in run.log
    assert "tf.data service worker" in run.log and "algo-2 is in instance group" not in run.log
    assert os.path.exists(os.path.join(run.job_dir, "model", "1", "saved_model.pb"))


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_script_that_serves_its_data_hosts_itself(aws_split, tmp_path):
    """data_hosts_run=script: the script runs on the data host too, as in AWS's container;
    no service is started for it, and the training reads its own input."""
    run = run_local(tmp_path / "job", aws_split, {
        "sagemaker_program": "data_service_train.py", "sagemaker_submit_directory": SCRIPTS,
        "training_groups": "train", "data_hosts_run": "script"}, groups="train=1,data=1")
    assert run.exit_code == 0, run.log[-4000:]
    assert "algo-2 is in instance group data: nothing to train here" in run.log
    assert "algo-1: one pass of 8000 examples; TRAINER_DATA_SERVICE=None" in run.log
    assert "tf.data service worker" not in run.log
