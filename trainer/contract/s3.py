"""What TensorFlow's S3 filesystem reads from the environment, for a user's script.

TensorFlow opens `s3://` paths (tf.io.gfile, checkpoints, SavedModel, an Estimator's
model_dir) through tensorflow-io's filesystem once the script imports `tensorflow_io`; that
filesystem reads S3_ENDPOINT, and TensorFlow's own before 2.6 also read S3_REGION and
S3_USE_HTTPS. AWS's TensorFlow toolkit exports those two for every script (its
s3_utils.configure); so does this container, without overriding what the job sets itself.
Where the job points boto3 at an S3 endpoint of its own (AWS_ENDPOINT_URL_S3, which the
SageMaker SDK's local mode passes for a LocalSession with s3_endpoint_url, or
AWS_ENDPOINT_URL), TensorFlow is pointed at the same one, which AWS's container leaves to
the user.
"""
from __future__ import annotations

from urllib.parse import urlsplit

ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def s3_environment(environ) -> dict[str, str]:
    """The S3_* variables to set for a script's process (the job's own settings kept)."""
    values = {"S3_REGION": environ.get("SAGEMAKER_REGION", environ.get("AWS_REGION", "")), "S3_USE_HTTPS": "1"}
    endpoint = next((environ[name] for name in ENDPOINT_VARIABLES if environ.get(name, "").strip()), None)
    if endpoint:
        # tensorflow-io hands S3_ENDPOINT to the AWS SDK's OverrideEndpoint, which takes the
        # scheme from it (https when there is none); S3_USE_HTTPS says the same to older readers.
        values["S3_ENDPOINT"] = endpoint.strip()
        values["S3_USE_HTTPS"] = "0" if urlsplit(endpoint.strip()).scheme == "http" else "1"
    return {name: value for name, value in values.items() if not environ.get(name, "").strip()}
