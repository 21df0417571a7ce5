"""A parameter-server script whose worker host starts late, through the SageMaker SDK's
local mode: the master trains to max_steps before the worker's Estimator starts, and the
worker's script still runs to its end (its last line is printed) within ps_worker_grace_sec,
as in AWS's container. Repeated: the master's end and the worker's start race, and a
container that exits first stops the others in the SDK's local mode."""
import re

import pytest

from sdk_jobs import TWO_HOST_TIMEOUT_SEC, every_host_succeeded, sdk_inputs, sdk_job, sdk_path, user_scripts  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.container]
RUNS = 5


@pytest.mark.parametrize("run", range(RUNS))
def test_a_late_parameter_server_workers_script_runs_to_its_end(sdk_path, sdk_inputs, tmp_path, run):
    script = user_scripts(tmp_path, "deepfm_ps_estimator.py", {"parameter_server": {"enabled": True}},
                          folder="aws_style")
    script["model_dir"] = "/tmp/estimator"  # each host's own: the master's checkpoints, the worker's none
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"max_steps": 20, "worker_start_delay": 15},
                                                    "script": script},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    worker = re.search(r"(algo-2-\w+): starting 15 s late", log)
    assert worker, log[-6000:]
    assert f"{worker.group(1)}: the script's last line" in log, log[-6000:]
    assert "ended by itself" in log and "still running" not in log, log[-6000:]
