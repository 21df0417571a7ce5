"""Run one training job with the SageMaker Python SDK in local mode (run by the SDK's own
Python, see `./build.sh sdk-setup`). Argument: a JSON job description; prints
`RESULT {json}` last: the model artifact's URI, or the error.

    {"image": ..., "instance_count": 1, "hyperparameters": {...}, "inputs": {"training": "file://..."},
     "output": "file://...", "script": null | {"entry_point": "model.py", "source_dir": "...",
                                               "distribution": {...}, "model_dir": "s3://..."},
     "s3_endpoint": null | "http://...": an S3 API of the job's own (LocalSession's s3_endpoint_url)}
"""
import json
import os
import sys

from offline import configure_sdk

job = json.loads(sys.argv[1])
configure_sdk()

import boto3  # noqa: E402
from sagemaker.estimator import Estimator  # noqa: E402
from sagemaker.local import LocalSession  # noqa: E402
from sagemaker.tensorflow import TensorFlow  # noqa: E402

# LocalSession makes its S3 client from the boto session it is given (none: no S3 endpoint).
session = LocalSession(boto_session=boto3.Session(region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1")),
                       s3_endpoint_url=job.get("s3_endpoint"))
session.config = {"local": {"local_code": True}}
common = dict(image_uri=job["image"], role="arn:aws:iam::111111111111:role/local", instance_type="local",
              instance_count=job["instance_count"], sagemaker_session=session, output_path=job["output"],
              hyperparameters=job.get("hyperparameters", {}))
script = job.get("script")
if script:
    # The versions only feed the SDK's checks of `distribution` (the image is given).
    estimator = TensorFlow(entry_point=script["entry_point"], source_dir=script["source_dir"],
                           distribution=script.get("distribution"), framework_version="2.14",
                           py_version="py310", model_dir=script.get("model_dir"), **common)
else:
    estimator = Estimator(**common)
try:
    estimator.fit(job["inputs"] or None, wait=True, logs="All")
    result = {"model_data": estimator.model_data}
except Exception as err:  # the test reads the error
    result = {"error": f"{type(err).__name__}: {err}"}
print("RESULT " + json.dumps(result), flush=True)
