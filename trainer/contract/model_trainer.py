"""What SageMaker's ModelTrainer (SDK 3.x, and SDK 2.x's `sagemaker.modules`) hands the image
when `train` is its SourceCode's command: `SourceCode(source_dir=..., entry_script=...,
command="train")` runs `train` in the code's folder instead of ModelTrainer's own drivers, and
the SDK writes what the user gave in its drivers' channel (`sm_drivers`): the SourceCode
(`sourcecode.json`) and the `distributed=` runner (`distributed.json`). Read here as the
same entry point and SDK keys that SDK 2.x's `sagemaker_program` and `distribution=` give.
"""
from __future__ import annotations

import json
import os

from trainer.errors import JobError

DRIVERS_CHANNEL = "sm_drivers"  # ModelTrainer's channel of its drivers and the two files
CODE_CHANNEL = "code"  # ModelTrainer's channel of SourceCode's source_dir


def _read_driver_file(data_dir: str, name: str) -> dict:
    path = os.path.join(data_dir, DRIVERS_CHANNEL, name)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as err:
        raise JobError(f"{path} line {err.lineno}: not JSON ({err.msg}): ModelTrainer writes it; "
                       "was the sm_drivers channel replaced?") from None
    if not isinstance(value, dict):
        raise JobError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def entry_script(data_dir: str) -> tuple[str, str] | None:
    """(the entry script, the folder it is in) of ModelTrainer's SourceCode; None: none."""
    script = str(_read_driver_file(data_dir, "sourcecode.json").get("entry_script") or "")
    return (script, os.path.join(data_dir, CODE_CHANNEL)) if script else None


def sdk_keys(data_dir: str) -> dict:
    """ModelTrainer's `distributed=` as the SDK keys AWS's container reads: `MPI(...)` is
    `distribution={"mpi": {...}}` (its process_count_per_node per host, its options).
    Torchrun is PyTorch's launcher and refused."""
    distributed = _read_driver_file(data_dir, "distributed.json")
    if not distributed:
        return {}
    if "mpi_additional_options" not in distributed:
        raise JobError(f"ModelTrainer's distributed= {distributed}: torchrun launches PyTorch; for TensorFlow use "
                       "distributed=MPI(process_count_per_node=N) (Horovod, or mpi4py), or the hyperparameter "
                       "'distribution' (multi_worker_mirrored, parameter_server)")
    keys = {"sagemaker_mpi_enabled": True}
    if distributed.get("process_count_per_node"):
        keys["sagemaker_mpi_num_of_processes_per_host"] = int(distributed["process_count_per_node"])
    if distributed.get("mpi_additional_options"):
        keys["sagemaker_mpi_custom_mpi_options"] = " ".join(distributed["mpi_additional_options"])
    return keys
