"""Run one ModelTrainer example of the docs (SageMaker Python SDK 3.x) in local-container mode,
by the SDK's own Python (`./build.sh sdk-setup 3`). Only what local mode needs changes: the
image is the local one, `role` a local ARN, `instance_type` "local_cpu", `s3://bucket/` a
local folder, and every ModelTrainer the example makes runs in local-container mode under
`root`. Relative paths (`source_dir="src/"`) are the working directory's.

Argument: a JSON {"code": the example, "image": ..., "bucket": a folder, "root": a folder}.
Prints `RESULT {json}` last: {"model_data": ...} or {"error": ...}.
"""
import json
import os
import re
import sys

from offline import configure_sdk

job = json.loads(sys.argv[1])
configure_sdk()
os.makedirs(job["root"], exist_ok=True)

import boto3  # noqa: E402
import sagemaker.train  # noqa: E402
from sagemaker.train import Session  # noqa: E402
from sagemaker.train.model_trainer import Mode, ModelTrainer  # noqa: E402

ECR_IMAGE = re.compile(r'"<account>\.dkr\.ecr\.<region>\.amazonaws\.com/sagemaker-tf-trainer:[\w.-]+"')
INSTANCE_TYPE = re.compile(r'instance_type="ml\.[\w.]+"')


def local_model_trainer(**settings):
    """The example's ModelTrainer, in local-container mode."""
    return ModelTrainer(**settings, training_mode=Mode.LOCAL_CONTAINER, local_container_root=job["root"],
                        sagemaker_session=Session(boto_session=boto3.Session(region_name="us-east-1")))


sagemaker.train.ModelTrainer = local_model_trainer  # what `from sagemaker.train import ModelTrainer` finds
code = INSTANCE_TYPE.sub('instance_type="local_cpu"', ECR_IMAGE.sub(json.dumps(job["image"]), job["code"]))
code = code.replace("s3://bucket/", job["bucket"].rstrip("/") + "/")
try:
    exec(compile(code, "<example>", "exec"), {"role": "arn:aws:iam::111111111111:role/local"})
    result = {"model_data": "file://" + os.path.join(job["root"], "compressed_artifacts", "model.tar.gz")}
except Exception as err:  # the test reads the error
    result = {"error": f"{type(err).__name__}: {err}"}
print("RESULT " + json.dumps(result), flush=True)
