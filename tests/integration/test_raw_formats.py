"""Click logs as they land: the built-in model trains on raw CSV, TSV.gz and Parquet in File,
FastFile and Pipe mode, on one host and two, in every mode; as well as on the same rows
converted to TFRecord; every row once an epoch across the ranks; and the model it exports
scores raw rows as training parsed them."""
import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from conftest import PROJECT_ROOT, run_local
from trainer.data import convert, datagen

pytestmark = pytest.mark.slow
VOCABULARY = 5721  # datagen's ids: each a categorical value
FEATURE_SIZE = 65536  # the model's: hashed into, few values share an id
HP = {"feature_size": FEATURE_SIZE, "num_epochs": 2, "batch_size": 512, "log_steps": 20, "learning_rate": 0.005}
# The same rows as TFRecord give the same features in the same order: the same model, but for
# the floating-point order of threads' sums.
AUC_TOLERANCE = 0.002
FORMATS = ("csv", "tsv.gz", "parquet")


def raw_data(folder, data_format: str, train_rows=40_000, eval_rows=10_000, files=2) -> dict:
    """datagen's planted rows as raw Criteo columns: CSV with a header, TSV without, gzip-compressed,
    Parquet in row groups of 4,096."""
    plain = data_format.removesuffix(".gz")
    generated = datagen.generate(str(folder), train_rows, eval_rows, files=files, data_format=plain,
                                 feature_size=VOCABULARY, signal=0.55, header=plain == "csv", row_group_rows=4096)
    if data_format.endswith(".gz"):
        for path in generated["files"]:
            with open(path, "rb") as source, gzip.open(path + ".gz", "wb", compresslevel=1) as target:
                shutil.copyfileobj(source, target)
            os.remove(path)
    return {"training": generated["train"], "evaluation": generated["eval"]}


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return {data_format: raw_data(tmp_path_factory.mktemp(data_format.replace(".", "-")), data_format)
            for data_format in FORMATS}


@pytest.fixture(scope="module")
def converted(raw, tmp_path_factory):
    """The Parquet rows converted to TFRecord, a file for each file (the same order)."""
    folders = {}
    for channel, folder in raw["parquet"].items():
        out = tmp_path_factory.mktemp(f"tfrecord-{channel}")
        for name in sorted(os.listdir(folder)):
            stem = name.split(".")[0]
            written = convert.convert([os.path.join(folder, name)], str(out / stem), num_files=1, workers=1,
                                      feature_size=FEATURE_SIZE)["files"]
            os.rename(written[0], out / f"{stem}.tfrecord")  # the channel's files in the Parquet files' order
            os.rmdir(out / stem)
        folders[channel] = str(out)
    return folders


@pytest.fixture(scope="module")
def tfrecord_runs(converted, tmp_path_factory):
    """The converted rows' jobs: the AUC the raw formats' are held to, per input mode and hosts."""
    runs = {}
    for key in (("File", 1), ("Pipe", 1), ("File", 2)):
        run = run_local(tmp_path_factory.mktemp(f"tfrecord-{key[0]}-{key[1]}"), converted, HP, input_mode=key[0],
                        hosts=key[1], host_cpus=1 if key[1] == 2 else 0)
        assert run.exit_code == 0, run.log[-3000:]
        runs[key] = run
    return runs


def assert_same_model_as_tfrecord(run, baseline):
    assert run.exit_code == 0 and run.succeeded, run.log[-4000:]
    assert run.metrics["steps"] == baseline.metrics["steps"], (run.metrics, baseline.metrics)
    auc = {"raw": run.metrics["eval_auc"], "tfrecord": baseline.metrics["eval_auc"]}
    assert abs(auc["raw"] - auc["tfrecord"]) <= AUC_TOLERANCE, auc
    assert auc["raw"] > 0.6, auc


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(1)
@pytest.mark.parametrize("input_mode", ["File", "FastFile", "Pipe"])
@pytest.mark.parametrize("data_format", FORMATS)
def test_raw_rows_train_as_their_tfrecord_conversion_on_one_host(raw, tfrecord_runs, tmp_path, data_format,
                                                                 input_mode):
    # A .gz object in Pipe mode streams decompressed where the channel says CompressionType Gzip.
    gzip_pipe = data_format.endswith(".gz") and input_mode == "Pipe"
    config = [f"{channel}:CompressionType=Gzip" for channel in raw[data_format]] if gzip_pipe else []
    run = run_local(tmp_path, raw[data_format], HP, input_mode=input_mode, channel_config=config)
    assert_same_model_as_tfrecord(run, tfrecord_runs["Pipe" if input_mode == "Pipe" else "File", 1])
    plain = data_format.removesuffix(".gz")
    assert f"input: channel(s) 'training', {input_mode} mode, {plain}" in run.log
    assert "input: column I13 (13) -> numeric field 12: id 12, value log(1 + max(I13, 0)) (missing: 0)" in run.log


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(2)  # a CPU of its own for each host
@pytest.mark.parametrize("data_format", FORMATS)
def test_raw_rows_train_on_two_hosts_with_auto(raw, tfrecord_runs, tmp_path, data_format):
    run = run_local(tmp_path, raw[data_format], HP, hosts=2, host_cpus=1)
    assert_same_model_as_tfrecord(run, tfrecord_runs["File", 2])
    assert run.metrics["world_size"] == 2


def score_through_the_pipeline(model, path):
    """Each row's score as training parses it (the model's own inputs), in the file's order."""
    from trainer.contract.job import Channel
    from trainer.data.pipeline import EpochInput, InputSpec

    spec = InputSpec.for_channels([Channel("evaluation", "File", "FullyReplicated", "", os.path.dirname(path))],
                                  None)
    spec = dataclasses.replace(spec, files=(path,))
    scores = [model.signatures["features"](ids=f["ids"], values=f["values"])["probability"].numpy()[:, 0]
              for f, _ in EpochInput(spec, spec.parser(39, FEATURE_SIZE), 1000).dataset(0)]
    return np.concatenate(scores)


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(1)
def test_a_parquet_log_in_pipe_mode_trains_and_its_model_takes_the_raw_columns(tmp_path):
    """Parquet objects back to back on the FIFOs, as SageMaker streams them; the exported
    model's signatures score a row given by its columns and as a CSV line as training parsed it."""
    data = raw_data(tmp_path / "data", "parquet", train_rows=20_000, eval_rows=2_000, files=3)
    run = run_local(tmp_path / "job", data, {**HP, "num_epochs": 1}, input_mode="Pipe")
    assert run.exit_code == 0 and run.succeeded, run.log[-4000:]
    assert run.metrics["steps"] == 40 and run.metrics["eval_auc"] > 0.6, run.metrics
    assert "input: channel(s) 'training', Pipe mode, parquet (by its ContentType application/x-parquet)" in run.log
    model = tf.saved_model.load(os.path.join(run.job_dir, "model", "1"))
    files = sorted(os.path.join(data["evaluation"], name) for name in os.listdir(data["evaluation"]))
    expected = np.concatenate([score_through_the_pipeline(model, path) for path in files])
    rows = [row for path in files for row in pq.read_table(path).to_pylist()]
    assert len(expected) == len(rows) == 2_000
    columns = {name: tf.constant([np.nan if row[name] is None else row[name] for row in rows], tf.float32)
               for name in (f"I{i}" for i in range(1, 14))}
    columns.update({name: tf.constant([row[name] or "" for row in rows]) for name in (f"C{j}" for j in range(1, 27))})
    by_name = model.signatures["serving_default"](**columns)["probability"].numpy()[:, 0]
    lines = [",".join("" if value is None else str(value) for value in list(row.values())[1:]) for row in rows]
    by_line = model.signatures["csv"](line=tf.constant(lines))["probability"].numpy()[:, 0]
    np.testing.assert_allclose(by_name, expected, atol=1e-6)
    np.testing.assert_allclose(by_line, expected, atol=1e-6)
    # docs/your-data.md's request bodies, turned into tensors as TF Serving's REST API does: the same row.
    scores = [score_as_tf_serving(model, body) for body in documented_requests()]
    assert len(scores) == 2 and scores[0].shape == (1,)
    np.testing.assert_allclose(scores[0], scores[1], atol=1e-6)


def documented_requests() -> list[dict]:
    import re

    page = open(os.path.join(PROJECT_ROOT, "docs", "your-data.md")).read()
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", page, re.S)]


def score_as_tf_serving(model, body: dict) -> np.ndarray:
    """TF Serving's predict in its row format: each instance one row, named inputs stacked by
    name (a signature of one input takes the instances themselves), typed by the signature."""
    signature = model.signatures[body.get("signature_name", "serving_default")]
    specs = signature.structured_input_signature[1]
    instances = body["instances"]
    if len(specs) == 1:
        (name, spec), = specs.items()
        inputs = {name: tf.constant(instances, spec.dtype)}
    else:
        inputs = {name: tf.constant([row[name] for row in instances], spec.dtype) for name, spec in specs.items()}
    return signature(**inputs)["probability"].numpy()[:, 0]


def plan(channels: dict, hp: dict, hosts: int = 1, groups: str = "") -> dict:
    command = [sys.executable, "-m", "trainer", "plan", "--hosts", str(hosts), "--check-input"]
    command += ["--groups", groups] if groups else []
    for name, path in channels.items():
        command += ["--channel", f"{name}={path}"]
    for key, value in hp.items():
        command += ["--hp", f"{key}={value}"]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    result = json.loads(done.stdout)
    assert "error" not in result, result
    return result


MODES = {  # mode: (hosts, hyperparameters, trainer local --groups); each its own processes and shards
    "single": (1, {}, ""),
    "tower": (1, {"distribution": "tower", "replicas": 2}, ""),
    "mirrored": (1, {"distribution": "mirrored", "replicas": 2}, ""),
    "horovod": (2, {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2"}, ""),
    "local_sgd": (2, {"distribution": "local_sgd"}, ""),
    "parameter_server": (2, {"sagemaker_parameter_server_enabled": "true"}, ""),
    "multi_worker_mirrored": (2, {"sagemaker_multi_worker_mirrored_strategy_enabled": "true"}, ""),
    "data group": (2, {"training_groups": "train"}, "train=1,data=1"),
}


@pytest.mark.cores(1)
@pytest.mark.parametrize("data_format", ["csv", "parquet"])
def test_every_mode_reads_every_row_once_an_epoch(raw, data_format):
    """Each mode's plan, read as its ranks read (trainer plan --check-input): every row once,
    across ranks whose shares differ by little."""
    for mode, (hosts, hp, groups) in MODES.items():
        result = plan({"training": raw[data_format]["training"]}, {**HP, **hp}, hosts, groups)
        check = result["check_input"]
        counts = [rank["records"] for rank in check["ranks"]]
        assert check["exactly_once"] and sum(counts) == 40_000, (mode, check)
        assert max(counts) - min(counts) <= 20, (mode, counts)  # Parquet: a row a row group, at most
        assert result["input"]["field_size"] == 39 and result["input"]["format"] == data_format, result["input"]


@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "single"])  # single: above
def test_every_mode_trains_on_parquet(raw, tmp_path, mode):
    hosts, hp, groups = MODES[mode]
    run = run_local(tmp_path, raw["parquet"], {**HP, **hp}, hosts=1 if groups else hosts, groups=groups,
                    timeout=900)
    assert run.exit_code == 0 and run.succeeded, run.log[-5000:]
    assert run.metrics["eval_auc"] > 0.6, run.metrics
    assert os.path.exists(os.path.join(run.job_dir, "model", "1", "saved_model.pb"))


@pytest.mark.cores(1)
@pytest.mark.parametrize("input_mode, data_format", [("File", "parquet"), ("Pipe", "csv")])
def test_a_script_reads_its_ranks_rows_through_the_kit(raw, tmp_path, input_mode, data_format):
    """Two Horovod ranks: in File mode each its shard of one Parquet channel, in Pipe mode each its
    own CSV channel; their rows, counted as the script reads them, are the channels' rows once."""
    import pyarrow.csv as pcsv

    from test_scripts import script, seen

    folder = raw[data_format]["training"]
    files = sorted(os.path.join(folder, name) for name in os.listdir(folder))
    channels = ({"training": folder} if input_mode == "File" else
                {f"training-{i + 1}": path for i, path in enumerate(files)})
    hp = script("kit_rows_train.py", **{"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": 2})
    run = run_local(tmp_path, channels, hp, input_mode=input_mode)
    assert run.exit_code == 0, run.log[-3000:]
    ranks = [seen(run.job_dir, f"rank{r}") for r in (0, 1)]
    tables = [pq.read_table(path) for path in files] if data_format == "parquet" else [pcsv.read_csv(path)
                                                                                         for path in files]
    total_rows = sum(t.num_rows for t in tables)
    clicks = sum(float(np.sum(t.column("label").to_numpy())) for t in tables)
    i1 = sum(float(np.nansum(t.column("I1").to_numpy(zero_copy_only=False).astype(float))) for t in tables)
    assert sum(r["rows"] for r in ranks) == total_rows and all(r["rows"] > 0 for r in ranks), ranks
    assert sum(r["clicks"] for r in ranks) == clicks and abs(sum(r["i1_total"] for r in ranks) - i1) < 1e-3 * i1
    assert ranks[0]["names"] == sorted(["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{j}" for j in range(1, 27)])
    assert [r["field_size"] for r in ranks] == [39, 39]
    if input_mode == "Pipe":
        assert [r["channels"] for r in ranks] == ["training-1", "training-2"]
