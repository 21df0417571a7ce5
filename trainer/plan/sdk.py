"""The SageMaker Python SDK's `distribution=` argument, as the framework hyperparameters
it becomes, read as AWS's TensorFlow container reads them."""
from __future__ import annotations

import os

from trainer.contract.values import parse_bool
from trainer.errors import JobError
from trainer.plan.types import SshTrust

PS = "sagemaker_parameter_server_enabled"
MPI = "sagemaker_mpi_enabled"
MPI_PROCESSES = "sagemaker_mpi_num_of_processes_per_host"
MPI_OPTIONS = "sagemaker_mpi_custom_mpi_options"
MWMS = "sagemaker_multi_worker_mirrored_strategy_enabled"
# The keys that ask for a mode (Mode.sdk_key), in the order AWS's container reads them.
MODE_KEYS = (PS, MWMS, MPI)

# The SDK's keys for what this container does not run: they end the job at once.
SMDDP = "sagemaker_distributed_dataparallel_enabled"
UNSUPPORTED = {
    SMDDP: "SageMaker's distributed data parallel library (smdistributed.dataparallel) is not in this "
           "image: use distribution={'mpi': ...} (Horovod) or multi_worker_mirrored_strategy",
    "mp_parameters": "SageMaker's model parallel library (smdistributed.modelparallel) is not in this image",
}


def enabled(job, key: str) -> bool:
    """An SDK key's value, read as boolean hyperparameters are; anything else is off."""
    try:
        return parse_bool(job.framework_params.get(key, False))
    except ValueError:
        return False


def refuse_unsupported(job) -> None:
    for key, why in UNSUPPORTED.items():
        # smdistributed.dataparallel is a framework key, true or false; model parallel's
        # `mp_parameters` is a hyperparameter the SDK sets only when it is on.
        if enabled(job, key) if key == SMDDP else key in job.hyperparameters.extra:
            raise JobError(f"{key}: {why}")


# The SDK ModelTrainer's MPI driver (sagemaker.modules.train.container_drivers), run by its
# sm_train.sh as `python3 .../distributed_drivers/mpi_driver.py`.
MODEL_TRAINER_MPI_DRIVER = ("distributed_drivers", "mpi_driver.py")


def driver_ssh_trust(hosts, hyperparameters: dict, argv: list[str]) -> SshTrust | None:
    """Who logs in to whom over ssh for an MPI driver that is not this image's `train` (None:
    it runs no MPI across hosts): the training toolkit's MPI runner (its `train` with the
    SDK's MPI key) and ModelTrainer's MPI driver both log in from every host to the others."""
    if len(hosts) < 2:
        return None
    program = os.path.normpath(argv[1]) if len(argv) > 1 and os.path.basename(argv[0]).startswith("python") else ""
    by_model_trainer = tuple(program.split(os.sep)[-2:]) == MODEL_TRAINER_MPI_DRIVER
    try:
        by_toolkit = parse_bool(hyperparameters.get(MPI, False))
    except ValueError:
        by_toolkit = False
    return SshTrust.everyone(hosts) if by_model_trainer or by_toolkit else None
