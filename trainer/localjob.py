"""`trainer local`: run a training job on this machine, in a folder laid out like /opt/ml.

Writes the three config JSONs the way SageMaker does (hyperparameter values as strings),
links File-mode channels into input/data/<channel>/, and in Pipe mode plays the part of
SageMaker's agent: creates the FIFO input/data/<channel>_<epoch> for each epoch and
streams the channel's files through it back to back. Then it runs the same `train`
entry as the container, with SAGEMAKER_BASE_DIR pointing at the folder.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from trainer.data.pipeline import list_data_files
from trainer.data.records import LIBSVM_CONTENT_TYPE, TFRECORD_CONTENT_TYPE, format_of_path

DEFAULT_HOST = "algo-1"
WRITE_SIZE = 1 << 20


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channel", action="append", type=key_value, default=[], metavar="NAME=PATH",
                        help="a channel and a file or folder for it (repeatable; repeat a NAME to add paths)")
    parser.add_argument("--hp", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a hyperparameter (repeatable)")
    parser.add_argument("--input-mode", choices=("File", "Pipe"), default="File")
    parser.add_argument("--instance-type", default="local", help="e.g. ml.c5.2xlarge")
    parser.add_argument("--job-dir", help="keep the job folder here (reused: checkpoints resume)")


def write_json(path: str, value) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)


def lay_out_job(job_dir: str, channels: dict[str, list[str]], hyperparameters: dict[str, str],
                input_mode: str = "File", instance_type: str = "local",
                hosts: tuple[str, ...] = (DEFAULT_HOST,), current_host: str = DEFAULT_HOST) -> None:
    """Create or refresh the /opt/ml-like folder (checkpoints in it are kept)."""
    config_dir = os.path.join(job_dir, "input", "config")
    data_dir = os.path.join(job_dir, "input", "data")
    shutil.rmtree(data_dir, ignore_errors=True)
    for folder in (config_dir, data_dir, os.path.join(job_dir, "model"),
                   os.path.join(job_dir, "output", "data"), os.path.join(job_dir, "checkpoints")):
        os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(config_dir, "hyperparameters.json"),
               {key: str(value) for key, value in hyperparameters.items()})
    write_json(os.path.join(config_dir, "resourceconfig.json"), {
        "current_host": current_host,
        "hosts": list(hosts),
        "current_instance_type": instance_type,
        "current_group_name": "homogeneousCluster",
        "instance_groups": [{"instance_group_name": "homogeneousCluster",
                             "instance_type": instance_type, "hosts": list(hosts)}],
        "network_interface_name": "eth0",
    })
    write_json(os.path.join(config_dir, "inputdataconfig.json"), {
        name: {"TrainingInputMode": input_mode, "S3DistributionType": "FullyReplicated",
               "RecordWrapperType": "None", "ContentType": content_type(paths)}
        for name, paths in channels.items()})
    if input_mode == "File":
        for name, paths in channels.items():
            folder = os.path.join(data_dir, name)
            os.makedirs(folder)
            for index, path in enumerate(paths):
                link = os.path.join(folder, os.path.basename(os.path.normpath(path)))
                if os.path.lexists(link):  # two paths with one name: keep both
                    link = os.path.join(folder, f"{index}-{os.path.basename(os.path.normpath(path))}")
                os.symlink(os.path.abspath(path), link)


def content_type(paths: list[str]) -> str:
    """The channel's ContentType, as a user would pass it to fit(), from its files' names."""
    files = [f for path in paths for f in list_data_files(path)]
    return LIBSVM_CONTENT_TYPE if files and all(format_of_path(f) == "libsvm" for f in files) \
        else TFRECORD_CONTENT_TYPE


class PipeFeeder(threading.Thread):
    """Streams a channel's files through input/data/<channel>_<epoch>, epoch after epoch,
    as SageMaker's agent does, until stopped."""

    def __init__(self, fifo_prefix: str, files: list[str]):
        super().__init__(daemon=True, name=f"pipe-feeder-{os.path.basename(fifo_prefix)}")
        self.fifo_prefix = fifo_prefix
        self.files = files
        self.stopping = threading.Event()
        self.epochs_fed = 0

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            path = f"{self.fifo_prefix}_{self.epochs_fed}"
            os.mkfifo(path)
            try:
                fd = self._open_when_read(path)
                if fd is None:
                    return
                self._stream(fd)
            finally:
                os.unlink(path)
            self.epochs_fed += 1

    def _open_when_read(self, path: str):
        # A non-blocking open fails with ENXIO until a reader opens the FIFO; polling keeps
        # the thread stoppable.
        while not self.stopping.is_set():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:
                if err.errno != errno.ENXIO:
                    raise
                time.sleep(0.02)
                continue
            os.set_blocking(fd, True)
            return fd
        return None

    def _stream(self, fd: int) -> None:
        with os.fdopen(fd, "wb", buffering=0) as fifo:
            try:
                for name in self.files:
                    with open(name, "rb") as source:
                        while chunk := source.read(WRITE_SIZE):
                            fifo.write(chunk)
            except BrokenPipeError:  # the reader stopped early: the epoch is over for it
                pass


def summary(job_dir: str, exit_code: int) -> str:
    lines = [f"job folder: {job_dir}"]
    failure = os.path.join(job_dir, "output", "failure")
    if os.path.exists(failure):
        with open(failure) as f:
            lines.append(f"FAILED (exit {exit_code}): {f.readline().strip()}")
        return "\n".join(lines)
    metrics_path = os.path.join(job_dir, "output", "data", "metrics.json")
    if os.path.exists(metrics_path):
        with open(metrics_path) as f:
            metrics = json.load(f)
        for key in ("eval_auc", "eval_logloss", "train_samples_per_sec", "epochs", "steps"):
            lines.append(f"{key}: {metrics.get(key)}")
        lines.append(f"model: {metrics.get('export_dir')}")
    lines.insert(1, "SUCCEEDED" if exit_code == 0 else f"FAILED (exit {exit_code})")
    return "\n".join(lines)


def run(channels: dict[str, list[str]], hyperparameters: dict[str, str], input_mode: str = "File",
        instance_type: str = "local", job_dir: str | None = None) -> tuple[str, int]:
    """Lay out the job, feed Pipe-mode channels, run `train`; (job folder, exit code)."""
    job_dir = os.path.abspath(job_dir or tempfile.mkdtemp(prefix="trainer-job-"))
    lay_out_job(job_dir, channels, hyperparameters, input_mode, instance_type)
    feeders = []
    if input_mode == "Pipe":
        for name, paths in channels.items():
            files = [f for path in paths for f in list_data_files(path)]
            feeders.append(PipeFeeder(os.path.join(job_dir, "input", "data", name), files))
    for feeder in feeders:
        feeder.start()
    try:
        exit_code = subprocess.call([sys.executable, "-m", "trainer.entry"],
                                    env={**os.environ, "SAGEMAKER_BASE_DIR": job_dir})
    finally:
        for feeder in feeders:
            feeder.stop()
        for feeder in feeders:
            feeder.join(timeout=5)
    return job_dir, exit_code


def main(args: argparse.Namespace) -> int:
    channels: dict[str, list[str]] = {}
    for name, path in args.channel:
        if not os.path.exists(path):
            print(f"trainer local: channel {name}: {path} does not exist", file=sys.stderr)
            return 2
        channels.setdefault(name, []).append(path)
    job_dir = args.job_dir
    if not job_dir:
        job_dir = tempfile.mkdtemp(prefix="trainer-job-")
        print(f"job folder: {job_dir}", flush=True)
    job_dir, exit_code = run(channels, dict(args.hp), args.input_mode, args.instance_type, job_dir)
    print(summary(job_dir, exit_code), flush=True)
    return exit_code
