"""What both SDK drivers set before importing the SageMaker SDK: no telemetry calls (the jobs
run without network) and no notice of the SDK's next major version."""
import os
import tempfile


def configure_sdk() -> None:
    config = os.path.join(tempfile.mkdtemp(), "config.yaml")
    with open(config, "w") as f:
        f.write("SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n")
    os.environ["SAGEMAKER_USER_CONFIG_OVERRIDE"] = config
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
