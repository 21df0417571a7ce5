"""What SageMaker would show as FailureReason (the failure file, which the SDK's local mode
packs into output.tar.gz), for a user's script through the SDK's local mode: the script's
own failure file first and whole, and a Horovod rank that ended early named as the cause."""
import tarfile

import pytest

from sdk_jobs import ONE_HOST_TIMEOUT_SEC, sdk_inputs, sdk_job, sdk_path, user_scripts  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.container]


def failure_file(tmp_path) -> str:
    """The failure file as the SDK's local mode packs it for a file:// output path: into
    output.tar.gz right there, also for a job that failed."""
    with tarfile.open(tmp_path / "output" / "output.tar.gz") as archive:
        return archive.extractfile("failure").read().decode()


@pytest.mark.cores(1)
def test_a_script_s_own_failure_file_stays_first(sdk_path, sdk_inputs, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "instance_count": 1, "inputs": sdk_inputs,
        "hyperparameters": {"fail_with": "the data has no label column", "write_failure_file": 1},
        "script": user_scripts(tmp_path, "keras_train.py")}, timeout=ONE_HOST_TIMEOUT_SEC)
    assert "error" in result, log[-4000:]
    failure = failure_file(tmp_path)
    assert failure.startswith("the script's own reason: the data has no label column\n\n"
                              "--- what the container saw ---\n"
                              "script keras_train.py (rank 0 on algo-1-"), failure


@pytest.mark.cores(2)
def test_a_horovod_rank_that_stopped_early_is_named(sdk_path, sdk_inputs, tmp_path):
    """EarlyStopping on rank 0 only (2 ranks on one host): rank 0 ends after 2 epochs while
    rank 1 waits in an allreduce."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "instance_count": 1, "inputs": sdk_inputs,
        "hyperparameters": {"early_stopping_on_rank0": 1, "epochs": 4},
        "script": user_scripts(tmp_path, "hvd_train.py",
                               distribution={"mpi": {"enabled": True, "processes_per_host": 2}})},
        timeout=ONE_HOST_TIMEOUT_SEC)
    assert "error" in result, log[-4000:]
    first = failure_file(tmp_path).splitlines()[0]
    assert first.startswith("rank 0 on algo-1-") and " ended its script (exit code 0) while rank 1 on algo-1-" in first \
        and first.endswith("still waited in an allreduce: the ranks ran different numbers of steps or collectives, for "
                           "example EarlyStopping, a data shard or a save on one rank only (docs/faults.md, 'Ranks out "
                           "of step')"), first
