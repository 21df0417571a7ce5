"""Run one training job with the SageMaker Python SDK's ModelTrainer in local-container mode:
SDK 3.x's (`sagemaker.train`, the SDK's current major version) or SDK 2.x's
(`sagemaker.modules.train`), whichever this Python has; run by the SDK's own Python
(`./build.sh sdk-setup [2|3]`). Argument: a JSON job description; prints `RESULT {json}`
last: the model artifact's URI, or the error.

    {"image": ..., "hyperparameters": {...}, "inputs": {"training": "/local/folder"},
     "root": "/folder for the job's files", "instance_count": 1,
     "source_dir": ..., "entry_script": "train.py" (absent: the image's own `train`, no code),
     "command": "train" (SourceCode's command: the image's `train` runs the entry script),
     "mpi_processes_per_host": 2 (distributed=MPI(...); absent: none),
     "environment": {...}}

Without `command`, ModelTrainer starts its own driver as the container's entry point
(sm_train.sh, then python3 on the script, or its MPI driver), not the image's `train`.
"""
import json
import os
import sys

from offline import configure_sdk

job = json.loads(sys.argv[1])
configure_sdk()
os.makedirs(job["root"], exist_ok=True)  # where ModelTrainer keeps the job's folders

import boto3  # noqa: E402

try:  # SDK 3.x
    from sagemaker.train import ModelTrainer, Session  # noqa: E402
    from sagemaker.train.configs import Compute, InputData, SourceCode  # noqa: E402
    from sagemaker.train.distributed import MPI  # noqa: E402
    from sagemaker.train.model_trainer import Mode  # noqa: E402
except ImportError:  # SDK 2.x
    from sagemaker.modules import Session  # noqa: E402
    from sagemaker.modules.configs import Compute, InputData, SourceCode  # noqa: E402
    from sagemaker.modules.distributed import MPI  # noqa: E402
    from sagemaker.modules.train import ModelTrainer  # noqa: E402
    from sagemaker.modules.train.model_trainer import Mode  # noqa: E402

code = {key: job[key] for key in ("source_dir", "entry_script", "command") if key in job}
trainer = ModelTrainer(training_image=job["image"], training_mode=Mode.LOCAL_CONTAINER,
                       source_code=SourceCode(**code) if code else None,
                       compute=Compute(instance_type="local_cpu", instance_count=job.get("instance_count", 1)),
                       distributed=(MPI(process_count_per_node=job["mpi_processes_per_host"])
                                    if "mpi_processes_per_host" in job else None),
                       hyperparameters=job.get("hyperparameters", {}), environment=job.get("environment", {}),
                       base_job_name="trainer-test", role="arn:aws:iam::111111111111:role/local",
                       local_container_root=job["root"],
                       sagemaker_session=Session(boto_session=boto3.Session(region_name="us-east-1")))
try:
    trainer.train(input_data_config=[InputData(channel_name=name, data_source=path)
                                     for name, path in job.get("inputs", {}).items()], wait=True)
    result = {"model_data": "file://" + os.path.join(job["root"], "compressed_artifacts", "model.tar.gz")}
except Exception as err:  # the test reads the error
    result = {"error": f"{type(err).__name__}: {err}"}
print("RESULT " + json.dumps(result), flush=True)
