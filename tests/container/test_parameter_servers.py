"""The DeepFM demo's job in the image: parameter servers on two CPU hosts in Pipe mode, asked
for with the SDK's key as the demo's estimator does, and the README's first SageMaker
example's hyperparameters. Each host's worker streams its own FIFO through the worker task; the
coordinator evaluates from its host's evaluation FIFO through AWS's PipeModeDataset."""
import json
import os

import pytest

from hosts import hosts_of  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.container]
END_WITHIN_SEC = 300  # a hang guard, not a speed claim


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_parameter_servers_in_pipe_mode_on_two_hosts(hosts_of):
    readme = {"batch_size": 512, "num_epochs": 3, "learning_rate": 0.001}
    cluster = hosts_of({**readme, "sagemaker_parameter_server_enabled": "true", "log_steps": 4, "peer_wait_sec": 120},
                       input_mode="Pipe")
    cluster.start()
    codes = {host: cluster.wait(host, timeout=END_WITHIN_SEC) for host in ("algo-1", "algo-2")}
    log = cluster.logs("algo-1")
    assert codes == {"algo-1": 0, "algo-2": 0}, log[-4000:] + cluster.logs("algo-2")[-3000:]
    assert "distribution: parameter_server (sagemaker_parameter_server_enabled" in log
    assert "training channel(s) 'training' on each worker's host (Pipe read by project" in log
    assert "evaluation channel 'evaluation'" in log
    folder = cluster.folders["algo-1"]
    with open(os.path.join(folder, "output", "data", "metrics.json")) as f:
        metrics = json.load(f)
    # Each host's worker streams the 8,000 records and trains on its half, once an epoch.
    assert metrics["distribution"] == "parameter_server" and metrics["steps"] == 3 * 2 * 8, metrics
    assert metrics["eval_auc"] >= 0.65, metrics
    assert os.path.exists(os.path.join(folder, "model", "1", "saved_model.pb"))
    assert os.listdir(os.path.join(folder, "checkpoints"))
    assert os.path.exists(os.path.join(cluster.folders["algo-2"], "output", "success"))
