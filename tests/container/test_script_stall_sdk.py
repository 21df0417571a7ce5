"""A user's Horovod script whose last rank skips an allreduce, on 2 hosts x 2 ranks, through
the SageMaker SDK's local mode: the job ends within stall_timeout_sec (30 s here) plus its
start and end, with the rank named, and each host's log shows its ranks' lines (py-spy reads
them inside the container)."""
import re

import pytest

from sdk_jobs import TWO_HOST_TIMEOUT_SEC, sdk_job, sdk_path, user_scripts  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.container]


def test_a_stalled_horovod_rank_ends_the_job_named(sdk_path, tmp_path):
    result, log, took = sdk_job(sdk_path, tmp_path, {
        "instance_count": 2, "inputs": {},
        "hyperparameters": {"stall_timeout_sec": 30, "sagemaker_mpi_enabled": True,
                            "sagemaker_network_interface_name": "eth0", "sagemaker_mpi_num_of_processes_per_host": 2},
        "script": user_scripts(tmp_path, "hvd_stall.py")}, timeout=TWO_HOST_TIMEOUT_SEC)
    assert "error" in result and "model_data" not in result, log[-4000:]
    # The master's host ends with exit code 3 (stalled); the other host reads why and ends first.
    assert sorted(e["exit_code"] for e in result["exits"]) == [1, 3], (result["exits"], log[-4000:])
    assert re.search(r"script hvd_stall\.py: rank 3 on algo-2-\w+ made no progress for \d+ s: never joined the "
                     r"Horovod collective", log), log[-4000:]
    assert re.search(r"rank 0 \(pid \d+\) on algo-1-\w+:\n.*\n(.*\n)*?.*main \(hvd_stall\.py:30\)", log), log[-4000:]
    assert re.search(r"write_the_report_alone \(hvd_stall\.py:\d+\)", log), log[-4000:]  # algo-2's own log
    print(f"the stalled job ended {took:.0f} s after the SDK started it")
