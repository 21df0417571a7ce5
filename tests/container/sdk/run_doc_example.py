"""Run one Python example of the docs with the SageMaker Python SDK in local mode (run by
the SDK's own Python, see `./build.sh sdk-setup`). Only what local mode needs changes: the
image is the local one, `role` a local ARN (and `image` the image), `instance_type`
"local", and `s3://bucket/` a local folder. An example that uses what local mode does not
have (Pipe mode, checkpoint_s3_uri) is not fitted: the settings SageMaker would hand the
container (hyperparameters as the SDK encodes them, channels, hosts, instance type, input
mode, metric definitions) are printed for the test to run the same job with `trainer local`.

Argument: a JSON {"code": the example, "image": ..., "bucket": a folder, "then_fit":
{channel: uri} or null (an example that makes an estimator and fits nothing)}.
Prints `RESULT {json}` last: {"model_data": ...}, {"trainer_local": settings} or {"error": ...}.
"""
import json
import os
import re
import sys
import tempfile

from offline import configure_sdk

job = json.loads(sys.argv[1])
configure_sdk()
# Estimators made with instance_type "local" make their own LocalSession, which reads this.
home = tempfile.mkdtemp()
os.makedirs(os.path.join(home, ".sagemaker"))
with open(os.path.join(home, ".sagemaker", "config.yaml"), "w") as f:
    f.write("local:\n  local_code: true\n")
os.environ["HOME"] = home

from sagemaker.estimator import EstimatorBase  # noqa: E402
from sagemaker.inputs import TrainingInput  # noqa: E402
from sagemaker.workflow import is_pipeline_variable  # noqa: E402

ECR_IMAGE = re.compile(r'"<account>\.dkr\.ecr\.<region>\.amazonaws\.com/sagemaker-tf-trainer:[\w.-]+"')
INSTANCE_TYPE = re.compile(r'instance_type="(ml\.[\w.]+)"')
bucket = f"file://{job['bucket']}/"
code = job["code"]
instance_types = INSTANCE_TYPE.findall(code)
code = INSTANCE_TYPE.sub('instance_type="local"', ECR_IMAGE.sub(json.dumps(job["image"]), code))
code = code.replace("s3://bucket/", bucket)
result = {}
real_fit = EstimatorBase.fit


def channel(value) -> dict:
    if isinstance(value, TrainingInput):
        uri = value.config["DataSource"]["S3DataSource"]["S3Uri"]
        return {"path": uri[len("file://"):], "content_type": value.config.get("ContentType")}
    return {"path": value[len("file://"):], "content_type": None}


def fit(self, inputs=None, *args, **kwargs):
    lacks = [name for name, used in (("Pipe mode", self.input_mode == "Pipe"),
                                     ("checkpoint_s3_uri", bool(self.checkpoint_s3_uri))) if used]
    if not lacks:
        real_fit(self, inputs, wait=True, logs="All")
        result["model_data"] = self.model_data
        return
    hyperparameters = self.hyperparameters() or {}
    result["trainer_local"] = {  # what SageMaker would give the container
        "lacks": lacks, "instance_count": self.instance_count, "input_mode": self.input_mode,
        "instance_type": instance_types[0] if instance_types else "local",
        "hyperparameters": {str(k): v if is_pipeline_variable(v) or isinstance(v, str) else str(v)
                            for k, v in hyperparameters.items()},
        "metric_definitions": self.metric_definitions or [],
        "channels": {name: channel(value) for name, value in (inputs or {}).items()},
    }


EstimatorBase.fit = fit
namespace = {"role": "arn:aws:iam::111111111111:role/local", "image": job["image"]}
try:
    exec(compile(code, "<example>", "exec"), namespace)
    if not result and job.get("then_fit"):
        namespace["estimator"].fit({name: uri.replace("s3://bucket/", bucket) for name, uri in job["then_fit"].items()})
except Exception as err:  # the test reads the error
    result = {"error": f"{type(err).__name__}: {err}"}
print("RESULT " + json.dumps(result), flush=True)
