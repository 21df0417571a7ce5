"""A parameter-server script whose worker host starts late, through the SageMaker SDK's
local mode: the master trains to max_steps before the worker's Estimator starts, and the
worker's script still runs to its end (its last line is printed), never stopped by its
host, as in AWS's container (in the SDK's local mode, a container that exits first stops
the others)."""
import re

import pytest

from sdk_jobs import TWO_HOST_TIMEOUT_SEC, every_host_succeeded, sdk_inputs, sdk_job, sdk_path, user_scripts  # noqa: F401
from test_aws_behaviours import s3_on_the_sdk_network  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.container]


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_a_late_parameter_server_workers_script_runs_to_its_end(sdk_path, sdk_inputs, tmp_path, s3_on_the_sdk_network):
    script = user_scripts(tmp_path, "deepfm_ps_estimator.py", {"parameter_server": {"enabled": True}},
                          folder="aws_style")
    # On S3, as the SDK's default: each host's parameter server writes its shard of a checkpoint there.
    s3 = s3_on_the_sdk_network
    script["model_dir"] = f"s3://{s3.bucket()}/estimator"
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs, "s3_endpoint": s3.endpoint,
                                                    "hyperparameters": {"max_steps": 20, "worker_start_delay": 15},
                                                    "script": script},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    worker = re.search(r"(algo-2-\w+): starting 15 s late", log)
    assert worker, log[-6000:]
    assert f"{worker.group(1)}: the script's last line" in log, log[-6000:]
    # It ended by itself: after the master's end, within its grace, or before it (under
    # load the master's evaluation and export may outlast the late worker's short run).
    assert "still running" not in log, log[-6000:]
