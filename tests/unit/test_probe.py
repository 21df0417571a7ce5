"""trainer plan --probe's mechanics that need no TensorFlow: how its ranks are started, and
a machine without mpirun told so."""
import pytest

from trainer.contract.job import read_job
from trainer.cpu import probe
from trainer.errors import JobError
from trainer.local import runner


@pytest.fixture
def job(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part.tfrecords").write_bytes(b"")
    monkeypatch.setenv("SM_NUM_CPUS", "1")
    local = runner.LocalJob({"training": [str(tmp_path / "data")]}, {}, hosts=2)
    return read_job(local.lay_out(str(tmp_path / "job"))["algo-1"])


@pytest.mark.parametrize("mode, cycle_time", [
    ("horovod", "0.1"),  # CPU ranks with a CPU each, as the job's: a step's exchange waits for two cycles
    ("local_sgd", "1.0"),  # averaging every few steps: a longer cycle polls less
])
def test_the_exchange_probe_runs_two_ranks_with_the_mode_s_horovod_settings(job, mode, cycle_time):
    command, env = probe.exchange_command(job, mode)
    assert command[:4] == ["mpirun", "--allow-run-as-root", "-np", "2"]
    assert command[-4:][1:] == ["trainer", "plan", "--exchange-rank"]
    assert env["HOROVOD_CYCLE_TIME"] == cycle_time
    for name in env:  # each exported to both ranks
        assert command[command.index(name) - 1] == "-x"


def test_a_machine_without_mpirun_is_told_what_the_probe_needs(job, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun here
    with pytest.raises(JobError, match="OpenMPI's mpirun, which is not on this machine's PATH"):
        probe.measure_exchange(job, "horovod")
