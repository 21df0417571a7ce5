"""Training scripts written for AWS's TensorFlow container, run unchanged through
`trainer local`: a Keras script, a shell entry point, Horovod on two ranks, multi-worker
mirrored and parameter servers on two hosts, and scripts that fail. Each checks what the
script was given (arguments, SM_* variables, TF_CONFIG, its rank's channel and shard, the
CPU settings) from what it recorded, and what it left (a SavedModel, the failure file)."""
import json
import os
import re

import pytest

from conftest import PROJECT_ROOT, run_local
from tensorboard_events import runs, series
from test_train_local import check_saved_model
from trainer.tf_line import installed

pytestmark = pytest.mark.slow
SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")


def script(program: str, **hyperparameters) -> dict:
    return {"sagemaker_program": program, "sagemaker_submit_directory": SCRIPTS, "epochs": 1,
            "model_dir": "/opt/ml/model", **hyperparameters}


def seen(job_dir, name: str) -> dict:
    with open(os.path.join(job_dir, "output", "data", f"seen-{name}.json")) as f:
        return json.load(f)


@pytest.mark.cores(1)
def test_a_keras_script_trains_and_saves(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("keras_train.py", batch_size=512, learning_rate=0.002))
    assert run.exit_code == 0, run.log[-3000:]
    assert "entry point: script keras_train.py: keras_train.py defines no hook" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert "eval_auc=" in run.log
    mine = seen(run.job_dir, "algo-1")
    assert mine["argv"] == ["--batch_size", "512", "--epochs", "1", "--learning_rate", "0.002",
                            "--model_dir", "/opt/ml/model"]
    env = mine["env"]
    assert env["SM_CHANNEL_TRAINING"] == os.path.join(run.job_dir, "input", "data", "training")
    assert env["SM_MODEL_DIR"] == os.path.join(run.job_dir, "model")
    assert json.loads(env["SM_HPS"])["batch_size"] == 512 and "SM_TRAINING_ENV" in env and "SM_USER_ARGS" in env
    assert env["TRAINER_CHANNELS"] == "training" and env["TRAINER_SHARD"] == "1,0"
    # Our CPU settings, for TensorFlow (which reads TF_NUM_*_THREADS when it starts) and OpenMP.
    assert int(env["TF_NUM_INTRAOP_THREADS"]) == max(1, len(os.sched_getaffinity(0)) - 1)
    assert "OMP_NUM_THREADS" in env and env["KMP_BLOCKTIME"] == "1"
    assert mine["cwd"] == SCRIPTS
    assert "wrote no model" not in run.log


@pytest.mark.cores(1)
def test_a_shell_entry_point(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("train.sh"))
    assert run.exit_code == 0, run.log[-3000:]
    assert "train.sh is not a Python file: run as a command" in run.log
    assert "shell entry point on algo-1 with: --epochs 1 --model_dir /opt/ml/model" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))


@pytest.mark.cores(1)
def test_a_failing_script_names_itself_first(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("keras_train.py", fail_with="the data has no label column"))
    assert run.exit_code == 1, run.log[-3000:]
    assert run.failure.splitlines()[0] == ("script keras_train.py (rank 0 on algo-1) exited with code 1: "
                                           "ValueError: the data has no label column")
    assert "Traceback" in run.failure  # its last lines of output follow


@pytest.mark.cores(1)
def test_a_script_s_own_failure_file_stays_first_and_whole(aws_split, tmp_path):
    """The script wrote SM_OUTPUT_DIR/failure itself, then failed: its words open the file
    (SageMaker's FailureReason); what the container saw follows, within the 1,024 characters."""
    run = run_local(tmp_path, aws_split, script("keras_train.py", fail_with="the data has no label column",
                                                write_failure_file=1))
    assert run.exit_code == 1, run.log[-3000:]
    shown = run.failure[:1024]
    assert shown.startswith("the script's own reason: the data has no label column\n\n"
                            "--- what the container saw ---\n"
                            "script keras_train.py (rank 0 on algo-1) exited with code 1: "
                            "ValueError: the data has no label column\n"), run.failure
    assert run.failure.count("the script's own reason") == 1 and "Traceback" in run.failure
    assert "FAILED (exit 1): the script's own reason: the data has no label column" in run.log  # trainer local's summary


MPI_2 = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": 2}


def test_a_horovod_script_on_two_ranks(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("hvd_train.py", **MPI_2))
    assert run.exit_code == 0, run.log[-3000:]
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    ranks = [seen(run.job_dir, f"rank{r}") for r in (0, 1)]
    assert [(s["rank"], s["size"], s["local_rank"]) for s in ranks] == [(0, 2, 0), (1, 2, 1)]
    assert [s["env"]["TRAINER_RANK"] for s in ranks] == ["0", "1"]
    assert [s["env"]["TRAINER_SHARD"] for s in ranks] == ["2,0", "2,1"]
    # Two processes share the host: each gets its half of the threads.
    assert all(int(s["env"]["TF_NUM_INTRAOP_THREADS"]) == max(1, len(os.sched_getaffinity(0)) // 2 - 1) for s in ranks)
    assert "[1,1]<stdout>:" in run.log or "[1,1]<stderr>:" in run.log  # the rank in front of its lines


def test_a_rank_that_fails_ends_the_job_and_is_named(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("hvd_train.py", fail_on_rank=1, **MPI_2))
    assert run.exit_code != 0, run.log[-3000:]
    first = run.failure.splitlines()[0]
    assert first.startswith("script hvd_train.py (rank 1 on algo-1) exited with code 1"), first
    assert first.endswith("RuntimeError: rank 1 cannot go on"), first


@pytest.mark.cores(1)
@pytest.mark.skipif(installed().keras_3, reason="Keras 2 is the 2.14 line's")
def test_a_keras_3_script_that_fails_inside_keras_2_is_pointed_to_the_2_21_image(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("keras3_style_train.py"))
    assert run.exit_code != 0, run.log[-3000:]
    first, second = run.failure.splitlines()[:2]
    assert first.startswith("script keras3_style_train.py (rank 0 on algo-1) exited with code 1: TypeError: 'str' "
                            "object is not callable"), first
    assert second == ("hint: keras3_style_train.py imports keras (line 6) and failed inside Keras, which on this "
                      "image's TensorFlow 2.14 line is Keras 2.14 (tf.keras); a script written for Keras 3 "
                      "(TensorFlow 2.16 or later) runs on the 2.21 image (tag 2.21-cpu)"), run.failure[:2000]
    assert second in run.log


# The reason a failure file gives first for ranks out of step (trainer.script.launch).
OUT_OF_STEP = ("the ranks ran different numbers of steps or collectives, for example EarlyStopping, a data shard "
               "or a save on one rank only (docs/faults.md, 'Ranks out of step')")


@pytest.mark.parametrize("out_of_step", [{"early_stopping_on_rank0": 1, "epochs": 4}, {"rank0_batches": 3}],
                         ids=["EarlyStopping on rank 0 only", "a shorter shard on rank 0"])
def test_a_rank_that_ended_early_is_named_as_the_cause(aws_split, tmp_path, out_of_step):
    """Rank 0 ends its script (exit 0) while rank 1 waits in an allreduce, which then fails
    with an error that names no rank: the failure file names rank 0 and why, first."""
    run = run_local(tmp_path, aws_split, script("hvd_train.py", **{**MPI_2, **out_of_step}))
    assert run.exit_code != 0, run.log[-3000:]
    lines = run.failure.splitlines()
    assert lines[0] == ("rank 0 on algo-1 ended its script (exit code 0) while rank 1 on algo-1 still waited in an "
                        f"allreduce: {OUT_OF_STEP}"), run.failure
    assert any(line.startswith("then script hvd_train.py (rank 1 on algo-1) exited with code") for line in lines), \
        run.failure


@pytest.mark.parametrize("out_of_step, first_line, then", [
    # Worker 1 ends its script while worker 0's save all-reduces the metrics' variables.
    ({"save_on_chief_only": 1},
     re.escape("rank 1 on algo-2 ended its script (exit code 0) while rank 0 on algo-1 still waited in an allreduce: "
               f"{OUT_OF_STEP}"),
     r"then script mwms_train\.py \(rank 0 on algo-1\) exited with code 1: "
     r"tensorflow\.python\.framework\.errors_impl\.UnavailableError"),
    # Worker 0 stops training after two epochs and saves, while worker 1 goes on training: either
    # worker's collective may be the first that TensorFlow aborts.
    ({"early_stopping_on_worker0": 1, "epochs": 4},
     r"rank ([01]) on algo-[12] and another rank met in different collectives \(an allreduce of shape \S+ against one "
     rf"of shape \S+\): {re.escape(OUT_OF_STEP)}",
     r"then script mwms_train\.py \(rank [01] on algo-[12]\) exited with code 1: "
     r"tensorflow\.python\.framework\.errors_impl\.InvalidArgumentError"),
], ids=["a save on the chief only", "EarlyStopping on worker 0 only"])
def test_workers_out_of_step_are_named_as_the_cause(aws_split, tmp_path, out_of_step, first_line, then):
    """Multi-worker mirrored on two hosts, the workers out of step: the job fails, and the
    first line of the failure file of the host that failed first names why, the script's
    own error below it; another host that failed for it carries that line in its first."""
    run = run_local(tmp_path, aws_split, script("mwms_train.py", sagemaker_multi_worker_mirrored_strategy_enabled="true",
                                                **out_of_step), hosts=2, timeout=400)
    assert run.exit_code != 0, run.log[-4000:]
    failures = {host: (tmp_path / host / "output" / "failure").read_text() for host in ("algo-1", "algo-2")
                if (tmp_path / host / "output" / "failure").exists()}  # a worker that ended well has none
    assert failures, run.log[-4000:]
    assert all(re.search(first_line, failure.splitlines()[0]) for failure in failures.values()), failures
    own = [failure.splitlines() for failure in failures.values() if re.fullmatch(first_line, failure.splitlines()[0])]
    assert any(any(re.match(then, line) for line in lines) for lines in own), failures


@pytest.mark.parametrize("program, sdk, names", [
    ("mwms_train.py", {"sagemaker_multi_worker_mirrored_strategy_enabled": "true"}, ("worker0", "worker1")),
    ("ps_train.py", {"sagemaker_parameter_server_enabled": "true"}, ("master0", "worker0")),
], ids=["multi_worker_mirrored", "parameter_server"])
def test_two_host_scripts_get_aws_s_tf_config(aws_split, tmp_path, program, sdk, names):
    # A TF 2 worker serves until stopped: it is, once its grace after the master's end is over.
    grace = {"ps_worker_grace_sec": 5} if program == "ps_train.py" else {}
    run = run_local(tmp_path, aws_split, script(program, **sdk, **grace), hosts=2, timeout=400)
    assert run.exit_code == 0, run.log[-4000:]
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    configs = [seen(os.path.join(tmp_path, host), name)["tf_config"] for host, name in zip(("algo-1", "algo-2"), names)]
    assert all(c["environment"] == "cloud" for c in configs)
    if program == "ps_train.py":
        assert configs[0]["cluster"] == {"master": ["algo-1:2222"], "ps": ["algo-1:2223", "algo-2:2223"],
                                         "worker": ["algo-2:2222"]}
        assert [c["task"] for c in configs] == [{"index": 0, "type": "master"}, {"index": 0, "type": "worker"}]
        assert ("script ps_train.py (rank 1 on algo-2) still running 5 s after the master's script ended: "
                "stopping it and this host's PS task") in run.log
    else:
        assert configs[0]["cluster"] == {"worker": ["algo-1:8890", "algo-2:8890"]}
        assert [c["task"]["index"] for c in configs] == [0, 1]


def test_a_parameter_server_estimator_script(aws_split, tmp_path):
    """In the style of the DeepFM demo: argparse at its top level and the Estimator API's
    model_fn(features, labels, mode, params) make it a script (never imported to decide);
    master and worker train through both hosts' parameter servers (AWS's TF_CONFIG), the
    master evaluates and exports."""
    model_dir = tmp_path / "model_dir"
    run = run_local(tmp_path / "job", aws_split, {
        "sagemaker_program": "deepfm_ps_estimator.py", "sagemaker_submit_directory": os.path.join(SCRIPTS, "aws_style"),
        "sagemaker_parameter_server_enabled": "true", "model_dir": str(model_dir), "max_steps": 40}, hosts=2)
    assert run.exit_code == 0, run.log[-4000:]
    assert ("entry point: script deepfm_ps_estimator.py: deepfm_ps_estimator.py defines model_fn(features, labels, "
            "mode, params) (the Estimator API's model_fn)") in run.log
    assert "distribution: parameter_server" in run.log
    saved = [folder for folder in os.listdir(os.path.join(run.job_dir, "model")) if folder.isdigit()]
    assert len(saved) == 1 and os.path.exists(os.path.join(run.job_dir, "model", saved[0], "saved_model.pb"))
    # Its variables were placed on both hosts' parameter servers: two shards in each checkpoint.
    final = open(model_dir / "checkpoint").readline().split('"')[1]
    assert int(final.rsplit("-", 1)[1]) >= 40 and (model_dir / f"{final}.data-00001-of-00002").exists()


def test_a_slow_parameter_server_worker_ends_its_script_by_itself(aws_split, tmp_path):
    """The worker host starts its Estimator after the master has trained to max_steps: as in
    AWS's container its script still runs to its end (it sees the last step on the parameter
    servers, which keep serving meanwhile), within ps_worker_grace_sec, and is not stopped."""
    run = run_local(tmp_path / "job", aws_split, {
        "sagemaker_program": "deepfm_ps_estimator.py", "sagemaker_submit_directory": os.path.join(SCRIPTS, "aws_style"),
        "sagemaker_parameter_server_enabled": "true", "model_dir": str(tmp_path / "model_dir"), "max_steps": 20,
        "worker_start_delay": 15, "ps_worker_grace_sec": 120}, hosts=2)
    assert run.exit_code == 0, run.log[-4000:]
    assert "algo-2: starting 15 s late" in run.log and "algo-2: the script's last line" in run.log, run.log[-4000:]
    assert "script deepfm_ps_estimator.py (rank 1 on algo-2) ended by itself" in run.log, run.log[-4000:]
    assert "still running" not in run.log


@pytest.mark.cores(1)
def test_hosts_that_end_apart_end_together(tmp_path):
    """No distribution, two hosts: the second host's script ends at once, the first saves
    the model 4 s later; the second host's `train` waits for it, then both end with success."""
    run = run_local(tmp_path, {}, {"sagemaker_program": "end_apart.py", "sagemaker_submit_directory": SCRIPTS,
                                   "seconds_first": 4, "seconds_others": 0}, hosts=2)
    assert run.exit_code == 0, run.log[-3000:]
    second = [line for line in run.log.splitlines() if line.startswith("[algo-2]")]
    waited = next(i for i, line in enumerate(second) if "this host's part has ended; waiting for algo-1" in line)
    assert any("every host's part has ended" in line for line in second[waited:]), "\n".join(second)
    for host in ("algo-1", "algo-2"):
        assert os.path.exists(os.path.join(tmp_path, host, "output", "success"))
    assert os.path.exists(os.path.join(tmp_path, "algo-1", "model", "model.json"))


def test_the_kit_writes_tensorboard_runs_for_a_script(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, script("kit_tensorboard_train.py", epochs=2, **MPI_2))
    assert run.exit_code == 0, run.log[-3000:]
    root = os.path.join(run.job_dir, "output", "tensorboard")
    assert runs(root) == {"train": 1, "epoch": 1, "rank-0": 1, "rank-1": 1}  # one writer per run
    loss = series(os.path.join(root, "train"), "loss")
    assert len(loss) >= 4 and [step for step, _ in loss] == sorted({step for step, _ in loss})
    val_auc = series(os.path.join(root, "epoch"), "val_auc")  # the script's own metric, by epoch
    assert [epoch for epoch, _ in val_auc] == [1, 2] and all(0.5 < auc <= 1 for _, auc in val_auc), val_auc
    assert all(series(os.path.join(root, f"rank-{rank}"), "samples_per_sec") for rank in (0, 1))


@pytest.mark.line("2.14", "2.21")
def test_the_kit_gives_each_rank_its_own_pipe_channel(aws_split, tmp_path):
    channels = {"training-1": aws_split["training"], "training-2": aws_split["evaluation"]}
    run = run_local(tmp_path, channels, script("kit_pipe_train.py", batch_size=500, **MPI_2), input_mode="Pipe")
    assert run.exit_code == 0, run.log[-3000:]
    ranks = [seen(run.job_dir, f"rank{r}") for r in (0, 1)]
    assert [(s["channels"], s["records"]) for s in ranks] == [("training-1", 8000), ("training-2", 2000)]
    assert "samples/sec=" in run.log
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert os.listdir(os.path.join(run.job_dir, "checkpoints"))


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(1)
def test_the_documented_kit_script(aws_split, tmp_path):
    """docs/your-script.md's trainer.kit script, as written, as a job's entry point in Pipe mode."""
    import re as regex

    page = open(os.path.join(PROJECT_ROOT, "docs", "your-script.md")).read()
    code = next(block for block in regex.findall(r"```python\n(.*?)```", page, regex.S) if block.startswith("# train.py"))
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(code)
    hp = {"sagemaker_program": "train.py", "sagemaker_submit_directory": str(source), "epochs": 2, "batch_size": 32}
    # The job's checkpointconfig.json LocalPath (the SDK's checkpoint_local_path) is where the kit saves.
    checkpoints = tmp_path / "spot-checkpoints"
    run = run_local(tmp_path / "job", aws_split, hp, input_mode="Pipe", checkpoint_local_path=checkpoints)
    assert run.exit_code == 0, run.log[-3000:]
    assert "entry point: script train.py" in run.log and regex.search(r"samples/sec=[0-9.]+", run.log)
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    assert runs(os.path.join(run.job_dir, "output", "tensorboard")) == {"train": 1, "epoch": 1}
    assert "checkpoint" in os.listdir(checkpoints) and not os.listdir(os.path.join(run.job_dir, "checkpoints"))
    again = run_local(tmp_path / "job", aws_split, {**hp, "epochs": 1}, input_mode="Pipe",
                      checkpoint_local_path=checkpoints)
    assert again.exit_code == 0 and f"resumed from {checkpoints}/ckpt-" in again.log, again.log[-3000:]
