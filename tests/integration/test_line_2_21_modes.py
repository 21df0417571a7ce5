"""The built-in model's eval AUC on the 2.21 line against the 2.14 line's, in the modes that
test_line_2_21.py's check (one process, parameter servers on two hosts) leaves out: replicas
in one process (tower, mirrored), multi-worker mirrored on two hosts and Horovod (two ranks,
on the line's Horovod built against TensorFlow 2.21). Each case runs the same job on both
lines, in the full tier (`./build.sh test-all`, marked for the 2.21 line), as are
test_line_2_21.py's."""
import pytest

from test_line_2_21 import pytestmark, the_same_job_on_both_lines  # noqa: F401 (the 2.21 line's marks)


@pytest.mark.cores(2)
@pytest.mark.parametrize("hosts, hyperparameters", [
    (1, {"distribution": "tower", "replicas": 2}),
    (1, {"distribution": "mirrored", "replicas": 2}),
    (2, {"distribution": "multi_worker_mirrored"}),
    (1, {"distribution": "horovod", "processes_per_host": 2}),
], ids=["tower", "mirrored", "multi_worker_mirrored on 2 hosts", "horovod, 2 ranks"])
def test_the_built_in_model_reaches_the_2_14_line_s_auc_in_every_mode(aws_split, tmp_path, hosts, hyperparameters):
    the_same_job_on_both_lines(aws_split, tmp_path, hosts, hyperparameters)
