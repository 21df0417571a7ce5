"""One process of the user's training script: its command line and environment, as AWS's
TensorFlow container gives them, plus what only this container gives.

As AWS's container (the SageMaker training toolkit's runners): the hyperparameters as
`--name value` arguments (`--model_dir` included, as the SDK sets it), every `SM_*`
variable (`SM_TRAINING_ENV`, `SM_HPS`, `SM_USER_ARGS`, `SM_CHANNEL_*`, ...), TF_CONFIG
for parameter servers and multi-worker mirrored, the working directory the code's folder,
and under MPI the script run as `python -m mpi4py` runs it (an uncaught exception in one
rank aborts them all instead of hanging them; trainer.script.mpi_rank, which also says when
a rank's script ended by itself).

Added here (documented in docs/your-script.md):
    OMP_NUM_THREADS, KMP_*, TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS
        the CPU settings for this process's share of the host
    TRAINER_RANK, TRAINER_LOCAL_RANK, TRAINER_WORLD_SIZE, TRAINER_PROCESSES_PER_HOST
    TRAINER_CHANNELS      this process's own training channel(s), comma-separated: in Pipe
                          mode its own FIFO channel (training-<local rank + 1>)
    TRAINER_CHANNEL_PATHS their folders (File) or FIFO prefixes (Pipe: <path>_<epoch>)
    TRAINER_INPUT_MODE    File | Pipe | FastFile
    TRAINER_SHARD         "count,index": apply dataset.shard(count, index) to those
                          channels so every record is read exactly once in the job
    TRAINER_LEARNING_RATE_SCALE  the synchronous replicas of the job (scale by it)

`python -m trainer.script.process` is what mpirun starts for each rank: it finds its rank
in the plan, sets that environment, and becomes the script (exec).
"""
from __future__ import annotations

import json
import os
import shlex
import sys

from trainer.contract.job import BASE_DIR_ENV, base_dir_from_env, read_job
from trainer.contract.s3 import s3_environment
from trainer.cpu import settings as cpu
from trainer.plan.types import DATA_SERVICE_ENV

PYTHON_PACKAGE, PYTHON_PROGRAM, COMMAND = "package", "program", "command"


def entry_point_type(code_dir: str, program: str) -> str:
    """The toolkit's rule (sagemaker_training._entry_point_type.get), on the code's own folder
    (the toolkit's looks at /opt/ml/code only, where `trainer local` keeps no code)."""
    if program.endswith(".sh"):
        return COMMAND
    if os.path.exists(os.path.join(code_dir, "setup.py")):
        return PYTHON_PACKAGE
    return PYTHON_PROGRAM if program.endswith(".py") else COMMAND


def toolkit_environment(job):
    """The toolkit's view of the job (its Environment), read from the job's own folder,
    without the container's own settings (the script's arguments and SM_HPS are the rest)."""
    from trainer.contract.hyperparameters import CONTAINER_ONLY
    from trainer.contract.job import toolkit_environment_module

    environment = toolkit_environment_module(job.base_dir)
    hyperparameters = {key: value for key, value in environment.read_hyperparameters().items()
                       if key not in CONTAINER_ONLY}
    toolkit_env = environment.Environment(hyperparameters=hyperparameters)
    if TUNING_KEY in hyperparameters and "model_dir" in hyperparameters:
        toolkit_env.hyperparameters["model_dir"] = model_dir_of_tuned_job(hyperparameters["model_dir"],
                                                                          toolkit_env.job_name)
    return toolkit_env


# Set in the hyperparameters of every training job of a tuning job.
TUNING_KEY = "_tuning_objective_metric"


def model_dir_of_tuned_job(model_dir: str, job_name: str) -> str:
    """AWS's TensorFlow container gives each training job of a tuning job a model_dir of its
    own (the jobs share the estimator's), unless it is a local folder."""
    return model_dir if str(model_dir).startswith("/opt/ml") else f"{model_dir}/{job_name}/model"


def command(job, under_mpi: bool = False, toolkit_env=None) -> list[str]:
    """The script's command line, as the toolkit's ProcessRunner (MPI: MasterRunner) builds it."""
    from sagemaker_training import mapping

    env = toolkit_env or toolkit_environment(job)
    args = mapping.to_cmd_args(env.hyperparameters)
    program = job.entry_point.program
    python = [sys.executable] + (["-m", "trainer.script.mpi_rank"] if under_mpi else [])
    kind = entry_point_type(job.entry_point.code_dir, program)
    if kind == PYTHON_PACKAGE:
        return python + ["-m", program[:-3] if program.endswith(".py") else program] + args
    if kind == PYTHON_PROGRAM:
        return python + [program] + args
    return ["/bin/sh", "-c", " ".join(["./" + program] + [shlex.quote(a) for a in args])]


def environment(job, plan, process, toolkit_env=None) -> dict[str, str]:
    """The environment of `process` of `plan`: this one's on top of the launcher's."""
    env = toolkit_env or toolkit_environment(job)
    settings = cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores, plan.processes_per_host)
    channels = [job.channels[name] for name in process.channels]
    values = {
        **env.to_env_vars(),
        **({"SM_NETWORK_INTERFACE_NAME": plan.network_interface} if plan.network_interface else {}),
        # As AWS's TensorFlow toolkit sets them for every script (without its lookup of the
        # bucket's region: the job's region serves a bucket in it).
        **s3_environment(os.environ),
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"),
        **settings.environment(),
        "TF_NUM_INTRAOP_THREADS": str(settings.intra_op_threads),
        "TF_NUM_INTEROP_THREADS": str(settings.inter_op_threads),
        "TRAINER_RANK": str(process.rank if process.rank is not None else -1),
        "TRAINER_LOCAL_RANK": str(process.local_rank),
        "TRAINER_WORLD_SIZE": str(plan.world_size),
        "TRAINER_PROCESSES_PER_HOST": str(plan.processes_per_host),
        "TRAINER_CHANNELS": ",".join(c.name for c in channels),
        "TRAINER_CHANNEL_PATHS": ",".join(c.path for c in channels),
        "TRAINER_INPUT_MODE": plan.input_mode,
        "TRAINER_SHARD": ",".join(map(str, process.shard)),
        "TRAINER_LEARNING_RATE_SCALE": repr(plan.learning_rate_scale),
        BASE_DIR_ENV: job.base_dir,
        "PYTHONPATH": os.pathsep.join(p for p in (job.entry_point.code_dir, os.environ.get("PYTHONPATH")) if p),
    }
    values.update(plan.script_environment)
    if process.tf_config:
        values["TF_CONFIG"] = json.dumps(process.tf_config)
    if plan.data_service and plan.data_service.serves:  # a heterogeneous cluster's data hosts (trainer.kit.from_data_service)
        values[DATA_SERVICE_ENV] = plan.data_service.address
    return values


def main() -> None:
    """A rank under mpirun: become the script with this rank's environment."""
    from trainer.planner.planner import make_plan
    from trainer.plan.mpi import rank_from_launcher

    job = read_job(base_dir_from_env())
    plan = make_plan(job)
    process = plan.process(rank_from_launcher())
    toolkit_env = toolkit_environment(job)
    os.environ.update(environment(job, plan, process, toolkit_env))
    argv = command(job, under_mpi=True, toolkit_env=toolkit_env)
    os.chdir(job.entry_point.code_dir)
    sys.stdout.flush()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
