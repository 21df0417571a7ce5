"""The mpirun command line of a job's ranks, and the environment every rank gets."""
from __future__ import annotations

import os
import shlex
import sys

from trainer.plan import sdk


def mpi_command(job, per_host: int, process_command: tuple[str, ...]) -> tuple[str, ...]:
    # One host: mpirun starts the ranks itself (no sshd); several: the toolkit's MPI runner.
    hosts = ["localhost"] if len(job.hosts) == 1 else job.hosts
    command = ["mpirun", "--allow-run-as-root", "-np", str(per_host * len(job.hosts)),
               "--host", ",".join(f"{h}:{per_host}" for h in hosts)]
    if job.num_gpus == 0 and per_host > 1:
        # P10: several CPU workers on a host: pin each to its own cores.
        cores = max(1, job.num_physical_cores // per_host)
        command += ["--map-by", f"slot:PE={cores}", "--bind-to", "core"]
    else:
        command += ["--bind-to", "none"]
    # P11: cross-memory attach is not permitted in containers.
    command += ["-mca", "btl_vader_single_copy_mechanism", "none",
                "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]
    for name in sorted(horovod_env(job.hyperparameters)):
        command += ["-x", name]
    if job.runs_script:
        command += ["--tag-output"]  # each line of a script's output with its rank in front
    command += shlex.split(mpi_options(job))
    return tuple(command) + process_command


def mpi_options(job) -> str:
    """Extra mpirun options: the SDK's custom MPI options, then the hyperparameter's."""
    return f"{job.framework_params.get(sdk.MPI_OPTIONS, '') or ''} {job.hyperparameters.mpi_options}".strip()


def horovod_env(hp) -> dict:
    """P27: Horovod's knobs, as environment variables for every rank."""
    env = {"HOROVOD_AUTOTUNE": "1" if hp.horovod_autotune else "0"}
    if hp.horovod_fusion_threshold is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(hp.horovod_fusion_threshold)
    if hp.horovod_cycle_time is not None:
        env["HOROVOD_CYCLE_TIME"] = str(hp.horovod_cycle_time)
    # Horovod's stall check names the ranks the others wait for, several times within the
    # stall bound (its default, 60 s, may be longer than a bound set short).
    env["HOROVOD_STALL_CHECK_TIME_SECONDS"] = str(horovod_stall_check_sec(hp.stall_timeout_sec))
    return env


def horovod_stall_check_sec(stall_timeout_sec: float) -> int:
    return int(max(1, min(60, stall_timeout_sec // 4)))


def rank_from_launcher() -> int:
    """This process's rank, as its launcher (mpirun, horovodrun) gives it."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    raise RuntimeError(f"{sys.argv[0]} was started without a rank (run it through mpirun)")
