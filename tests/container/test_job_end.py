"""A job's hosts end together, through the SageMaker SDK's local mode as users run it: its
docker-compose stops every container as soon as the first one exits
(`--abort-on-container-exit`), so a host whose part ends first must not exit before the
others have ended theirs, or they are stopped mid-save and the job fails. Each kind of
two-host job runs RACE_RUNS times; every run must succeed with every host's exit code 0:

- a script with no distribution (AWS's mnist example on two hosts): the second host's
  script ends at once and the first host saves the model 5 s later;
- a parameter-server tf.estimator script in the style of the DeepFM demo (the Estimator
  API's model_fn, argparse at its top level): run as a script, not taken for hooks; its
  worker ends before the master, which evaluates and exports;
- the built-in model (parameter servers, the container's default on CPU hosts): the other
  host ends once the coordinator's host is done, and exits first."""
import re

import pytest

from sdk_jobs import (TWO_HOST_TIMEOUT_SEC, every_host_succeeded, saved_model_members, sdk_inputs, sdk_job,  # noqa: F401
                      sdk_path, user_scripts)

pytestmark = [pytest.mark.slow, pytest.mark.container]
RACE_RUNS = 5


@pytest.mark.parametrize("run", range(RACE_RUNS))
def test_a_script_with_no_distribution(sdk_path, tmp_path, run):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": {},
                                                    "hyperparameters": {"seconds_first": 5, "seconds_others": 0},
                                                    "script": user_scripts(tmp_path, "end_apart.py")},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "model.json" in saved_model_members(result["model_data"])
    assert re.search(r"waiting for algo-1\S* to end theirs", log)  # the SDK's host names: algo-1-<suffix>


@pytest.mark.parametrize("run", range(RACE_RUNS))
def test_a_parameter_server_estimator_script(sdk_path, sdk_inputs, tmp_path, run):
    script = user_scripts(tmp_path, "deepfm_ps_estimator.py", {"parameter_server": {"enabled": True}},
                          folder="aws_style")
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"max_steps": 40}, "script": script},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "entry point: script deepfm_ps_estimator.py" in log and "the Estimator API's model_fn" in log
    assert "distribution: parameter_server" in log
    assert any(name.endswith("saved_model.pb") for name in saved_model_members(result["model_data"]))


@pytest.mark.parametrize("run", range(RACE_RUNS))
def test_the_built_in_model(sdk_path, sdk_inputs, tmp_path, run):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 1}},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: parameter_server" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])
