"""The mpirun command line of a job's ranks, and the environment every rank gets."""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass

from trainer.plan import sdk


# A rank waiting in a collective polls for its peers' messages. On CPUs that spinning takes
# the CPU that the rank's own compute threads, or the rank it waits for, need: yielding gives
# it back (2 Horovod ranks on 2 vCPUs: 1.3x the samples/s, docs/modes-measured.md).
YIELD_WHEN_IDLE = ("-mca", "mpi_yield_when_idle", "1")


@dataclass(frozen=True)
class CpuBinding:
    """How a host's ranks share its CPUs: mpirun's binding, the MCA settings that go with it
    (also given to the training toolkit's mpirun across hosts, which binds nothing), and the
    plan's words for it."""

    binding: tuple[str, ...]
    mca: tuple[str, ...]
    why: str
    oversubscribed: bool = False  # more ranks than CPUs on a host

    @property
    def options(self) -> tuple[str, ...]:
        return self.binding + self.mca


def cpu_binding(job, per_host: int) -> CpuBinding:
    """Pure: how `per_host` ranks on each of the job's hosts share its CPUs."""
    unbound = ("--bind-to", "none")
    if per_host > job.num_cpus:
        return CpuBinding(unbound, YIELD_WHEN_IDLE,
                          f"{per_host} ranks per host on {job.num_cpus} vCPU(s), more ranks than CPUs: not bound to "
                          "cores, and a rank waiting in a collective yields its CPU (mpi_yield_when_idle); each rank "
                          "runs slower than with a CPU of its own", oversubscribed=True)
    if job.num_gpus:
        return CpuBinding(unbound, (), "not bound to cores: one GPU per rank")
    waits = "a rank waiting in a collective yields its CPU to the threads that compute (mpi_yield_when_idle)"
    if len(job.hosts) > 1:
        return CpuBinding(unbound, YIELD_WHEN_IDLE,
                          f"not bound to cores, as the training toolkit's mpirun across hosts runs them; {waits}")
    if per_host == 1:
        return CpuBinding(unbound, YIELD_WHEN_IDLE, f"one rank, not bound: its threads use every CPU; {waits}")
    if per_host > job.num_physical_cores:
        return CpuBinding(unbound, YIELD_WHEN_IDLE,
                          f"{per_host} ranks on {job.num_physical_cores} physical core(s): not bound (a rank bound to "
                          f"a core would share it with another); {waits}")
    cores = job.num_physical_cores // per_host
    # P10: several CPU workers on a host: each pinned to cores of its own.
    return CpuBinding(("--map-by", f"slot:PE={cores}", "--bind-to", "core"), YIELD_WHEN_IDLE,
                      f"each rank bound to {cores} core(s) of its own (see P10 in docs/pitfalls.md); {waits}")


def mpi_command(job, per_host: int, process_command: tuple[str, ...], env: dict) -> tuple[str, ...]:
    """mpirun of `process_command` on the job's hosts, passing `env` (horovod_env's) to every rank."""
    # One host: mpirun starts the ranks itself (no sshd); several: the toolkit's MPI runner.
    hosts = ["localhost"] if len(job.hosts) == 1 else job.hosts
    command = ["mpirun", "--allow-run-as-root", "-np", str(per_host * len(job.hosts)),
               "--host", ",".join(f"{h}:{per_host}" for h in hosts)]
    command += cpu_binding(job, per_host).options
    # P11: cross-memory attach is not permitted in containers.
    command += ["-mca", "btl_vader_single_copy_mechanism", "none",
                "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]
    for name in sorted(env):
        command += ["-x", name]
    if job.runs_script:
        command += ["--tag-output"]  # each line of a script's output with its rank in front
    command += shlex.split(mpi_options(job))
    return tuple(command) + process_command


def mpi_options(job) -> str:
    """Extra mpirun options: the SDK's custom MPI options, then the hyperparameter's."""
    return f"{job.framework_params.get(sdk.MPI_OPTIONS, '') or ''} {job.hyperparameters.mpi_options}".strip()


# Horovod's background thread gathers the ranks' ready tensors once a cycle (5 ms by default,
# sized for GPU steps of tens of milliseconds). A CPU step of the built-in DeepFM takes a few
# milliseconds and waits for two rounds of it (the ranks' agreement on the step, then the
# gradients). `./build.sh bench scale --modes horovod --cpus 1 --hp horovod_cycle_time=T`,
# 2 hosts of 1 CPU each against one: 0.87x at 5 ms, 1.02x at 1 ms, 1.13x at 0.1 ms; the
# thread's polling then takes about a fifth of a rank's CPU, which pays while each rank has
# a CPU of its own (with more ranks than CPUs it would take CPU the ranks' compute needs).
CPU_CYCLE_TIME_MS = 0.1


def horovod_env(job, per_host: int, cpu_cycle_time_ms: float) -> dict:
    """P27: Horovod's knobs, as environment variables for every rank (`cpu_cycle_time_ms`: the
    cycle on CPU ranks)."""
    hp = job.hyperparameters
    env = {"HOROVOD_AUTOTUNE": "1" if hp.horovod_autotune else "0"}
    if hp.horovod_fusion_threshold is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(hp.horovod_fusion_threshold)
    cycle_time = horovod_cycle_time_ms(job, per_host, cpu_cycle_time_ms)
    if cycle_time is not None:
        env["HOROVOD_CYCLE_TIME"] = str(cycle_time)
    # Horovod's stall check names the ranks the others wait for, several times within the
    # stall bound (its default, 60 s, may be longer than a bound set short).
    env["HOROVOD_STALL_CHECK_TIME_SECONDS"] = str(horovod_stall_check_sec(hp.stall_timeout_sec))
    return env


def horovod_cycle_time_ms(job, per_host: int, cpu_cycle_time_ms: float) -> float | None:
    """HOROVOD_CYCLE_TIME: the job's hyperparameter; `cpu_cycle_time_ms` for CPU ranks with a
    CPU each at least; else Horovod's own default (None)."""
    if job.hyperparameters.horovod_cycle_time is not None:
        return job.hyperparameters.horovod_cycle_time
    return cpu_cycle_time_ms if not job.num_gpus and per_host <= job.num_cpus else None


def horovod_stall_check_sec(stall_timeout_sec: float) -> int:
    return int(max(1, min(60, stall_timeout_sec // 4)))


def rank_from_launcher() -> int:
    """This process's rank, as its launcher (mpirun, horovodrun) gives it."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    raise RuntimeError(f"{sys.argv[0]} was started without a rank (run it through mpirun)")
