"""A heterogeneous cluster in containers of the image: docs/distribution.md's example job (its
instance groups and hyperparameters, as SageMaker hands them to the container; the SDK's
local mode does not run instance groups), each host a container on the job's network. The
data group's host serves tf.data service, the training group's host trains through it, and
both end; nothing is left in the engine."""
import ast
import os
import pathlib
import re

import pytest

from conftest import PROJECT_ROOT
from hosts import ContainerHosts
from trainer.local.runner import LocalJob

pytestmark = [pytest.mark.slow, pytest.mark.container]
JOB_WITHIN_SEC = 600  # a hang guard, not a speed claim


def documented_job() -> tuple[tuple, dict]:
    """The example's instance groups [(name, count, type)] and hyperparameters, as SageMaker
    writes them (values as strings)."""
    page = (pathlib.Path(PROJECT_ROOT) / "docs" / "distribution.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", page, re.S) if "InstanceGroup(" in block)
    groups = tuple((name, int(count), instance_type) for name, instance_type, count in
                   re.findall(r'InstanceGroup\("([^"]+)", "([^"]+)", (\d+)\)', code))
    hyperparameters = ast.literal_eval(re.search(r"hyperparameters=(\{.*?\})", code).group(1))
    return groups, {key: str(value) for key, value in hyperparameters.items()}


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_the_documented_heterogeneous_job(network_ready, aws_split, tmp_path):
    groups, hyperparameters = documented_job()
    assert [name for name, _, _ in groups] == ["data_group", "dnn_group"]
    job = LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                   {**hyperparameters, "num_epochs": "1"}, hosts=2, groups=groups)
    cluster = ContainerHosts(network_ready, job, tmp_path / "job", [os.path.dirname(aws_split["training"])])
    try:
        cluster.start()
        codes = {host: cluster.wait(host, timeout=JOB_WITHIN_SEC) for host in ("algo-2", "algo-1")}
        data_log, training_log = cluster.logs("algo-1"), cluster.logs("algo-2")
        assert codes == {"algo-1": 0, "algo-2": 0}, (data_log[-3000:], training_log[-3000:])
        assert "tf.data service dispatcher on algo-1:2226" in data_log and "tf.data service worker" in data_log
        assert "distribution: this host feeds the training hosts (algo-2)" in data_log
        assert "through the data hosts' tf.data service (algo-1)" in training_log
        assert "training: dnn_group (hyperparameter training_groups)" in training_log
        # The training host's price counts both groups' instances.
        assert "1 x ml.c5.4xlarge, 1 x ml.c5.9xlarge" in training_log
        assert os.path.exists(os.path.join(cluster.folders["algo-2"], "model", "1", "saved_model.pb"))
        assert all(os.path.exists(os.path.join(folder, "output", "success")) for folder in cluster.folders.values())
    finally:
        cluster.remove()
    assert cluster.leftovers() == []
