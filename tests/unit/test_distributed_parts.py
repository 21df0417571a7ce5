"""The pieces the distributed modes share: padding for equal steps, aggregated evaluation,
the warm-up schedule."""
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from trainer.models.optimizers import WarmupSchedule
from trainer.training import equal_steps
from trainer.training.evaluation import Evaluator


def batches(count, size=4):
    features = {"ids": np.arange(count * size * 3).reshape(count * size, 3), "values": np.ones((count * size, 3), np.float32)}
    labels = (np.arange(count * size) % 2).astype(np.float32).reshape(-1, 1)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(size)


def test_padding_marks_real_batches_and_never_ends():
    padded = equal_steps.pad(batches(3))
    weights = [float(tf.reduce_max(w)) for _, _, w in padded.take(6)]
    assert weights == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    features, label, weight = next(iter(padded.skip(3)))
    assert features["ids"].shape == (1, 3) and label.shape == (1, 1) and float(weight[0, 0]) == 0.0


class TwoShards:
    """The sum over two evaluating processes, the other one's states given."""

    def __init__(self):
        self.other = None

    def __call__(self, values):
        return values if self.other is None else [a + b for a, b in zip(values, self.other)]


def test_evaluation_over_shards_equals_evaluation_of_the_whole():
    inputs = tf.keras.Input((1,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(inputs))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 1)).astype(np.float32)
    y = (rng.random((400, 1)) < 1 / (1 + np.exp(-2 * x))).astype(np.float32)
    data = lambda a, b: tf.data.Dataset.from_tensor_slices((x[a:b], y[a:b])).batch(64)  # noqa: E731

    whole = Evaluator(model, lambda values: values)(data(0, 400), "evaluation")
    reduce = TwoShards()
    first = Evaluator(model, reduce)
    first(data(0, 150), "evaluation")
    reduce.other = [v.numpy() for m in first.metrics for v in m.variables]
    combined = Evaluator(model, reduce)(data(150, 400), "evaluation")
    assert combined["examples"] == 400
    assert combined["auc"] == pytest.approx(whole["auc"], abs=1e-6)
    assert combined["logloss"] == pytest.approx(whole["logloss"], abs=1e-6)
    # a process with no evaluation data of its own still takes part (with the first shard's states)
    assert Evaluator(model, reduce)(None, "evaluation")["examples"] == 150


def test_warmup_ramps_to_the_scaled_rate():
    schedule = WarmupSchedule(0.001, 0.004, 100)
    assert [round(float(schedule(step)), 6) for step in (0, 50, 100, 1000)] == [0.001, 0.0025, 0.004, 0.004]


@pytest.mark.parametrize("tf_message, expected", [
    ("Collective ops is aborted by: Error reported from /job:worker/task:0: Task /job:worker/replica:0/task:0 "
     "heartbeat timeout. This indicates that the remote task has failed",
     "rank 0 on algo-1: rank 1 on algo-2 stopped answering (TensorFlow's heartbeat timed out): it failed, "
     "was preempted or crashed; see its own log"),
    ("Graph execution error:\nfailed to connect to all addresses\nAdditional GRPC error information from remote "
     "target /job:ps/replica:0/task:1/device:CPU:0 while calling /tensorflow.eager.EagerService/RunComponentFunction:",
     "rank 0 on algo-1: ps on algo-2 cannot be reached (gRPC: failed to connect to all addresses): it failed, "
     "was preempted or crashed; see its own log"),
    ("Collective ops is aborted by: Connection reset by peer\nAdditional GRPC error information from remote target "
     "/job:worker/replica:0/task:0 while calling /tensorflow.WorkerService/RecvBuf:",
     "rank 0 on algo-1: rank 1 on algo-2 cannot be reached (gRPC: Connection reset by peer): it failed, "
     "was preempted or crashed; see its own log"),
    ("Socket closed",
     "rank 0 on algo-1: lost contact with another process of the job (TensorFlow's UnavailableError, below); "
     "the one that failed first names itself in its own host's failure file or log"),
])
def test_a_lost_peer_is_named_from_tensorflows_words(tf_message, expected):
    from trainer.supervision.supervise import lost_peer_reason

    plan = SimpleNamespace(processes=[
        SimpleNamespace(tf_config={"task": {"type": "chief", "index": 0}}, name="rank 0 on algo-1"),
        SimpleNamespace(tf_config={"task": {"type": "worker", "index": 0}}, name="rank 1 on algo-2"),
        SimpleNamespace(tf_config={"task": {"type": "ps", "index": 1}}, name="ps on algo-2"),
    ])
    assert lost_peer_reason(plan, "rank 0 on algo-1", tf_message) == expected


@pytest.mark.parametrize("output, expected", [
    ("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
     (1, "was killed by signal 9 (SIGKILL)")),
    ("The first process to do so was:\n\n  Process name: [[30286,1],3]\n  Exit code:    143\n", (3, "exited with code 143")),
    ("Primary job terminated normally", None),
])
def test_mpirun_names_the_first_rank_that_failed(output, expected):
    from trainer.supervision.supervise import first_failed_rank

    assert first_failed_rank(output) == expected


def test_the_toolkits_mpi_runner_starts_the_module_the_plan_names():
    """Across hosts the toolkit's runner starts a file per rank: the plan's rank module's."""
    from test_planner import MPI_2, job

    from trainer.launch.toolkit_mpi import rank_program
    from trainer.planner.planner import make_plan

    plan = make_plan(job(hosts=2, sdk=MPI_2))
    assert plan.launch.command[-3:] == ("python", "-m", "trainer.worker")
    assert rank_program(plan.launch.command).endswith("trainer/worker.py")
    assert rank_program(("python", "-m", "trainer.script.process")).endswith("trainer/script/process.py")


def test_a_partitioned_kernel_starts_with_the_variance_it_has_whole():
    """Parameter servers split the DeepFM's first MLP kernel; Keras' Glorot would take each
    shard's fans (1.38x the variance in 2 shards, more in more). Each shard gets the whole
    kernel's scale."""
    import numpy as np
    import tensorflow as tf

    from trainer.modes.parameter_server import _fans, _shard_with_whole_fans

    assert _fans("fan_in", (312, 256)) == 312 and _fans("fan_avg", (312, 256)) == 284
    assert _fans("fan_out", (3, 3, 16, 32)) == 9 * 32 and _fans("fan_in", (7,)) == 7
    tf.keras.utils.set_random_seed(1)
    whole_limit = np.sqrt(6 / (312 + 256))  # Glorot uniform's bound of the whole kernel
    for initializer in (tf.keras.initializers.GlorotUniform(), tf.keras.initializers.HeNormal()):
        shards = [_shard_with_whole_fans(initializer, (312, 256), tf.float32, partition_shape=(78, 256),
                                         partition_offset=(78 * i, 0)).numpy() for i in range(4)]
        kernel = np.concatenate(shards)
        whole = initializer((312, 256), tf.float32).numpy()
        assert kernel.shape == whole.shape and abs(kernel.std() / whole.std() - 1) < 0.03, (kernel.std(), whole.std())
    glorot = np.concatenate([_shard_with_whole_fans(tf.keras.initializers.GlorotUniform(), (312, 256), tf.float32,
                                                    partition_shape=(156, 256), partition_offset=(156 * i, 0)).numpy()
                             for i in range(2)])
    assert np.abs(glorot).max() <= whole_limit  # drawn within the whole kernel's bound
