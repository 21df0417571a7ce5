"""`trainer bench`: every benchmark runs end to end on small sizes and writes its JSON,
Markdown report and charts. No speed is asserted here (figures come from full runs of the
benchmarks, reported by their users); what is checked is that each measures something."""
import json
import os
import subprocess

import pytest

from conftest import PROJECT_ROOT
from trainer import modes
from trainer.contract.hyperparameters import parse_hyperparameters
from trainer.cpu.settings import bfloat16_supported
from trainer.planner.planner import steps_per_execution
from trainer.tf_line import installed

pytestmark = pytest.mark.slow
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench(tmp_path, *args, timeout=900):
    """`./build.sh bench` on the line this test runs on (the 2.21 line's tier: `--line 2.21`)."""
    line = [] if installed().name == "2.14" else ["--line", installed().name]
    done = subprocess.run(["./build.sh", "bench", *line, *args, "--out", str(tmp_path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    name = args[0]
    with open(tmp_path / f"{name}.json") as f:
        result = json.load(f)
    report = (tmp_path / f"{name}.md").read_text()
    assert report.startswith(f"# trainer bench {name}") and f"![" in report
    with open(tmp_path / f"{name}.png", "rb") as f:
        assert f.read(8) == PNG_MAGIC
    assert result["machine"]["cpus"] >= 1
    return result, done.stdout


@pytest.mark.cores(1)
def test_input(tmp_path):
    result, out = bench(tmp_path, "input", "--rows", "6000", "--rounds", "1", "--train-rows", "4000",
                        "--rss-mb", "0.5,2")
    rates = {row["case"]: row["records_per_sec"] for row in result["rows"]}
    assert set(rates) == {"tfrecord-batch", "tfrecord-record", "libsvm-batch", "libsvm-record",
                          "tfrecord-batch-cached", "tfrecord-batch-pipe", "csv-batch", "tsv.gz-batch", "parquet-batch"}
    assert all(rate > 0 for rate in rates.values())
    assert result["ratios"]["tfrecord_batch_over_record"] > 0 and "tfrecord batch over record" in out
    trained = {(row["format"], row["cache_input"]): row for row in result["training"]}
    assert {f for f, _ in trained} == {"tfrecord", "libsvm", "csv", "tsv.gz", "parquet"}
    assert {cache for _, cache in trained} == {"false", "auto"} and trained["tfrecord", "auto"]["of_tfrecord"] == 1
    assert all(row["samples_per_sec"] > 0 for row in trained.values())
    sizes = [row["input_mb"] for row in result["memory"]]
    assert len(sizes) == 2 and sizes[0] < sizes[1] and all(row["peak_rss_mb"] > 100 for row in result["memory"])
    assert "Peak memory of a job on Parquet" in out and (tmp_path / "input-training.png").exists()


@pytest.mark.cores(1)
def test_ceiling(tmp_path):
    result, _ = bench(tmp_path, "ceiling", "--rows", "6000", "--steps", "30", "--rounds", "1")
    shares = {row["case"]: row["of_ceiling"] for row in result["rows"]}
    assert shares["ceiling"] == 1.0 and all(share > 0 for share in shares.values())


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(1)
def test_settings(tmp_path):
    # The cases the checks below read (each is a TensorFlow start); the others are the same mechanism.
    every_vcpu = max(2, int(os.environ.get("SM_NUM_CPUS", len(os.sched_getaffinity(0)))))  # as the job reads it
    result, out = bench(tmp_path, "settings", "--rows", "6000", "--steps", "30", "--rounds", "1",
                        "--cases", f"OMP_NUM_THREADS={every_vcpu}; inter_op_threads=1")
    rows = {row["case"]: row for row in result["rows"]}
    assert list(rows) == ["default", f"OMP_NUM_THREADS={every_vcpu}", "inter_op_threads=1"]
    assert rows["default"]["vs_default"] == 1.0 and all(row["samples_per_sec"] > 0 for row in rows.values())
    # The OpenMP variables are read where this line's TensorFlow runs on OpenMP; thread counts always.
    assert rows[f"OMP_NUM_THREADS={every_vcpu}"]["read_by_this_build"] is installed().openmp
    assert rows["inter_op_threads=1"]["read_by_this_build"] is True
    assert installed().describe() + "\n\nsetting | samples/s | vs default | read by this build" in out


@pytest.mark.cores(1)
def test_switches(tmp_path):
    result, _ = bench(tmp_path, "switches", "--steps", "30", "--rounds", "1",
                      "--cases", "float32,mixed_bfloat16,jit_compile")
    for row in result["rows"]:
        if row["case"] == "mixed_bfloat16" and not bfloat16_supported():
            assert row["error"] == "this CPU has no AVX-512, which oneDNN's bfloat16 kernels need", row
            continue
        assert row["samples_per_sec"] > 0 and row["loss"] is not None, row


@pytest.mark.cores(1)
def test_limit(tmp_path):
    result, table = bench(tmp_path, "limit", "--steps", "30", "--matmul-repeats", "30", "--rounds", "1")
    # The step against the figures kept in the repository (trainer/bench/recorded/limit.json).
    assert "Against the figures recorded on" in table and "in this run" in table
    assert set(result["against_recorded"]["moves"]) == {"samples_per_sec", "fraction_of_matmul"}
    # The profiler's count covers at least the MLP's matmuls, forward and backward.
    assert result["train_flops_per_sample"] >= 3 * result["mlp_forward_flops_per_sample"]
    assert 0 < result["fraction_of_matmul"] and result["matmul_flops_per_sec"] > 0


@pytest.mark.cores(1)
def test_ops_sums_the_profiled_op_time_by_type(tmp_path):
    result, _ = bench(tmp_path, "ops", "--steps", "40")
    shares = [row["share"] for row in result["by_type"]]
    assert sum(shares) == pytest.approx(1.0, abs=0.01) and shares == sorted(shares, reverse=True)
    ops = {row["op"]: row["part"] for row in result["by_type"]}
    assert ops.get("ResourceGather") == "embedding gather and row updates"  # the embedding lookup ran
    assert any(part == "MLP matmuls" for part in ops.values()) and result["op_time_per_step_us"] > 0
    # The op time is shared over every step the trace holds: the timed ones and fit_rate's first call.
    assert result["profiled_steps"] == 40 + steps_per_execution(parse_hyperparameters({}), modes.get("single"))


@pytest.mark.cores(1)
def test_peer_trains_deepctr_in_its_own_environment(tmp_path):
    # 64 steps an epoch: the first call of steps_per_execution steps is not timed, the second is.
    result, table = bench(tmp_path, "peer", "--train-rows", "16384", "--eval-rows", "2000", "--epochs", "2",
                      "--optimizer", "adam", "--learning-rate", "0.001", timeout=1800)
    models = {row["model"]: row for row in result["rows"]}
    assert set(models) == {"ours", "deepctr 0.9.4"} and result["optimizer"] == "adam"
    for row in models.values():
        assert row["samples_per_sec"] > 0 and 0.0 < row["eval_auc"] <= 1.0, row  # 64 steps: no skill asked
        assert len(row["eval_auc_by_epoch"]) == 2 and row["eval_auc_by_epoch"][-1] == row["eval_auc"], row
    assert "Against the figures recorded on" in table  # trainer/bench/recorded/peer.json


@pytest.mark.cores(1)
def test_build_compares_tensorflow_builds_in_their_own_processes(tmp_path):
    """One of the OpenMP settings, the job's defaults, on both builds (each pair of build and
    settings costs a TensorFlow start); the others are the same mechanism with other variables."""
    wrong = subprocess.run(["./build.sh", "bench", "build", "--settings", "job defaults,KMP_BLOCKTIME=1",
                            "--out", str(tmp_path)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900)
    assert wrong.returncode != 0 and "no setting named KMP_BLOCKTIME=1; choose among: job defaults," in wrong.stderr
    result, _ = bench(tmp_path, "build", "--steps", "30", "--rounds", "1", "--settings", "job defaults",
                      timeout=1800)
    assert {(row["build"], row["settings"]) for row in result["rows"]} == {
        (build, "job defaults") for build in ("intel-tensorflow 2.14.0", "tensorflow-cpu 2.14.1")}
    assert all(row["samples_per_sec"] > 0 for row in result["rows"])
    assert max(row["of_best"] for row in result["rows"]) == 1.0


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_scripts_runs_users_scripts_through_train_and_the_aws_way(tmp_path):
    result, _ = bench(tmp_path, "scripts", "--rows", "16384", timeout=1800)
    rows = {row["script"]: row for row in result["rows"]}
    # A Horovod script on both lines; on 2.21 also multi-worker mirrored, what AWS's 2.21 image
    # runs instead (it has no Horovod).
    multi = {"Horovod script, 2 ranks": 2}
    multi.update({"Multi-worker mirrored script, 2 hosts": 2} if installed().keras_3 else {})
    assert result["tensorflow_line"] == installed().name
    assert set(rows) == {"Keras script", "Keras script, data by trainer.kit", *multi}
    assert all(rows[name]["ranks"] == ranks for name, ranks in multi.items())
    # Both sides run the Keras a script gets on the line (not the container's own tf-keras on
    # 2.21), but on 2.21: the Horovod script's tf-keras on both (horovod.tensorflow.keras needs
    # it), and the multi-worker mirrored fit's Keras 3 through `train` (fixed there) against
    # the tf-keras its user must ask for on AWS's image.
    keras = {name: {"keras": "3." if installed().keras_3 else "2.14."} for name in rows}
    for side in keras.values():
        side["aws_keras"] = side["keras"]
    if installed().keras_3:
        keras["Horovod script, 2 ranks"] = {"keras": "tf-keras", "aws_keras": "tf-keras"}
        keras["Multi-worker mirrored script, 2 hosts"]["aws_keras"] = "tf-keras"
    assert all(row[side].startswith(keras[name][side]) for name, row in rows.items() for side in ("keras", "aws_keras")), rows
    for row in rows.values():  # each side reported its own speed; the ratio is of the two
        assert row["train_samples_per_sec"] > 0 and row["aws_samples_per_sec"] > 0
        assert row["ratio"] == pytest.approx(row["train_samples_per_sec"] / row["aws_samples_per_sec"], abs=0.01)
    # The kit script's counterpart in AWS's container is the plain Keras script: one measure for both.
    assert rows["Keras script"]["aws_samples_per_sec"] == rows["Keras script, data by trainer.kit"]["aws_samples_per_sec"]


@pytest.mark.cores(1)
def test_optimizers(tmp_path):
    result, _ = bench(tmp_path, "optimizers", "--optimizers", "adam,sgd", "--feature-sizes", "1000,10000",
                      "--steps", "20", "--rounds", "1")
    assert [row["optimizer"] for row in result["rows"]] == ["adam", "sgd"]
    assert all(row["samples_per_sec@1000"] > 0 and row["samples_per_sec@10000"] > 0 for row in result["rows"])


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_modes_reads_each_jobs_metrics(tmp_path):
    result, table = bench(tmp_path, "modes", "--modes", "single,horovod,parameter_server-pipe", "--train-rows", "16384",
                          "--eval-rows", "1000", "--epochs", "1", "--feature-size", "5721", "--signal", "0.55")
    rows = {row["mode"]: row for row in result["rows"]}
    assert rows["single"]["world_size"] == 1 and rows["horovod"]["world_size"] == 2
    assert (rows["parameter_server-pipe"]["hosts"], rows["parameter_server-pipe"]["input_mode"]) == (2, "Pipe")
    assert all(row["exit_code"] == 0 and row["train_samples_per_sec"] > 0 for row in rows.values())
    assert (result["feature_size"], result["signal"]) == (5721, 0.55) and 0.78 < result["oracle_eval_auc"] < 0.86
    assert f"The hidden model's own eval AUC (the oracle; no mode can beat it on average): {result['oracle_eval_auc']:.4f}" in table


@pytest.mark.cores(1)
def test_hetero_trains_with_and_without_a_data_host(tmp_path):
    result, out = bench(tmp_path, "hetero", "--train-rows", "8000", "--eval-rows", "2000", "--augment-rounds", "2")
    jobs = {row["job"]: row for row in result["rows"]}
    assert set(jobs) == {"training host alone", "training host + 1 data host"}
    assert all(row["samples_per_sec"] > 0 for row in jobs.values())
    # The same examples, batches and hooks: a data host changes where the input is made, not the model.
    assert abs(jobs["training host alone"]["eval_auc"] - jobs["training host + 1 data host"]["eval_auc"]) < 0.01
    assert result["speedup"] > 0 and "with a data host / alone, samples/s" in out


@pytest.mark.cores(2)  # each simulated host on a CPU of its own
def test_scale_compares_one_host_with_two_hosts_of_their_own_cpus(tmp_path):
    # No scaled-up host (--cpus 1): one job more of the baseline's own code path.
    result, table = bench(tmp_path, "scale", "--modes", "local_sgd", "--cpus", "1", "--train-rows", "8192",
                          "--eval-rows", "1000", "--epochs", "1")
    cases = {row["case"]: row for row in result["rows"]}
    assert list(cases) == ["1 host x 1 CPU, single", "2 one-host jobs x 1 CPU at once, no exchange",
                           "2 hosts x 1 CPU, local_sgd"]
    assert all(row["exit_code"] == 0 and row["train_samples_per_sec"] > 0 for row in cases.values())
    baseline, scaled_out = cases["1 host x 1 CPU, single"], cases["2 hosts x 1 CPU, local_sgd"]
    # Two one-host jobs of the same model and data: each learns what the baseline learns.
    apart = cases["2 one-host jobs x 1 CPU at once, no exchange"]
    assert apart["eval_auc"] == pytest.approx(baseline["eval_auc"], abs=0.01)
    assert scaled_out["of_ceiling"] == pytest.approx(scaled_out["train_samples_per_sec"] / apart["train_samples_per_sec"])
    assert "2 one-host jobs at once, each on a CPU of its own, trained" in table
    assert baseline["speedup"] == 1.0 and scaled_out["world_size"] == 2
    assert scaled_out["efficiency"] == pytest.approx(scaled_out["speedup"] / 2)
    assert scaled_out["eval_auc_change"] == pytest.approx(scaled_out["eval_auc"] - baseline["eval_auc"])
    # The planner's pick for 2 CPU hosts is what `trainer plan` says for the same job.
    assert result["planners_choice"] == "local_sgd"
    assert "For 2 CPU hosts of 1 CPU each the planner picks local_sgd" in table
    # `trainer plan --probe` on the same job (real Horovod ranks training as local SGD does),
    # checked against the cases.
    [probed] = result["probes"]
    measured, predicted = probed["measured"], probed["prediction"]
    assert measured["compute_cpus"] == 1 and measured["first_pass_share"] == 1.0  # one epoch: it reads the files
    assert measured["one_host_cached_samples_per_sec"] > 0 and measured["one_host_first_pass_samples_per_sec"] > 0
    assert measured["two_rank_step_seconds"] > 0
    assert measured["dense_bytes_per_step"] > 0 and measured["sparse_bytes_per_step"] > 0
    assert measured["variable_bytes"] > measured["dense_bytes_per_step"]
    assert predicted["hosts"] == 2 and predicted["mode"] == "local_sgd" and 0 < predicted["speedup"] <= 2
    [checked] = result["predictions"]
    assert checked["measured_speedup"] == pytest.approx(scaled_out["speedup"])
    assert checked["speedup_error"] == pytest.approx(predicted["speedup"] / scaled_out["speedup"] - 1, abs=1e-3)
    assert "`trainer plan --probe` predicted" in table and "error of the speed-up" in table
