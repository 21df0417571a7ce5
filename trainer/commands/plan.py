"""`trainer plan`: print the plan of a job as JSON, without training.

    trainer plan                                  # the job in $SAGEMAKER_BASE_DIR (or /opt/ml)
    trainer plan --job-dir /tmp/job               # a job folder
    trainer plan --channel training=data/ --hosts 2 --hp sagemaker_mpi_enabled=true \\
        --hp sagemaker_mpi_num_of_processes_per_host=2 --sharded-channel training --check-input
    trainer plan --channel training=data/ --hosts 2 --instance-type ml.c5.2xlarge --probe

With --channel options the job is laid out as `trainer local` would (in a temporary
folder), so a cluster can be planned before paying for it; --gpus and --cpus say what its
instances have (--host-cpus N: N CPUs). --check-input reads every rank's training input once
(see trainer.data.check). --probe measures, in seconds, one host's training step and the
same step as the job's mode runs it on two hosts, on this machine, exchange included, and
predicts the job's samples/s and samples per dollar against one host (trainer.plan.scaling).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

from trainer.contract.hyperparameters import unknown_name_warning
from trainer.contract.job import JOB_NAME_ENV, base_dir_from_env, read_job
from trainer.measure import probe
from trainer.cpu import settings as cpu
from trainer.errors import JobError
from trainer.local import runner
from trainer.planner.planner import make_plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job-dir", help="a job folder laid out like /opt/ml (default: $SAGEMAKER_BASE_DIR)")
    runner.add_job_arguments(parser)
    parser.add_argument("--gpus", type=int, help="GPUs per instance (with --channel)")
    parser.add_argument("--cpus", type=int, help="vCPUs per instance (with --channel)")
    parser.add_argument("--check-input", action="store_true",
                        help="read every rank's training input for one epoch and show it is read exactly once")
    parser.add_argument("--probe", action="store_true",
                        help="measure one host's step and the exchange between hosts on this machine (seconds), "
                             "and predict whether the job's hosts train faster and cheaper than one")
    parser.add_argument("--exchange-rank", metavar="MODE", help=argparse.SUPPRESS)  # --probe's ranks
    parser.add_argument("--exchange-cpus", type=int, default=1, help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    if args.exchange_rank:
        return probe.exchange_rank(args.exchange_rank, args.exchange_cpus)
    try:
        result = plan_and_check(args)
    except JobError as err:
        print(json.dumps({"error": str(err)}, indent=2))
        return 1
    print(json.dumps(result, indent=2))
    return 0 if result.get("check_input", {}).get("exactly_once", True) else 1


def plan_and_check(args: argparse.Namespace) -> dict:
    if not args.channel:
        folder = os.path.abspath(args.job_dir or base_dir_from_env())
        job = read_job(folder)
        plan = make_plan(job)
        result = described(job, plan)
        if args.check_input:
            if plan.input_mode == "Pipe":
                raise JobError("--check-input reads File-mode folders; for a Pipe-mode job give its "
                               "channels with --channel (the FIFOs carry the same files)")
            result["check_input"] = input_check(plan, {job.current_host: folder}, job)
        if args.probe:
            result["scaling"] = probe.scaling_of(job, plan)
        return result
    local = runner.LocalJob.from_args(args)
    for name, value in (("SM_NUM_GPUS", args.gpus), ("SM_NUM_CPUS", args.cpus or args.host_cpus or None),
                        (JOB_NAME_ENV, args.job_name or None)):
        if value is not None:
            os.environ[name] = str(value)
    with tempfile.TemporaryDirectory(prefix="trainer-plan-") as folder:
        folders = local.lay_out(os.path.join(folder, "job"))
        job = read_job(folders[local.host_names[0]])
        plan = make_plan(job)
        readable = local.lay_out(os.path.join(folder, "files"), input_mode="File") if local.input_mode == "Pipe" else {}
        result = described(job, plan, read_job(readable[local.host_names[0]]) if readable else None)
        if args.check_input:
            readable = readable or local.lay_out(os.path.join(folder, "files"), input_mode="File")
            result["check_input"] = input_check(plan, readable, job)
        if args.probe:
            result["scaling"] = probe.scaling_of(job, plan)
    return result


def described(job, plan, readable=None) -> dict:
    """The plan, the TensorFlow build that runs it, what its first process trains on (format,
    columns; read from `readable`, a File-mode layout of the same job, where its own is Pipe
    mode), each training process's CPU settings (what `train` sets on this host, and which of
    them that build reads) and the folders."""
    settings = cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores, plan.processes_per_host)
    result = {"plan": plan.to_dict(), "tensorflow_line": job.tf_line.describe()}
    process = next((p for p in plan.processes if p.rank is not None and p.channels), None)
    if process is not None and not job.runs_script:
        from trainer.data.pipeline import InputSpec

        spec = InputSpec.for_process(readable or job, process, on_data_hosts=plan.data_service is not None)
        result["input"] = {**spec.describe(job.hyperparameters.feature_size), "input_mode": plan.input_mode}
    if plan.start is not None:
        result["start"] = plan.start.describe()
    if not job.runs_script and job.hyperparameters.extra:  # the built-in model's: read by nothing
        result["unknown_hyperparameters"] = [unknown_name_warning(key, job.entry_point is not None).split("; declared:")[0]
                                             for key in sorted(job.hyperparameters.extra)]
    return {**result, "cpu_settings": settings.describe(job.tf_line.openmp), "folders": folders_of(job)}


def folders_of(job) -> dict:
    """Where the job's outputs go on this host (checkpoints: checkpointconfig.json's LocalPath)."""
    return {"model": job.model_dir, "checkpoints": job.checkpoint_dir, "tensorboard": job.tensorboard_dir,
            "output_data": job.output_data_dir}


def input_check(plan, folders, job) -> dict:
    from trainer.data.check import check_input

    return check_input(plan, folders)
