"""Input and configuration faults, for real: corrupt and truncated files, malformed lines,
missing channels and FIFOs, broken config files. Each must end the job quickly with the
exit status 1 and a first line that names what is wrong and where."""
import gzip
import json
import os
import re
import subprocess
import sys
import time

import pytest

from bounds import END_GRACE_SEC, PEER_LOST_SEC, within
from conftest import PROJECT_ROOT, JobRun, run_local
from trainer.local.runner import LocalJob
from watched import first_line

pytestmark = [pytest.mark.slow, pytest.mark.cores(1)]  # one training process a job, but where a test says otherwise
# Bad input ends the job at once: the process that meets it fails, and its launcher ends the others.
FAIL_FAST_SEC = within(END_GRACE_SEC)


def timed_run(tmp_path, channels, hp=None, **options):
    started = time.monotonic()
    run = run_local(tmp_path / "job", channels, hp, timeout=FAIL_FAST_SEC, **options)
    return run, time.monotonic() - started


def failed_as(run, seconds, pattern, record_fault, fault, waited_sec: float = 0.0):
    """The job ended with exit 1, its failure's first line matching `pattern`, in time: at
    once, or after the wait that a setting bounds (`waited_sec`)."""
    assert run.exit_code == 1, run.log[-3000:]
    line = first_line(run)
    assert re.match(pattern, line), line
    assert seconds < FAIL_FAST_SEC + waited_sec
    record_fault(fault, line, seconds)


def laid_out(job_dir, channels, hp=None, input_mode="File") -> str:
    """A job folder as SageMaker writes it, nothing fed (its files can be broken next)."""
    LocalJob(channels, hp or {}, input_mode).lay_out(str(job_dir))
    return str(job_dir)


def run_train(job_dir, timeout: float = FAIL_FAST_SEC) -> tuple[JobRun, float]:
    """`train` itself on a laid-out folder, as the container runs it."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trainer.commands.train"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "SAGEMAKER_BASE_DIR": str(job_dir)})
    return JobRun(str(job_dir), done.returncode, done.stdout + done.stderr), time.monotonic() - started


# --- channels and data --------------------------------------------------------------------

def test_missing_or_misnamed_training_channel(aws_split, tmp_path, record_fault):
    run, seconds = timed_run(tmp_path, {"train_data": aws_split["training"], "evaluation": aws_split["evaluation"]})
    failed_as(run, seconds, r"training channel 'training' is missing; channels given: evaluation, train_data",
              record_fault, "a missing or misnamed training channel")


def test_a_fifo_that_never_appears(aws_split, tmp_path, record_fault):
    job_dir = laid_out(tmp_path / "job", {"training": [aws_split["training"]]}, {"pipe_wait_sec": 3}, "Pipe")
    run, seconds = run_train(job_dir)  # nobody creates training_0, as when a Pipe channel never starts
    failed_as(run, seconds, r"Pipe-mode FIFO \S+/input/data/training_0 did not appear within 3 s \(is the channel declared Pipe",
              record_fault, "a Pipe-mode FIFO that never appears (pipe_wait_sec, here 3 s)", waited_sec=3)


def half_of(path, tmp_path):
    """A copy of `path` cut in the middle of a record."""
    data = open(path, "rb").read()
    cut = tmp_path / "cut.tfrecords"
    cut.write_bytes(data[: len(data) // 2 + 17])
    return cut


def record_ends(data: bytes) -> list[int]:
    """Where each complete record of TFRecord bytes ends, read by hand: 8-byte length, 4-byte
    CRC, data, 4-byte CRC."""
    ends, offset = [], 0
    while offset + 12 <= len(data):
        offset += 16 + int.from_bytes(data[offset:offset + 8], "little")
        if offset > len(data):
            break
        ends.append(offset)
    return ends


def count_complete_records(path):
    return len(record_ends(open(path, "rb").read()))


def test_truncated_tfrecord_names_the_file(aws_split, tmp_path, record_fault):
    cut = half_of(aws_split["training"], tmp_path)
    run, seconds = timed_run(tmp_path, {"training": str(cut), "evaluation": aws_split["evaluation"]})
    complete = count_complete_records(cut)
    failed_as(run, seconds, re.escape(f"channel 'training': file {run.job_dir}/input/data/training/cut.tfrecords "
                                      f"is truncated or corrupt after record {complete}: truncated record at"),
              record_fault, "a truncated TFRecord file")


def test_corrupt_tfrecord_names_the_file(aws_split, tmp_path, record_fault):
    data = bytearray(open(aws_split["training"], "rb").read())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)  # zeroed bytes inside a record: its CRC no longer matches
    bad = tmp_path / "bad.tfrecords"
    bad.write_bytes(bytes(data))
    run, seconds = timed_run(tmp_path, {"training": str(bad), "evaluation": aws_split["evaluation"]})
    failed_as(run, seconds, re.escape(f"channel 'training': file {run.job_dir}/input/data/training/bad.tfrecords "
                                      "is truncated or corrupt after record "),
              record_fault, "a corrupt TFRecord file (bytes overwritten)")


def test_truncated_pipe_stream_names_the_fifo(aws_split, tmp_path, record_fault):
    cut = half_of(aws_split["training"], tmp_path)
    run, seconds = timed_run(tmp_path, {"training": str(cut)}, input_mode="Pipe")
    failed_as(run, seconds, r".*training_0: stream ends inside record \d+ \(truncated\)",
              record_fault, "a Pipe-mode stream that ends inside a record")


def test_bad_libsvm_token_names_file_and_line(criteo_libsvm, tmp_path, record_fault):
    lines = open(criteo_libsvm[0]).read().splitlines()
    tokens = lines[41].split()
    lines[41] = " ".join(tokens[:5] + ["abc"] + tokens[6:])
    bad = tmp_path / "bad.libsvm"
    bad.write_text("\n".join(lines) + "\n")
    run, seconds = timed_run(tmp_path, {"training": str(bad)}, {"batch_size": 16, "num_epochs": 1})
    failed_as(run, seconds, r"channel 'training': file \S+/bad\.libsvm line 42: token 'abc' is not id:value$",
              record_fault, "a malformed libsvm line")


def test_truncated_gzip_libsvm_names_the_file(criteo_libsvm, tmp_path, record_fault):
    whole = gzip.compress(open(criteo_libsvm[0], "rb").read())
    cut = tmp_path / "cut.libsvm.gz"
    cut.write_bytes(whole[:len(whole) // 2])
    run, seconds = timed_run(tmp_path, {"training": str(cut)}, {"batch_size": 16, "num_epochs": 1})
    failed_as(run, seconds, r"channel 'training': file \S+/cut\.libsvm\.gz: gzip-compressed, but cut short or damaged",
              record_fault, "a truncated gzip-compressed libsvm file")


def test_bad_libsvm_lines_are_skipped_and_counted_when_asked(criteo_libsvm, tmp_path):
    lines = open(criteo_libsvm[0]).read().splitlines()
    tokens = lines[41].split()
    lines[41] = " ".join(tokens[:5] + ["abc"] + tokens[6:])  # a malformed token
    lines[42] = " ".join(lines[42].split()[:-1])  # a field missing
    pair = lines[43].split()[1]
    lines[43] = lines[43].replace(" " + pair + " ", " 999999999:1 ", 1)  # an id outside feature_size
    bad = tmp_path / "bad.libsvm"
    bad.write_text("\n".join(lines) + "\n")
    run = run_local(tmp_path / "job", {"training": str(bad)},
                    {"batch_size": 16, "num_epochs": 1, "skip_bad_records": "true"})
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["bad_records_skipped"] == 3
    assert "epoch=1 skip_bad_records: 3 bad records skipped so far" in run.log


def test_ids_outside_feature_size(aws_split, tmp_path, record_fault):
    run, seconds = timed_run(tmp_path, aws_split, {"feature_size": 1000})
    failed_as(run, seconds, r"channel 'training': file \S+ (record|line) \d+: id \d+ is outside \[0, feature_size=1000\)",
              record_fault, "an id outside [0, feature_size)")


def test_empty_training_channel_is_a_clear_error(aws_split, tmp_path, record_fault):
    empty = tmp_path / "empty.tfrecords"
    empty.write_bytes(b"")
    run, seconds = timed_run(tmp_path, {"training": str(empty), "evaluation": aws_split["evaluation"]})
    failed_as(run, seconds, r"channel 'training' holds no records to train on$", record_fault,
              "an empty training channel")


# Raw click logs (CSV, TSV, Parquet): DeepCTR's 200 Criteo rows, broken one way each.

@pytest.fixture
def criteo_rows():
    from conftest import CRITEO_SAMPLE, shared_file

    return open(shared_file(CRITEO_SAMPLE)).read().splitlines()  # a header, then 200 rows


def table_file(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(lines) + "\n")
    return str(folder)


def test_a_row_of_another_width_names_file_and_line(criteo_rows, tmp_path, record_fault):
    criteo_rows[42] = criteo_rows[42].rsplit(",", 1)[0]  # its last column gone
    channel = table_file(tmp_path / "logs", "day_0.csv", criteo_rows)
    run, seconds = timed_run(tmp_path, {"training": channel}, {"batch_size": 16, "num_epochs": 1})
    failed_as(run, seconds, r"channel 'training': file \S+/day_0\.csv line 43: 39 columns, where the CSV rows have 40 "
                            r"\(label, I1, I2, I3, \.\.\.\)$", record_fault, "a CSV row with a column missing")


def test_a_number_that_is_not_one_names_file_line_and_column(criteo_rows, tmp_path, record_fault):
    fields = criteo_rows[100].split(",")
    fields[5] = "n/a"
    criteo_rows[100] = ",".join(fields)
    channel = table_file(tmp_path / "logs", "day_0.tsv", [line.replace(",", "\t") for line in criteo_rows])
    run, seconds = timed_run(tmp_path, {"training": channel}, {"batch_size": 16, "num_epochs": 1})
    failed_as(run, seconds, r"channel 'training': file \S+/day_0\.tsv line 101: column I5 value 'n/a' is not a "
                            r"number$", record_fault, "a numeric column's value that is not a number (TSV)")


def test_a_bad_row_in_pipe_mode_names_the_channel_and_column(criteo_rows, tmp_path, record_fault):
    criteo_rows[42] = criteo_rows[42] + ",extra"
    channel = table_file(tmp_path / "logs", "day_0.csv", criteo_rows)
    run, seconds = timed_run(tmp_path, {"training": channel}, {"batch_size": 16, "num_epochs": 1}, input_mode="Pipe")
    failed_as(run, seconds, r"channel 'training' \(Pipe mode, CSV\): a row has 41 columns where 40 are expected "
                            r"\(set skip_bad_records=true to skip such rows\)$", record_fault,
              "a CSV row with a column too many, in Pipe mode")


def parquet_files(folder, rows, *changes):
    """The rows as Parquet, a file per change (a function of the table, or None)."""
    import io

    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    table = pcsv.read_csv(io.BytesIO("\n".join(rows).encode()))
    folder.mkdir(parents=True, exist_ok=True)
    for index, change in enumerate(changes):
        pq.write_table(change(table) if change else table, folder / f"part-{index}.parquet")
    return folder


def test_a_parquet_file_without_a_column_names_the_file_and_its_columns(criteo_rows, tmp_path, record_fault):
    """The second file of a channel lacks a column the first has (a schema that drifted)."""
    folder = parquet_files(tmp_path / "logs", criteo_rows, None, lambda table: table.drop(["I3"]))
    run, seconds = timed_run(tmp_path, {"training": str(folder)}, {"batch_size": 16, "num_epochs": 1})
    failed_as(run, seconds, r"channel 'training': file \S+/part-1\.parquet: it has no column 'I3' \(numeric_columns\); its columns: label, "
                            r"I1, I2, I4, ", record_fault,
              "a Parquet file without a column the job trains on")


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_parquet_file_is_named(criteo_rows, tmp_path, record_fault, damage):
    folder = parquet_files(tmp_path / "logs", criteo_rows, None, None)
    second = folder / "part-1.parquet"
    data = second.read_bytes()
    second.write_bytes(data[:len(data) // 2] if damage == "truncated" else data[:-40] + b"\xff" * 36 + data[-4:])
    run, seconds = timed_run(tmp_path, {"training": str(folder)}, {"batch_size": 16, "num_epochs": 1})
    failed_as(run, seconds, r"channel 'training': file \S+/part-1\.parquet: not a readable Parquet file, truncated or corrupt \(",
              record_fault, f"a {damage} Parquet file")


def test_a_content_type_the_image_does_not_read(criteo_rows, tmp_path, record_fault):
    channel = table_file(tmp_path / "logs", "day_0.csv", criteo_rows)
    run, seconds = timed_run(tmp_path, {"training": channel}, channel_config=(
        "training:ContentType=application/x-recordio-protobuf",))
    failed_as(run, seconds, r"channel 'training': ContentType 'application/x-recordio-protobuf' is not a format the "
                            r"built-in model reads; it reads application/x-parquet, application/x-tfrecord, text/csv, "
                            r"text/libsvm, text/tab-separated-values", record_fault,
              "a channel ContentType the image does not read")


@pytest.mark.parametrize("data_format", ["csv", "parquet"])
def test_bad_rows_of_a_log_are_skipped_and_counted_when_asked(criteo_rows, tmp_path, data_format):
    fields = criteo_rows[10].split(",")
    fields[3] = "abc"  # a number that is not one
    criteo_rows[10] = ",".join(fields)
    criteo_rows[20] = "," + criteo_rows[20].split(",", 1)[1]  # no label
    if data_format == "csv":
        criteo_rows[30] = criteo_rows[30] + ",9"  # a column too many
        channel = table_file(tmp_path / "logs", "day_0.csv", criteo_rows)
        expected = 3
    else:
        channel = str(parquet_files(tmp_path / "logs", criteo_rows, None))  # I3 read as text there
        expected = 2
    run = run_local(tmp_path / "job", {"training": channel},
                    {"batch_size": 16, "num_epochs": 1, "skip_bad_records": "true"})
    assert run.exit_code == 0, run.log[-3000:]
    assert run.metrics["bad_records_skipped"] == expected, run.metrics
    assert f"epoch=1 skip_bad_records: {expected} bad records skipped so far" in run.log


@pytest.mark.cores(2)
def test_an_empty_shard_for_one_rank(aws_split, tmp_path, record_fault):
    one_record = tmp_path / "one.tfrecords"
    data = open(aws_split["training"], "rb").read()
    one_record.write_bytes(data[:16 + int.from_bytes(data[:8], "little")])
    run, seconds = timed_run(tmp_path, {"training": str(one_record)},
                             {"distribution": "horovod", "processes_per_host": 2})
    failed_as(run, seconds, r"rank \d on algo-1: channel 'training': no training step ran in epoch 1: a process's "
                            r"shard of the training data is empty \(see P5 in docs/pitfalls.md\)",
              record_fault, "an empty shard for one Horovod rank (P5)")


def test_fewer_pipe_channels_than_processes(aws_split, tmp_path, record_fault):
    run, seconds = timed_run(tmp_path, {"training": aws_split["training"]},
                             {"distribution": "horovod", "processes_per_host": 2}, input_mode="Pipe")
    failed_as(run, seconds, r".*2 training processes per host; each process needs its own channel, since a FIFO ",
              record_fault, "fewer Pipe-mode channels than processes on a host (P1)")


def test_a_damaged_model_tar_gz_in_the_model_channel_is_named(aws_split, tmp_path, record_fault):
    archive = tmp_path / "yesterday" / "model.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(gzip.compress(b"1/saved_model.pb" + bytes(600))[:300])  # an upload cut short
    run, seconds = timed_run(tmp_path, {**aws_split, "model": str(archive.parent)})
    failed_as(run, seconds, r"channel 'model': \S+/input/data/model/model\.tar\.gz is not a readable tar archive, "
                            r"truncated or damaged", record_fault, "a damaged model.tar.gz in the model channel")


def test_init_from_model_without_a_model_channel(aws_split, tmp_path, record_fault):
    run, seconds = timed_run(tmp_path, aws_split, {"init_from": "model"})
    failed_as(run, seconds, re.escape("hyperparameter 'init_from' is model, but the job has no channel 'model' "),
              record_fault, "init_from=model without a model channel")


# --- configuration -------------------------------------------------------------------------

@pytest.mark.parametrize("name, content, fault, pattern", [
    ("resourceconfig.json", None, "resourceconfig.json missing", r"config file missing: \S+/input/config/resourceconfig\.json \(SageMaker writes it"),
    ("inputdataconfig.json", "{\"training\": ", "inputdataconfig.json malformed",
     r".*inputdataconfig\.json.*(not valid JSON|malformed|cannot be parsed)"),
    ("resourceconfig.json", {"current_host": "algo-9", "hosts": ["algo-1"]}, "current host not in hosts",
     r".*current_host 'algo-9' is not (one of|in) .*hosts"),
    ("resourceconfig.json", {"current_host": "algo-1", "hosts": ["algo-1", "algo-1"]}, "one host named twice",
     r"\S+/resourceconfig\.json: 'hosts' names 'algo-1' more than once"),
    ("hyperparameters.json", "[\"batch_size\", 64]", "hyperparameters.json holding a JSON list",
     r"config file \S+/hyperparameters\.json must hold a JSON object, got list$"),
])
def test_broken_config_files(aws_split, tmp_path, record_fault, name, content, fault, pattern):
    job_dir = laid_out(tmp_path / "job", {"training": [aws_split["training"]]})
    path = os.path.join(job_dir, "input", "config", name)
    if content is None:
        os.remove(path)
    else:
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
    run, seconds = run_train(job_dir)
    failed_as(run, seconds, pattern, record_fault, fault)


def test_wrong_type_hyperparameter(aws_split, tmp_path, record_fault):
    run, seconds = timed_run(tmp_path, aws_split, {"batch_size": "large"})
    failed_as(run, seconds, re.escape("hyperparameter 'batch_size': expected an integer, got 'large'; "
                                      "accepted: an integer >= 1") + "$",
              record_fault, "a hyperparameter of the wrong type")


def test_out_of_range_hyperparameter(aws_split, tmp_path, record_fault):
    run, seconds = timed_run(tmp_path, aws_split, {"dropout": "1.5"})
    failed_as(run, seconds, re.escape("hyperparameter 'dropout': 1.5 is out of range; accepted: "
                                      "a comma-separated list of numbers in [0, 0.99]"),
              record_fault, "a hyperparameter out of range")


def test_unknown_hyperparameter_is_a_warning(aws_split, tmp_path):
    run = run_local(tmp_path / "job", aws_split, {"bach_size": "64", "num_epochs": 1})
    assert run.exit_code == 0, run.log[-3000:]
    assert "unknown hyperparameter 'bach_size' (did you mean 'batch_size'?): ignored: no user code to read it" in run.log


@pytest.mark.parametrize("source, message", [
    ("def model_fn(hp:\n", "user module '{path}' cannot be imported: SyntaxError:"),
    ("import not_a_module_anywhere\n", "user module '{path}' cannot be imported: ModuleNotFoundError:"),
    ("def main():\n    pass\n", "user module 'broken' defines none of model_fn, parse_fn, optimizer_fn"),
])
def test_broken_user_module_is_a_clear_error(aws_split, tmp_path, record_fault, source, message):
    module = tmp_path / "broken.py"
    module.write_text(source)
    run, seconds = timed_run(tmp_path, aws_split, {"user_module": str(module)})
    failed_as(run, seconds, re.escape(message.format(path=module)), record_fault,
              f"a broken user module ({message.split(': ')[-1].split(' ')[-1] or 'no hooks'})")


HOOK_WITH_ITS_OWN_REASON = '''
import os

def model_fn(hp):  # /opt/ml, or where the training toolkit's SAGEMAKER_BASE_DIR says (trainer local)
    with open(os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "output", "failure"), "w") as f:
        f.write("the hook's own reason: field_size 39 does not match the 13 columns of this dataset")
    raise ValueError("field_size 39 does not match")
'''


def test_a_hook_s_own_failure_file_stays_first(aws_split, tmp_path):
    """The built-in model's hook writes the failure file itself and raises: its words stay
    first and whole (SageMaker's FailureReason); the container's account follows."""
    module = tmp_path / "own_reason.py"
    module.write_text(HOOK_WITH_ITS_OWN_REASON)
    run, _ = timed_run(tmp_path, aws_split, {"user_module": str(module)})
    assert run.exit_code != 0, run.log[-3000:]
    assert run.failure.startswith("the hook's own reason: field_size 39 does not match the 13 columns of this "
                                  "dataset\n\n--- what the container saw ---\n"), run.failure
    assert "ValueError: field_size 39 does not match" in run.failure.split("--- what the container saw ---")[1]


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_parameter_server_worker_whose_fifo_is_never_fed(aws_split, tmp_path, monkeypatch, record_fault):
    """SageMaker made algo-2's FIFO and never writes to it: the job ends after pipe_wait_sec,
    naming the host and the channel, on both hosts."""
    from trainer.local import runner

    class SilentOnAlgo2(runner.PipeFeeder):
        def run(self):
            if f"{os.sep}algo-2{os.sep}" in self.fifo_prefix and self.fifo_prefix.endswith("training"):
                os.mkfifo(f"{self.fifo_prefix}_0")
                self.stopping.wait()  # opened by nobody: no byte ever comes
                return
            super().run()

    monkeypatch.setattr(runner, "PipeFeeder", SilentOnAlgo2)
    job = runner.LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                          {"distribution": "parameter_server", "pipe_wait_sec": "15"}, input_mode="Pipe", hosts=2)
    started = time.monotonic()
    folder, exit_code = runner.run(job, str(tmp_path / "job"))
    seconds = time.monotonic() - started
    run = JobRun(folder, exit_code, "")
    failed_as(run, seconds, r"algo-2: channel 'training': Pipe-mode FIFO \S+/algo-2/input/data/"
              r"training_0 received no data within 15 s \(pipe_wait_sec\)", record_fault,
              "parameter servers in Pipe mode: a worker's FIFO that is never fed (pipe_wait_sec, here 15 s)",
              waited_sec=15 + PEER_LOST_SEC)  # then the other host learns it
    with open(os.path.join(str(tmp_path / "job"), "algo-2", "output", "failure")) as f:
        assert "algo-2: channel 'training'" in f.read()  # the other host says it too
