"""Script mode's decisions, table-driven: hooks module or script (from the source, never
run), the mode and processes of a script's job, TF_CONFIG exactly as AWS's TF 2 container
writes it, each process's environment, the failure file's first line, and the SDK keys
this container does not run."""
import dataclasses
import json
import os

import pytest

from test_planner import job
from trainer.contract.hyperparameters import parse_hyperparameters
from trainer.errors import JobError
from trainer.launch.host import describe
from trainer.plan.clusters import aws_mwms_tf_config, aws_ps_tf_config
from trainer.planner.planner import make_plan
from trainer.tf_line import LEGACY_KERAS_ENV, LINES
from trainer.contract.user_code import EntryPoint, classify, classify_source

HOOKS_MODULE = "import tensorflow as tf\n\ndef model_fn(hp):\n    return None\n"
SCRIPT_WITH_GUARD = "import argparse\n\ndef main():\n    pass\n\nif __name__ == '__main__':\n    main()\n"
TOP_LEVEL_SCRIPT = "import os\nmodel_dir = os.environ['SM_MODEL_DIR']\nprint(model_dir)\n"

# In the style of the parameter-server DeepFM demo: argparse at the top, the Estimator
# API's model_fn, train_and_evaluate; TF 1 (tf.compat.v1, an app.run main) and TF 2 (Keras
# layers inside model_fn), each with and without a __main__ guard.
ESTIMATOR_ARGS = """import argparse
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", type=str)
args, _ = parser.parse_known_args()
"""
TF1_MODEL_FN = """
def model_fn(features, labels, mode, params):
    logits = tf.compat.v1.layers.dense(features["x"], 1)
    loss = tf.compat.v1.losses.sigmoid_cross_entropy(labels, logits)
    train_op = tf.compat.v1.train.AdagradOptimizer(params["lr"]).minimize(loss)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

def main(_):
    estimator = tf.estimator.Estimator(model_fn=model_fn, model_dir=args.model_dir, params={"lr": 0.01})
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
"""
TF2_MODEL_FN = """
def model_fn(features, labels, mode, params=None, config=None):
    logits = tf.keras.layers.Dense(1)(features["x"])
    loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(labels, logits, from_logits=True))
    optimizer = tf.keras.optimizers.Adagrad(0.01)
    train_op = optimizer.get_updates(loss, tf.compat.v1.trainable_variables())[0]
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

def main():
    estimator = tf.estimator.Estimator(model_fn, model_dir=args.model_dir)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
"""
TF1_ESTIMATOR = ESTIMATOR_ARGS + TF1_MODEL_FN + "\ntf.compat.v1.app.run(main)\n"
TF1_ESTIMATOR_GUARDED = ESTIMATOR_ARGS + TF1_MODEL_FN + "\nif __name__ == '__main__':\n    tf.compat.v1.app.run(main)\n"
TF2_ESTIMATOR = ("import tensorflow as tf\n" + TF2_MODEL_FN
                 + "\nestimator = tf.estimator.Estimator(model_fn)\ntf.estimator.train_and_evaluate(estimator, t, e)\n")
TF2_ESTIMATOR_GUARDED = ESTIMATOR_ARGS + TF2_MODEL_FN + "\nif __name__ == '__main__':\n    main()\n"
ESTIMATOR_MODEL_FN_ONLY = "import tensorflow as tf\n" + TF2_MODEL_FN.split("def main")[0]
KERAS_WITH_PARSE_HELPER = """import os
import tensorflow as tf

def parse_fn(record):
    return tf.io.parse_single_example(record, {"x": tf.io.FixedLenFeature([4], tf.float32)})

dataset = tf.data.TFRecordDataset(os.environ["SM_CHANNEL_TRAINING"]).map(parse_fn)
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.fit(dataset, epochs=1)
"""
HOOKS_WITH_CONSTANTS = '''"""My model's hooks."""
import tensorflow as tf
from tensorflow import keras

EMBEDDING_DIM: int = 8
FIELDS = ("user", "item", -1)
try:
    import horovod.tensorflow as hvd
except ImportError:
    hvd = None


@tf.function
def _helper(x):
    return x


class Tower(keras.layers.Layer):
    units = 4


def model_fn(hp):
    return None


def parse_fn(serialized, hp, window=None):
    return serialized


def optimizer_fn(hyperparameters):
    return None
'''
HOOKS_AND_GUARD = "def model_fn(hp):\n    return None\n\nif __name__ == '__main__':\n    print(model_fn({}))\n"
HOOKS_AND_TOP_LEVEL_CALL = "import logging\nlog = logging.getLogger(__name__)\n\ndef optimizer_fn(hp):\n    return None\n"
NESTED_MODEL_FN = "def build():\n    def model_fn(hp):\n        return None\n    return model_fn\nbuild()\n"
OVERRIDE = "set the hyperparameter entry_point_kind=hooks"


@pytest.mark.parametrize("source, kind, why, hint", [
    (HOOKS_MODULE, "hooks", "m.py defines model_fn at its top level and runs nothing when imported", False),
    (HOOKS_WITH_CONSTANTS, "hooks", "m.py defines model_fn, parse_fn, optimizer_fn at its top level", False),
    (TF1_ESTIMATOR, "script", "defines model_fn(features, labels, mode, params) (the Estimator API's model_fn), "
                              "not the hook model_fn(hyperparameters); runs code at its top level (line 4: parser = "
                              "argparse.ArgumentParser())", False),
    (TF1_ESTIMATOR_GUARDED, "script", "the Estimator API's model_fn", False),
    (TF2_ESTIMATOR, "script", "defines model_fn(features, labels, mode, params, config) (the Estimator API's "
                              "model_fn), not the hook model_fn(hyperparameters); runs code at its top level "
                              "(line 14: estimator = tf.estimator.Estimator(model_fn))", False),
    (TF2_ESTIMATOR_GUARDED, "script", "the Estimator API's model_fn", False),
    (ESTIMATOR_MODEL_FN_ONLY, "script", "m.py defines model_fn(features, labels, mode, params, config) "
                                        "(the Estimator API's model_fn), not the hook", False),
    (KERAS_WITH_PARSE_HELPER, "script", "defines parse_fn(record), not the hook parse_fn(serialized, hyperparameters); "
                                        "runs code at its top level (line 7: dataset = tf.data.TFRecordDataset(os.environ[\"SM_CHANNEL_...)",
     False),
    (SCRIPT_WITH_GUARD, "script", "defines no hook (model_fn, parse_fn, optimizer_fn); has a __main__ guard (line 6)",
     False),
    (TOP_LEVEL_SCRIPT, "script", "runs code at its top level (line 3: print(model_dir))", False),
    (NESTED_MODEL_FN, "script", "defines no hook", False),  # only top-level hooks count
    (HOOKS_AND_GUARD, "script", "m.py has a __main__ guard (line 4): a training script", True),
    (HOOKS_AND_TOP_LEVEL_CALL, "script", "runs code at its top level (line 2: log = logging.getLogger(__name__))",
     True),
], ids=["hooks", "hooks-constants-imports", "tf1-estimator", "tf1-estimator-guard", "tf2-estimator",
        "tf2-estimator-guard", "estimator-model-fn-only", "keras-parse-helper", "guard", "top-level",
        "nested-model-fn", "hooks-and-guard", "hooks-and-a-call"])
def test_kind_from_the_source(source, kind, why, hint):
    got_kind, got_why, hooks = classify_source(source, "m.py")
    assert got_kind == kind and why in got_why, got_why
    assert (OVERRIDE in got_why) == hint == (got_kind == "script" and bool(hooks)), got_why


def test_a_script_is_never_run_to_decide(tmp_path):
    (tmp_path / "train.py").write_text("open('ran', 'w').write('x')\nraise SystemExit(3)\n")
    entry = classify("train.py", str(tmp_path))
    assert entry.kind == "script" and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("files, program, override, kind, why", [
    ({"train.sh": "echo hi"}, "train.sh", "auto", "script", "not a Python file"),
    ({"setup.py": "", "train.py": HOOKS_MODULE}, "train.py", "auto", "script", "is a package (setup.py)"),
    ({"train.py": HOOKS_MODULE}, "train.py", "script", "script", "entry_point_kind=script (hyperparameter)"),
    ({"train.py": TOP_LEVEL_SCRIPT}, "train.py", "hooks", "hooks", "entry_point_kind=hooks (hyperparameter)"),
])
def test_kind_of_an_entry_point(tmp_path, files, program, override, kind, why):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    entry = classify(program, str(tmp_path), override)
    assert entry.kind == kind and why in entry.why


@pytest.mark.parametrize("files, program, message", [
    ({"other.py": ""}, "train.py", "entry point train.py (sagemaker_program) is not in {dir} (sagemaker_submit_directory); "
                                   "it holds: other.py"),
    ({"train.py": "def f(:\n"}, "train.py", "entry point train.py: line 1: "),
])
def test_bad_entry_points_are_clear_errors(tmp_path, files, program, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(JobError) as err:
        classify(program, str(tmp_path))
    assert str(err.value).startswith(message.format(dir=tmp_path))


def script_job(hosts=1, sdk=None, hp=None, channels=None, mode="File"):
    base = job(hosts=hosts, sdk=sdk, channels=channels, mode=mode)
    return dataclasses.replace(base, entry_point=EntryPoint("train.py", "/opt/ml/code", "script", "a script"),
                               hyperparameters=parse_hyperparameters(hp or {}, for_script=True))


MPI_2 = {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}
PS = {"sagemaker_parameter_server_enabled": True}
MWMS = {"sagemaker_multi_worker_mirrored_strategy_enabled": True}

# name: (job, mode, launch kind, [(host, role, rank, channels, shard, TF_CONFIG task)])
SCRIPT_CASES = {
    "1 host, no distribution: one process": (
        script_job(), "single", "script", [("1", "chief", 0, ("training",), (1, 0), None)]),
    "2 hosts, no distribution: the script on every host, as AWS's container": (
        script_job(hosts=2), "single", "script",
        [("1", "chief", 0, ("training",), (2, 0), None), ("2", "worker", 1, ("training",), (2, 1), None)]),
    "1 host, mpi 2 per host: our mpirun, ranks through trainer.script.process": (
        script_job(sdk=MPI_2), "horovod", "mpirun",
        [("1", "chief", 0, ("training",), (2, 0), None), ("1", "worker", 1, ("training",), (2, 1), None)]),
    "2 hosts, mpi 2 per host: the toolkit's MPI runner": (
        script_job(hosts=2, sdk=MPI_2), "horovod", "sagemaker_mpi", None),
    "2 hosts, parameter_server: master on the first host, a PS task on each": (
        script_job(hosts=2, sdk=PS), "parameter_server", "script",
        [("1", "chief", 0, ("training",), (2, 0), {"index": 0, "type": "master"}),
         ("1", "ps", None, (), (1, 0), {"index": 0, "type": "ps"}),
         ("2", "worker", 1, ("training",), (2, 1), {"index": 0, "type": "worker"}),
         ("2", "ps", None, (), (1, 0), {"index": 1, "type": "ps"})]),
    "2 hosts, multi_worker_mirrored: workers only, as AWS's TF 2 container": (
        script_job(hosts=2, sdk=MWMS), "multi_worker_mirrored", "script",
        [("1", "chief", 0, ("training",), (2, 0), {"index": 0, "type": "worker"}),
         ("2", "worker", 1, ("training",), (2, 1), {"index": 1, "type": "worker"})]),
    "Pipe mode, mpi 2 per host, a channel per rank: each rank its own FIFO": (
        script_job(sdk=MPI_2, mode="Pipe", channels={"training-1": "FullyReplicated", "training-2": "FullyReplicated"}),
        "horovod", "mpirun",
        [("1", "chief", 0, ("training-1",), (1, 0), None), ("1", "worker", 1, ("training-2",), (1, 0), None)]),
    "channels not named training: the script reads them itself": (
        script_job(channels={"images": "FullyReplicated"}), "single", "script",
        [("1", "chief", 0, (), (1, 0), None)]),
}


@pytest.mark.parametrize("name", SCRIPT_CASES)
def test_script_plan(name):
    the_job, mode, kind, processes = SCRIPT_CASES[name]
    plan = make_plan(the_job)
    assert (plan.mode, plan.launch.kind) == (mode, kind) and plan.entry.startswith("script train.py")
    if kind in ("mpirun", "sagemaker_mpi"):
        assert plan.launch.command[-3:] == ("python", "-m", "trainer.script.process")
    if processes is not None:
        assert [(p.host[-1], p.role, p.rank, p.channels, p.shard, p.tf_config and p.tf_config["task"])
                for p in plan.processes] == processes


@pytest.mark.parametrize("the_job, runs_script, says, never", [
    (script_job(hosts=2, sdk=MPI_2), True, "horovod (sagemaker_mpi_enabled: Horovod over MPI); 2 script "
     "process(es) per host, world size 4, the script sets its own batch size and learning rate (scale them by "
     "TRAINER_LEARNING_RATE_SCALE=4, or kit.learning_rate)", "global batch"),
    (dataclasses.replace(script_job(hosts=2, sdk=MPI_2), tf_line=LINES["2.21"]), True,
     "horovod (sagemaker_mpi_enabled: Horovod over MPI); 2 script process(es) per host", "tf-keras"),
    (dataclasses.replace(script_job(hosts=2, sdk=PS), tf_line=LINES["2.21"]), True,
     "; the script's tf.keras is tf-keras (Keras 2: Keras 3's fit cannot train under parameter_server; `import "
     "keras` stays Keras 3; TF_USE_LEGACY_KERAS=0 keeps tf.keras Keras 3)", "Horovod"),
    (dataclasses.replace(script_job(hosts=2, sdk=MWMS), tf_line=LINES["2.21"]), True,
     "multi_worker_mirrored (sagemaker_multi_worker_mirrored_strategy_enabled", "tf-keras"),
    (script_job(), True, "1 script process(es) per host, world size 1, the script sets its own batch size and "
     "learning rate (scale them by TRAINER_LEARNING_RATE_SCALE=1", "learning rate 0.001"),
    (job(hosts=2, sdk=MPI_2), False, "2 training process(es) per host, world size 4, global batch 1024, learning "
     "rate 0.004 (x4)", "TRAINER_LEARNING_RATE_SCALE"),
], ids=["script-mpi", "script-mpi-2.21", "script-ps-2.21", "script-mwms-2.21",
    "script-one-host", "built-in-mpi"])
def test_the_logs_distribution_line_says_what_applies(the_job, runs_script, says, never, monkeypatch):
    """A script picks its own batch size and learning rate: its line says what it is given instead."""
    monkeypatch.delenv(LEGACY_KERAS_ENV, raising=False)  # as in a container whose job did not set it
    line = describe(make_plan(the_job), runs_script)
    assert says in line and never not in line, line


# What sagemaker-tensorflow-training 20.5.0's _build_tf_config_for_ps and _for_mwms return.
AWS_PS_3_HOSTS = {"master": ["algo-1:2222"], "ps": ["algo-1:2223", "algo-2:2223", "algo-3:2223"],
                  "worker": ["algo-2:2222", "algo-3:2222"]}


@pytest.mark.parametrize("hosts, current, ps_task, expected", [
    (["algo-1"], "algo-1", False, {"cluster": {"master": ["algo-1:2222"]}, "environment": "cloud",
                                   "task": {"index": 0, "type": "master"}}),
    (["algo-1", "algo-2", "algo-3"], "algo-1", False,
     {"cluster": AWS_PS_3_HOSTS, "environment": "cloud", "task": {"index": 0, "type": "master"}}),
    (["algo-1", "algo-2", "algo-3"], "algo-3", False,
     {"cluster": AWS_PS_3_HOSTS, "environment": "cloud", "task": {"index": 1, "type": "worker"}}),
    (["algo-1", "algo-2", "algo-3"], "algo-2", True,
     {"cluster": AWS_PS_3_HOSTS, "environment": "cloud", "task": {"index": 1, "type": "ps"}}),
])
def test_parameter_server_tf_config_is_aws_s(hosts, current, ps_task, expected):
    assert aws_ps_tf_config(hosts, current, ps_task) == expected
    assert json.loads(json.dumps(expected)) == expected


def test_multi_worker_mirrored_tf_config_is_aws_s():
    assert aws_mwms_tf_config(("algo-1", "algo-2"), "algo-2") == {
        "cluster": {"worker": ["algo-1:8890", "algo-2:8890"]}, "environment": "cloud",
        "task": {"index": 1, "type": "worker"}}


@pytest.mark.parametrize("the_job, message", [
    (script_job(sdk={"sagemaker_distributed_dataparallel_enabled": True}),
     "sagemaker_distributed_dataparallel_enabled: SageMaker's distributed data parallel library"),
    (script_job(hp={"mp_parameters": '{"partitions": 2}'}),
     "mp_parameters: SageMaker's model parallel library (smdistributed.modelparallel) is not in this image"),
    (script_job(hp={"distribution": "mirrored"}),
     "hyperparameter 'distribution': mirrored builds the container's own model"),
    (script_job(sdk=MPI_2, mode="Pipe"), "Pipe mode: 1 training channel(s) (training) for 2 training processes"),
])
def test_what_a_script_job_cannot_do_is_a_clear_error(the_job, message):
    with pytest.raises(JobError) as err:
        make_plan(the_job)
    assert str(err.value).startswith(message), str(err.value)


def test_a_script_s_own_hyperparameters_never_end_the_job():
    hp = parse_hyperparameters({"optimizer": "rmsprop-with-warmup", "epochs": "3", "batch_size": "64"},
                               for_script=True)
    assert hp.optimizer == "adam" and hp.batch_size == 64 and hp.extra == {"epochs": "3"}
    with pytest.raises(JobError):  # the same value for the built-in model is an error
        parse_hyperparameters({"optimizer": "rmsprop-with-warmup"})


def test_each_process_environment(tmp_path, monkeypatch):
    """What a script process sees: the toolkit's SM_* variables, AWS's TF_CONFIG, our CPU
    settings and its own channel and shard."""
    from trainer.local.runner import LocalJob
    from trainer.contract.job import read_job
    from trainer.script import process as script_process

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT_WITH_GUARD)
    data = tmp_path / "data.tfrecords"
    data.write_bytes(b"")
    local = LocalJob({"training": [str(data)]}, {"sagemaker_program": "train.py",
                                                 "sagemaker_submit_directory": str(code),
                                                 "sagemaker_multi_worker_mirrored_strategy_enabled": "true",
                                                 "epochs": "3", "model_dir": "/opt/ml/model"}, hosts=2)
    folders = local.lay_out(str(tmp_path / "job"))
    the_job = read_job(folders["algo-2"])
    plan = make_plan(the_job)
    process = plan.on_host("algo-2")[0]
    env = script_process.environment(the_job, plan, process)
    assert json.loads(env["TF_CONFIG"])["task"] == {"index": 1, "type": "worker"}
    assert env["SM_CURRENT_HOST"] == "algo-2" and json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"]
    assert env["SM_CHANNEL_TRAINING"] == os.path.join(folders["algo-2"], "input", "data", "training")
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "model_dir": "/opt/ml/model"}
    assert env["TRAINER_RANK"] == "1" and env["TRAINER_SHARD"] == "2,1" and env["TRAINER_CHANNELS"] == "training"
    assert int(env["TF_NUM_INTRAOP_THREADS"]) >= 1 and int(env["OMP_NUM_THREADS"]) >= 1
    command = script_process.command(the_job)
    assert command[1:] == ["train.py", "--epochs", "3", "--model_dir", "/opt/ml/model"]


@pytest.mark.parametrize("environ, expected", [
    ({"SAGEMAKER_REGION": "eu-west-1"}, {"S3_REGION": "eu-west-1", "S3_USE_HTTPS": "1"}),  # as AWS's toolkit
    ({"AWS_ENDPOINT_URL_S3": "http://10.89.0.5:9000", "AWS_REGION": "us-east-1"},  # the SDK's local mode
     {"S3_REGION": "us-east-1", "S3_USE_HTTPS": "0", "S3_ENDPOINT": "http://10.89.0.5:9000"}),
    ({"AWS_ENDPOINT_URL": "https://s3.example.com", "SAGEMAKER_REGION": "us-west-2"},
     {"S3_REGION": "us-west-2", "S3_USE_HTTPS": "1", "S3_ENDPOINT": "https://s3.example.com"}),
    ({"AWS_ENDPOINT_URL_S3": "http://minio:9000", "S3_ENDPOINT": "other:1234", "S3_USE_HTTPS": "1",
      "S3_REGION": "x"}, {}),  # the job's own settings win
])
def test_a_script_s_s3_settings(environ, expected):
    """What tensorflow-io's S3 filesystem reads: AWS's toolkit's S3_REGION and S3_USE_HTTPS,
    and the endpoint boto3 is given, for TensorFlow too."""
    from trainer.contract.s3 import s3_environment

    assert s3_environment(environ) == expected


@pytest.mark.parametrize("hyperparameters, model_dir", [
    ({"model_dir": "s3://bucket/job/model"}, "s3://bucket/job/model"),
    ({"model_dir": "s3://bucket/tuning", "_tuning_objective_metric": "accuracy"},
     "s3://bucket/tuning/tuning-job-007/model"),  # each job of a tuning job its own, as AWS's container
    ({"model_dir": "/opt/ml/model", "_tuning_objective_metric": "accuracy"}, "/opt/ml/model"),
])
def test_model_dir_given_to_a_script(tmp_path, monkeypatch, hyperparameters, model_dir):
    from trainer.local.runner import LocalJob
    from trainer.contract.job import read_job
    from trainer.script import process as script_process

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT_WITH_GUARD)
    LocalJob({}, {"sagemaker_program": "train.py", "sagemaker_submit_directory": str(code),
                  **hyperparameters}).lay_out(str(tmp_path / "job"))
    monkeypatch.setenv("TRAINING_JOB_NAME", "tuning-job-007")
    command = script_process.command(read_job(str(tmp_path / "job")))
    assert command[command.index("--model_dir") + 1] == model_dir


@pytest.mark.parametrize("output, rank, first_line", [
    ("Traceback (most recent call last):\n  File \"train.py\", line 3\nKeyError: 'SM_CHANNEL_X'\n", None,
     "script train.py (chief on algo-1) exited with code 1: KeyError: 'SM_CHANNEL_X'"),
    ("[1,0]<stdout>:epoch 1\n[1,1]<stderr>:ValueError: bad shape\n[1,0]<stderr>:RuntimeError: later\n", 1,
     "script train.py (chief on algo-1) exited with code 1: ValueError: bad shape"),
    ("[1,1]<stderr>:RuntimeError[1,1]<stderr>:: [1,1]<stderr>:rank 1 cannot go on[1,1]<stderr>:\n[1,0]<stdout>:ok\n",
     1, "script train.py (chief on algo-1) exited with code 1: RuntimeError: rank 1 cannot go on"),
    ("Traceback:\nUnavailableError: Graph execution error:\nThe error could be from a previous operation.\n", None,
     "script train.py (chief on algo-1) exited with code 1: UnavailableError: Graph execution error:"),
    ("Epoch 3/1000\n250/250 - 2s - loss: 0.52\n", None, "script train.py (chief on algo-1) exited with code 1"),
    ("./train.sh: line 2: nosuchcommand: command not found\n", None,
     "script train.py (chief on algo-1) exited with code 1: ./train.sh: line 2: nosuchcommand: command not found"),
])
def test_failure_first_line(tmp_path, output, rank, first_line):
    from trainer.script.launch import output_of_rank, report_script_failure

    the_job = dataclasses.replace(script_job(), output_dir=str(tmp_path))
    reason = report_script_failure(the_job, "chief on algo-1", "exited with code 1", output_of_rank(output, rank))
    failure = (tmp_path / "failure").read_text()
    assert reason == first_line and failure.splitlines()[0] == first_line
    assert "its last lines of output:" in failure


SHUT_DOWN = ("[1,1]<stderr>:Horovod has been shut down. This was caused by an exception on one of the ranks or an "
             "attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution.\n"
             "[1,1]<stderr>:\t [[{{node DistributedAdam_Allreduce/cond_4/HorovodAllreduce_grads_6_0}}]]\n")
ENDED_0 = "[1,0]<stderr>:trainer: rank 0's script ended by itself (exit code 0)\n"


@pytest.mark.parametrize("output, failed, ended_first", [
    (ENDED_0 + SHUT_DOWN, 1, 0),  # rank 0 ended, rank 1's allreduce found Horovod shut down
    (SHUT_DOWN, 1, None),  # no rank ended by itself: another failed (its exception is in its output)
    (ENDED_0 + "[1,1]<stderr>:ValueError: bad shape\n", 1, None),  # rank 1's own error
    ("[1,1]<stderr>:trainer: rank 1's script ended by itself (exit code 0)\n" + SHUT_DOWN, 1, None),  # itself
    (ENDED_0 + SHUT_DOWN, None, None),  # mpirun named no rank
])
def test_a_rank_that_ended_while_another_waited(output, failed, ended_first):
    from trainer.script.launch import rank_that_ended_first

    assert rank_that_ended_first(output, failed) == ended_first


TF_UNAVAILABLE = ("tensorflow.python.framework.errors_impl.UnavailableError: {{function_node "
                  "__wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/replica:0/task:0/device:CPU:0}} "
                  "Collective ops is aborted by: Error reported from /job:worker/task:1: Task "
                  "/job:worker/replica:0/task:1 heartbeat timeout.\n")
TF_MISMATCH = ("tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node "
               "__wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/replica:0/task:1/device:CPU:0}} "
               "Collective ops is aborted by: Shape mismatch in the collective instance 712. Op at device "
               "/job:worker/replica:0/task:1/device:CPU:0 expected shape [200] but another member in the group "
               "expected shape []. This is likely due to different input shapes at different members of the "
               "collective op.\n")
OUT_OF_STEP = ("the ranks ran different numbers of steps or collectives, for example EarlyStopping, a data shard "
               "or a save on one rank only (docs/faults.md, 'Ranks out of step')")


@pytest.mark.parametrize("output, ended_first, first_line", [
    # Horovod: rank 0 ended; rank 1's allreduce found Horovod shut down.
    (SHUT_DOWN.replace("[1,1]<stderr>:", ""), "rank 0 on algo-1",
     f"rank 0 on algo-1 ended its script (exit code 0) while rank 1 on algo-1 still waited in an allreduce: {OUT_OF_STEP}"),
    # Multi-worker mirrored: the other worker's script ended; this one's all-reduce lost it.
    (TF_UNAVAILABLE, "rank 0 on algo-2",
     f"rank 0 on algo-2 ended its script (exit code 0) while rank 1 on algo-1 still waited in an allreduce: {OUT_OF_STEP}"),
    # Multi-worker mirrored: the workers met in different collectives (one of them stopped training early).
    (TF_MISMATCH, "",
     "rank 1 on algo-1 and another rank met in different collectives (an allreduce of shape [200] against one of "
     f"shape []): {OUT_OF_STEP}"),
])
def test_a_rank_out_of_step_is_named_first(tmp_path, output, ended_first, first_line):
    from trainer.script.launch import report_script_failure

    the_job = dataclasses.replace(script_job(), output_dir=str(tmp_path))
    reason = report_script_failure(the_job, "rank 1 on algo-1", "exited with code 1", output, ended_first=ended_first)
    assert reason == first_line
    failure = (tmp_path / "failure").read_text()
    assert failure.splitlines()[0] == reason and "\nthen script train.py (rank 1 on algo-1) exited with code 1" in failure


@pytest.mark.parametrize("output, failed", [
    (SHUT_DOWN, True), (TF_UNAVAILABLE, True), (TF_MISMATCH, True),
    ("ValueError: bad shape\n", False), ("tensorflow.python.framework.errors_impl.UnavailableError: no file\n", False),
])
def test_which_failures_are_a_collective_s(output, failed):
    from trainer.script.launch import collective_failed

    assert collective_failed(output) == failed


@pytest.mark.parametrize("the_job, leader, watch_peers", [
    (script_job(), None, False),  # one host: nobody to watch
    (script_job(hosts=2), None, True),  # a script on every host: each watches the others
    (script_job(hosts=2, sdk=MWMS), None, True),
    (script_job(hosts=2, sdk=PS), "algo-1", True),  # the others follow the master's host, which watches them
    (script_job(hosts=2, sdk=MPI_2), "algo-1", False),  # the others follow the MPI master
    (job(hosts=2, sdk=MWMS), None, False),  # the built-in model: its workers end together
])
def test_who_follows_whom(the_job, leader, watch_peers):
    plan = make_plan(the_job)
    assert (plan.leader, plan.watch_peers) == (leader, watch_peers)


def test_the_container_s_own_settings_are_not_the_script_s_arguments(tmp_path):
    from trainer.script import process as script_process
    from trainer.contract.job import read_job
    from trainer.local.runner import LocalJob

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT_WITH_GUARD)
    data = tmp_path / "data.tfrecords"
    data.write_bytes(b"")
    local = LocalJob({"training": [str(data)]}, {"sagemaker_program": "train.py", "sagemaker_submit_directory": str(code),
                                                 "peer_wait_sec": "60", "stop_grace_sec": "30", "batch_size": "64",
                                                 "warmup_steps": "10", "stall_timeout_sec": "120"})
    the_job = read_job(local.lay_out(str(tmp_path / "job"))["algo-1"])
    assert the_job.hyperparameters.stop_grace_sec == 30.0  # the container's
    assert the_job.hyperparameters.stall_timeout_sec == 120.0
    assert script_process.command(the_job)[2:] == ["--batch_size", "64", "--warmup_steps", "10"]
    env = script_process.environment(the_job, make_plan(the_job), make_plan(the_job).processes[0])
    assert json.loads(env["SM_HPS"]) == {"batch_size": 64, "warmup_steps": 10}


@pytest.mark.parametrize("hooks, says_how", [((), False), (("model_fn",), True)])
def test_a_script_that_wrote_no_model_and_defines_hooks_is_told_how_to_train_them(tmp_path, caplog, hooks, says_how):
    from trainer.script.launch import warn_if_no_model

    entry = EntryPoint("my_model.py", str(tmp_path), "script", "runs code at its top level", hooks)
    warn_if_no_model(str(tmp_path), entry)
    assert "the script wrote no model under SM_MODEL_DIR" in caplog.text
    assert ("my_model.py defines model_fn: if it is a module of hooks for the container to train, set the "
            "hyperparameter entry_point_kind=hooks" in caplog.text) == says_how


KERAS_2_14_FAILURE = """Traceback (most recent call last):
  File "/opt/ml/code/train.py", line 9, in <module>
    model.fit(x, y)
  File "/usr/local/lib/python3.10/dist-packages/keras/src/utils/traceback_utils.py", line 70, in error_handler
    raise e.with_traceback(filtered_tb) from None
TypeError: 'str' object is not callable
"""
SCRIPT_S_OWN_FAILURE = """Traceback (most recent call last):
  File "/opt/ml/code/train.py", line 9, in <module>
    raise ValueError("bad data")
ValueError: bad data
"""


@pytest.mark.parametrize("line, keras_module, output, hinted", [
    ("2.14", "line 1: keras", KERAS_2_14_FAILURE, True),
    ("2.14", "", KERAS_2_14_FAILURE, False),            # tf.keras only: written for Keras 2
    ("2.14", "line 1: keras", SCRIPT_S_OWN_FAILURE, False),  # failed in its own code
    ("2.21", "line 1: keras", KERAS_2_14_FAILURE, False),    # Keras 3 already
])
def test_a_keras_script_that_fails_inside_keras_2_is_pointed_to_the_2_21_image(line, keras_module, output, hinted):
    from trainer.script.launch import keras_line_hint

    entry = EntryPoint("train.py", "/opt/ml/code", "script", "a script", keras_module=keras_module)
    the_job = dataclasses.replace(job(line=line), entry_point=entry)
    hint = keras_line_hint(the_job, output)
    assert hint == ("hint: train.py imports keras (line 1) and failed inside Keras, which on this image's "
                    "TensorFlow 2.14 line is Keras 2.14 (tf.keras); a script written for Keras 3 (TensorFlow 2.16 "
                    "or later) runs on the 2.21 image (tag 2.21-cpu)" if hinted else "")
