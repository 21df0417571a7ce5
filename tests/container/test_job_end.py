"""A job's hosts end together, through the SageMaker SDK's local mode as users run it: its
docker-compose stops every container as soon as the first one exits
(`--abort-on-container-exit`), so a host whose part ends first must not exit before the
others have ended theirs, or they are stopped mid-save and the job fails. Each kind of
two-host job runs RACE_RUNS times, with the first host ending its part last; every run
must succeed with every host's exit code 0."""
import pytest

from sdk_jobs import (TWO_HOST_TIMEOUT_SEC, every_host_succeeded, saved_model_members, sdk_inputs, sdk_job,  # noqa: F401
                      sdk_path, user_scripts)

pytestmark = [pytest.mark.slow, pytest.mark.container]
RACE_RUNS = 5


@pytest.mark.parametrize("run", range(RACE_RUNS))
def test_a_script_with_no_distribution(sdk_path, tmp_path, run):
    """AWS's mnist example on two hosts: every host trains, the first alone saves the model.
    Here the second host's script ends at once and the first saves 5 s later."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": {},
                                                    "hyperparameters": {"seconds_first": 5, "seconds_others": 0},
                                                    "script": user_scripts(tmp_path, "end_apart.py")},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "model.json" in saved_model_members(result["model_data"])
    assert "waiting for algo-1 to end theirs" in log
