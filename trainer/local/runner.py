"""Run a training job on this machine (`trainer local`), in a folder laid out like /opt/ml.

Writes the three config JSONs the way SageMaker does (hyperparameter values as strings),
links File-mode channels into input/data/<channel>/, and in Pipe mode plays the part of
SageMaker's agent: creates the FIFO input/data/<channel>_<epoch> for each epoch and
streams the channel's files through it back to back. Then it runs the same `train`
entry as the container, with SAGEMAKER_BASE_DIR pointing at the folder.
"""
from __future__ import annotations

import argparse
import errno
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from trainer.contract.job import BASE_DIR_ENV, JOB_NAME_ENV, SHARED_MACHINE_ENV
from trainer.data.fifo import recordio_record
from trainer.data.pipeline import list_data_files
from trainer.data import formats
from trainer.errors import JobError
from trainer.report import read_metrics

DEFAULT_HOST = "algo-1"
WRITE_SIZE = 1 << 20


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def channel_setting(text: str) -> tuple[str, str, str]:
    name, sep, setting = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:KEY=VALUE, got {text!r}")
    try:
        return (name, *key_value(setting))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected NAME:KEY=VALUE, got {text!r}") from None


JOB_NAME_FILE = "job-name"  # in a job folder: the name its first run had

# The settings of a channel that `--channel-config` may give (as SageMaker's TrainingInput does):
# their accepted values (none listed: any; ContentType is a free string, by default the
# files' format: trainer.data.formats).
CHANNEL_SETTINGS = {"CompressionType": ("None", "Gzip"), "RecordWrapperType": ("None", "RecordIO"), "ContentType": ()}


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that describe a job (shared by `trainer local` and `trainer plan`)."""
    parser.add_argument("--channel", action="append", type=key_value, default=[], metavar="NAME=PATH",
                        help="a channel and a file or folder for it (repeatable; repeat a NAME to add paths)")
    parser.add_argument("--hp", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a hyperparameter (repeatable)")
    parser.add_argument("--input-mode", choices=("File", "FastFile", "Pipe"), default="File",
                        help="FastFile: laid out as File, as SageMaker mounts the objects as files")
    parser.add_argument("--instance-type", default="local", help="e.g. ml.c5.2xlarge")
    parser.add_argument("--hosts", type=int, default=1,
                        help="hosts of the job (more than one: each in its own network namespace)")
    parser.add_argument("--groups", type=instance_groups, default=(), metavar="NAME=COUNT[:TYPE],...",
                        help="a heterogeneous cluster's instance groups, e.g. train=1,data=2:ml.c5.xlarge (TYPE: "
                             "--instance-type if left out); its hosts are numbered across the groups in this order, "
                             "and replace --hosts; say which train with --hp training_groups=NAME")
    parser.add_argument("--network-interface-name", default="eth0", metavar="NAME",
                        help="resourceconfig.json's network_interface_name (SageMaker names ethwe, as does "
                             "ModelTrainer's local mode; each simulated host has eth0)")
    parser.add_argument("--host-cpus", type=int, default=0, metavar="N",
                        help="run each host on N CPUs of its own (host i on CPUs i*N .. i*N+N-1), as separate "
                             "instances would; 0: every host may use every CPU")
    parser.add_argument("--sharded-channel", action="append", default=[], metavar="NAME",
                        help="give this channel S3DistributionType ShardedByS3Key: each host gets "
                             "every n-th of its files (repeatable)")
    parser.add_argument("--channel-config", action="append", type=channel_setting, default=[],
                        metavar="NAME:KEY=VALUE",
                        help="a channel's CompressionType (None, Gzip) or RecordWrapperType (None, RecordIO), as "
                             "in SageMaker's TrainingInput; in Pipe mode the feeder then streams Gzip files "
                             "decompressed and wraps each file in a RecordIO record, as SageMaker does (repeatable)")
    parser.add_argument("--job-name", metavar="NAME", default="",
                        help="the job's name (SageMaker's TRAINING_JOB_NAME), which tells a restart's own checkpoints "
                             "from another job's; default: TRAINING_JOB_NAME where the environment sets it, else the name "
                             "the job folder was first run under, else a new one")
    parser.add_argument("--checkpoint-local-path", metavar="PATH",
                        help="the job's CheckpointConfig LocalPath (the SDK's checkpoint_local_path): where "
                             "checkpoints are written and resumed from (with several hosts, PATH/<host>)")


def instance_groups(text: str) -> tuple[tuple[str, int, str], ...]:
    """--groups: ((name, count, instance type or ""), ...)."""
    groups = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, rest = item.partition("=")
        count, _, instance_type = rest.partition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"expected NAME=COUNT[:TYPE] (COUNT >= 1), got {item!r}")
        groups.append((name, int(count), instance_type))
    if len(groups) < 2 or len({name for name, _, _ in groups}) < len(groups):
        raise argparse.ArgumentTypeError(f"expected two or more groups of distinct names, got {text!r}")
    return tuple(groups)


def write_json(path: str, value) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)


@dataclass(frozen=True)
class LocalJob:
    """A job to lay out here: channels from local paths, hyperparameters, hosts."""

    channels: dict  # name -> list of files or folders
    hyperparameters: dict
    input_mode: str = "File"
    instance_type: str = "local"
    hosts: int = 1
    sharded: frozenset = frozenset()  # channels with S3DistributionType ShardedByS3Key
    checkpoint_local_path: str | None = None  # checkpointconfig.json's LocalPath
    channel_config: tuple = ()  # (name, key, value): CompressionType, RecordWrapperType
    groups: tuple = ()  # (name, count, instance type): a heterogeneous cluster's instance groups
    host_cpus: int = 0  # CPUs of each host's own (0: every host may use every CPU)
    network_interface_name: str = "eth0"  # resourceconfig.json's
    job_name: str = ""  # TRAINING_JOB_NAME ("": the environment's, else the job folder's, else a new one: job_name_in)

    @staticmethod
    def from_args(args: argparse.Namespace) -> "LocalJob":
        channels: dict[str, list[str]] = {}
        for name, path in args.channel:
            if not os.path.exists(path):
                raise SystemExit(f"trainer: channel {name}: {path} does not exist")
            channels.setdefault(name, []).append(path)
        unknown = set(args.sharded_channel) - set(channels)
        if unknown:
            raise SystemExit(f"trainer: --sharded-channel {', '.join(sorted(unknown))} is not a --channel")
        for name, key, value in args.channel_config:
            if name not in channels:
                raise SystemExit(f"trainer: --channel-config {name}: not a --channel")
            if key not in CHANNEL_SETTINGS or (CHANNEL_SETTINGS[key] and value not in CHANNEL_SETTINGS[key]):
                raise SystemExit(f"trainer: --channel-config {name}:{key}={value}: accepted: "
                                 + "; ".join(f"{k}: {', '.join(v) or 'any'}" for k, v in CHANNEL_SETTINGS.items()))
        checkpoints = os.path.abspath(args.checkpoint_local_path) if args.checkpoint_local_path else None
        groups = tuple((name, count, instance_type or args.instance_type)
                       for name, count, instance_type in getattr(args, "groups", ()))
        hosts = sum(count for _, count, _ in groups) or args.hosts
        if groups and args.hosts not in (1, hosts):
            raise SystemExit(f"trainer: --hosts {args.hosts} and --groups ({hosts} hosts) disagree; give one")
        host_cpus = getattr(args, "host_cpus", 0)
        if host_cpus and host_cpus * hosts > len(os.sched_getaffinity(0)):
            raise SystemExit(f"trainer: --host-cpus {host_cpus} for {hosts} host(s) needs {host_cpus * hosts} CPUs; "
                             f"this process may use {len(os.sched_getaffinity(0))}")
        return LocalJob(channels, dict(args.hp), args.input_mode, args.instance_type, hosts,
                        frozenset(args.sharded_channel), checkpoints, tuple(args.channel_config), groups, host_cpus,
                        getattr(args, "network_interface_name", "eth0"), getattr(args, "job_name", "") or "")

    def job_name_in(self, job_dir: str) -> str:
        """The job's name: --job-name, else TRAINING_JOB_NAME where the caller's environment sets it
        (as SageMaker would: S3 prefixes are named after it), else the one the folder was first run
        under (a run in the same folder is that job restarted, as SageMaker restarts a job under its
        name), else a new one in SageMaker's style; remembered in the folder."""
        remembered = os.path.join(job_dir, JOB_NAME_FILE)
        name = self.job_name or os.environ.get(JOB_NAME_ENV, "")
        if not name and os.path.exists(remembered):
            with open(remembered, encoding="utf-8") as f:
                name = f.read().strip()
        name = name or "trainer-local-" + time.strftime("%Y-%m-%d-%H-%M-%S-", time.gmtime()) + f"{time.time() % 1 * 1000:03.0f}"
        os.makedirs(job_dir, exist_ok=True)
        with open(remembered, "w", encoding="utf-8") as f:
            f.write(name + "\n")
        return name

    def input_mode_of(self, channel: str, input_mode: str | None = None) -> str:
        """A channel's TrainingInputMode: the job's, but File for the model channel (a previous
        job's model is read as files)."""
        input_mode = input_mode or self.input_mode
        return "File" if self.is_model_channel(channel) and input_mode == "Pipe" else input_mode

    def is_model_channel(self, channel: str) -> bool:
        return channel == str(self.hyperparameters.get("model_channel", "model"))

    def settings(self, channel: str) -> dict[str, str]:
        """The channel's CompressionType and RecordWrapperType, and its ContentType where given."""
        given = {key: value for name, key, value in self.channel_config if name == channel}
        return {key: given.get(key, "None") for key, accepted in CHANNEL_SETTINGS.items() if accepted or key in given}

    @property
    def host_names(self) -> list[str]:
        return [f"algo-{i + 1}" for i in range(self.hosts)]

    def host_dir(self, job_dir: str, host: str) -> str:
        return job_dir if self.hosts == 1 else os.path.join(job_dir, host)

    def files(self, channel: str, host_index: int) -> list[str]:
        """The channel's files on one host: all of them, or every n-th when S3-sharded."""
        files = [f for path in self.channels[channel] for f in list_data_files(path)]
        return files[host_index::self.hosts] if channel in self.sharded else files

    def pin(self, host_index: int):
        """A preexec_fn putting a host's `train` on its own CPUs (None: no --host-cpus)."""
        if not self.host_cpus:
            return None
        allowed = sorted(os.sched_getaffinity(0))
        own = set(allowed[host_index * self.host_cpus:(host_index + 1) * self.host_cpus])
        return lambda: os.sched_setaffinity(0, own)

    def instance_groups(self) -> list[dict]:
        """resourceconfig.json's instance_groups: one group of every host, or --groups'."""
        if not self.groups:
            return [{"instance_group_name": "homogeneousCluster", "instance_type": self.instance_type,
                     "hosts": self.host_names}]
        names, groups = iter(self.host_names), []
        for name, count, instance_type in self.groups:
            groups.append({"instance_group_name": name, "instance_type": instance_type,
                           "hosts": [next(names) for _ in range(count)]})
        return groups

    def lay_out(self, job_dir: str, input_mode: str | None = None) -> dict[str, str]:
        """Create or refresh every host's /opt/ml-like folder; {host: folder}."""
        return {host: lay_out_host(self.host_dir(job_dir, host), self, index, input_mode or self.input_mode)
                for index, host in enumerate(self.host_names)}


def lay_out_host(folder: str, job: LocalJob, host_index: int, input_mode: str) -> str:
    """One host's folder, as SageMaker writes it (checkpoints in it are kept)."""
    config_dir = os.path.join(folder, "input", "config")
    data_dir = os.path.join(folder, "input", "data")
    shutil.rmtree(data_dir, ignore_errors=True)
    for sub in (config_dir, data_dir, os.path.join(folder, "model"),
                os.path.join(folder, "output", "data"), os.path.join(folder, "checkpoints")):
        os.makedirs(sub, exist_ok=True)
    hosts = job.host_names
    write_json(os.path.join(config_dir, "hyperparameters.json"),
               {key: str(value) for key, value in job.hyperparameters.items()})
    groups = job.instance_groups()
    mine = next(g for g in groups if hosts[host_index] in g["hosts"])
    write_json(os.path.join(config_dir, "resourceconfig.json"), {
        "current_host": hosts[host_index],
        "hosts": hosts,
        "current_instance_type": mine["instance_type"],
        "current_group_name": mine["instance_group_name"],
        "instance_groups": groups,
        "network_interface_name": job.network_interface_name,
    })
    write_json(os.path.join(config_dir, "inputdataconfig.json"), {
        name: {"TrainingInputMode": job.input_mode_of(name, input_mode),
               "S3DistributionType": "ShardedByS3Key" if name in job.sharded else "FullyReplicated",
               "ContentType": content_type(paths), **job.settings(name)}
        for name, paths in job.channels.items()})
    if job.checkpoint_local_path:
        local_path = job.checkpoint_local_path if job.hosts == 1 else os.path.join(job.checkpoint_local_path, hosts[host_index])
        write_json(os.path.join(config_dir, "checkpointconfig.json"), {"LocalPath": local_path})
    elif os.path.exists(os.path.join(config_dir, "checkpointconfig.json")):  # from an earlier layout
        os.remove(os.path.join(config_dir, "checkpointconfig.json"))
    for name in job.channels:
        if job.input_mode_of(name, input_mode) != "Pipe":  # File, and FastFile (the objects mounted as files)
            if job.is_model_channel(name):  # a SavedModel's folders are kept as they are
                _link_files(os.path.join(data_dir, name), _top_entries(job.channels[name]))
            else:
                _link_files(os.path.join(data_dir, name), job.files(name, host_index))
    return folder


def _top_entries(paths: list[str]) -> list[str]:
    """The files given, and what the folders given hold (not flattened: a SavedModel's own folders)."""
    return [os.path.join(path, entry) for path in paths if os.path.isdir(path) for entry in sorted(os.listdir(path))] \
        + [path for path in paths if not os.path.isdir(path)]


def _link_files(channel_dir: str, files: list[str]) -> None:
    os.makedirs(channel_dir)
    for index, path in enumerate(files):
        link = os.path.join(channel_dir, os.path.basename(path))
        if os.path.lexists(link):  # two files with one name: keep both
            link = os.path.join(channel_dir, f"{index}-{os.path.basename(path)}")
        os.symlink(os.path.abspath(path), link)


def content_type(paths: list[str]) -> str:
    """The channel's ContentType, as a user would pass it to fit(), from its files' names and
    content (trainer.data.formats): what SageMaker's Pipe mode needs, since its FIFO has neither."""
    found = set()
    for path in paths:
        for file in list_data_files(path):
            try:
                found.add(formats.format_of_file(file)[0])
            except JobError:  # not a format: the job says so, naming the file
                found.add(None)
    return formats.CONTENT_TYPE_OF[found.pop()] if len(found) == 1 and None not in found else ""


class PipeFeeder(threading.Thread):
    """Streams a channel's files through input/data/<channel>_<epoch>, epoch after epoch,
    as SageMaker's agent does, until stopped."""

    def __init__(self, fifo_prefix: str, files: list[str], gunzip: bool = False, recordio: bool = False):
        super().__init__(daemon=True, name=f"pipe-feeder-{os.path.basename(fifo_prefix)}")
        self.fifo_prefix = fifo_prefix
        self.files = files
        self.gunzip = gunzip  # CompressionType Gzip: SageMaker streams the files decompressed
        self.recordio = recordio  # RecordWrapperType RecordIO: each file in one RecordIO record
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
                    with (gzip.open if self.gunzip else open)(name, "rb") as source:
                        if self.recordio:  # a record's length comes first: the whole file at once
                            fifo.write(recordio_record(source.read()))
                            continue
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
    metrics = read_metrics(os.path.join(job_dir, "output", "data"))
    if metrics is not None:
        for key in ("eval_auc", "eval_logloss", "train_samples_per_sec", "epochs", "steps"):
            lines.append(f"{key}: {metrics.get(key)}")
        lines.append(f"model: {metrics.get('export_dir')}")
    lines.insert(1, "SUCCEEDED" if exit_code == 0 else f"FAILED (exit {exit_code})")
    return "\n".join(lines)


def _train_command() -> list[str]:
    return [sys.executable, "-m", "trainer.commands.train"]


def _prefixed(stream, host: str) -> None:
    for line in iter(stream.readline, b""):
        sys.stdout.buffer.write(f"[{host}] ".encode() + line)
        sys.stdout.buffer.flush()


def _stop_forwarded_to(processes: list):
    """SIGTERM to this process goes on to every host's `train`, as SageMaker's stop (or a
    spot interruption) reaches every container; they save and end by themselves."""
    from trainer.supervision.supervise import handling_sigterm

    def forward(signum, frame):
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    return handling_sigterm(forward)


def _run_hosts(job: LocalJob, folders: dict[str, str], job_env: dict) -> int:
    """`train` on every host at once, each in its own network namespace; the first
    non-zero exit code in host order, or 0."""
    from trainer.local.netns import HostNamespaces

    with HostNamespaces(job.host_names) as namespaces:
        processes = {host: subprocess.Popen(namespaces.command(host, _train_command()),
                                            env={**os.environ, **job_env, BASE_DIR_ENV: folder,
                                                 SHARED_MACHINE_ENV: "1"},
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            preexec_fn=job.pin(index))
                     for index, (host, folder) in enumerate(folders.items())}
        printers = [threading.Thread(target=_prefixed, args=(p.stdout, host), daemon=True)
                    for host, p in processes.items()]
        for printer in printers:
            printer.start()
        with _stop_forwarded_to(list(processes.values())):
            codes = [process.wait() for process in processes.values()]
        for printer in printers:
            printer.join(timeout=5)
    return next((code for code in codes if code), 0)


def run(job: LocalJob, job_dir: str | None = None) -> tuple[str, int]:
    """Lay out the job, feed Pipe-mode channels, run `train` on every host; (the first
    host's folder, exit code)."""
    job_dir = os.path.abspath(job_dir or tempfile.mkdtemp(prefix="trainer-job-"))
    folders = job.lay_out(job_dir)
    job_env = {JOB_NAME_ENV: job.job_name_in(job_dir)}
    feeders = []
    if job.input_mode == "Pipe":
        for index, (host, folder) in enumerate(folders.items()):
            for name in (name for name in job.channels if job.input_mode_of(name) == "Pipe"):
                settings = job.settings(name)
                feeders.append(PipeFeeder(os.path.join(folder, "input", "data", name), job.files(name, index),
                                          gunzip=settings["CompressionType"] == "Gzip",
                                          recordio=settings["RecordWrapperType"] == "RecordIO"))
    for feeder in feeders:
        feeder.start()
    try:
        if job.hosts == 1:
            train = subprocess.Popen(_train_command(), env={**os.environ, **job_env, BASE_DIR_ENV: job_dir},
                                     preexec_fn=job.pin(0))
            with _stop_forwarded_to([train]):
                exit_code = train.wait()
        else:
            exit_code = _run_hosts(job, folders, job_env)
    finally:
        for feeder in feeders:
            feeder.stop()
        for feeder in feeders:
            feeder.join(timeout=5)
    # The chief's folder (it holds the metrics): the first host's, but where the first group
    # of a heterogeneous cluster only feeds the others.
    chief = next((folder for folder in folders.values() if read_metrics(os.path.join(folder, "output", "data"))),
                 folders[job.host_names[0]])
    return chief, exit_code
