"""A job's hosts end together, through the SageMaker SDK's local mode as users run it: its
docker-compose stops every container as soon as the first one exits
(`--abort-on-container-exit`), so a host whose part ends first must not exit before the
others have ended theirs, or they are stopped mid-save and the job fails. Each kind of
two-host job runs with the order in which its hosts end set, and must succeed with every
host's exit code 0 (the end protocol itself, every order of events, is unit-tested in
tests/unit/test_peers.py):

- a script with no distribution (AWS's mnist example on two hosts), both orders: the
  second host's script ends first and the first host saves the model 5 s later, or the
  other way round;
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


@pytest.mark.cores(1)  # the scripts sleep; each host's `train` waits
@pytest.mark.parametrize("first, others", [(5, 0), (0, 5)], ids=["the first host ends last", "the first host ends first"])
def test_a_script_with_no_distribution(sdk_path, tmp_path, first, others):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": {},
                                                    "hyperparameters": {"seconds_first": first, "seconds_others": others},
                                                    "script": user_scripts(tmp_path, "end_apart.py")},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "model.json" in saved_model_members(result["model_data"])
    waiting_for = r"algo-1\S*" if first else r"algo-2\S*"  # the SDK's host names: algo-1-<suffix>
    assert re.search(rf"waiting for {waiting_for} to end theirs", log), log[-6000:]


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_a_parameter_server_estimator_script(sdk_path, sdk_inputs, tmp_path):
    script = user_scripts(tmp_path, "deepfm_ps_estimator.py", {"parameter_server": {"enabled": True}},
                          folder="aws_style")
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"max_steps": 40}, "script": script},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "entry point: script deepfm_ps_estimator.py" in log and "the Estimator API's model_fn" in log
    assert "distribution: parameter_server" in log
    assert any(name.endswith("saved_model.pb") for name in saved_model_members(result["model_data"]))


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_the_built_in_model(sdk_path, sdk_inputs, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 1,
                                                                        "distribution": "parameter_server"}},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: parameter_server" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])
