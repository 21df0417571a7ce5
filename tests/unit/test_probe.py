"""trainer plan --probe's mechanics that need no TensorFlow: how its ranks are started, and
a machine without mpirun told so."""
import pytest

from trainer.contract.job import read_job
from trainer.measure import probe
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
    ("local_sgd", None),  # MPI's ranks without Horovod: no cycle to set
])
def test_the_exchange_probe_runs_two_mpi_ranks_with_the_mode_s_settings(job, mode, cycle_time):
    command, env = probe.exchange_command(job, mode, 1)
    assert command[:4] == ["mpirun", "--allow-run-as-root", "-np", "2"]
    # The ranks train as the mode does, each on a CPU of its own, with a 1-CPU host's settings.
    assert command[-7:][1:] == ["trainer", "plan", "--exchange-rank", mode, "--exchange-cpus", "1"]
    assert env.get("HOROVOD_CYCLE_TIME") == cycle_time and env["OMP_NUM_THREADS"] == "1"
    for name in env:  # each exported to both ranks
        assert command[command.index(name) - 1] == "-x"
    # Over TCP on loopback only: on every interface, a bridge left down with an address (docker0)
    # kept the ranks' all-reduce waiting forever.
    options = " ".join(command)
    assert "-mca btl tcp,self" in options and "-mca btl_tcp_if_include lo" in options


@pytest.mark.parametrize("mode, roles", [
    ("multi_worker_mirrored", ["chief", "worker"]),
    # The coordinator, then each host's worker and PS task.
    ("parameter_server", ["chief", "worker", "ps", "worker", "ps"]),
])
def test_the_probe_of_a_tensorflow_cluster_runs_the_two_host_plan_s_processes_on_this_machine(job, mode, roles):
    import json

    launches, reporter = probe.probe_processes(job, mode, 1)
    configs = [json.loads(env["TF_CONFIG"]) for _, env in launches]
    assert [env[probe.PROCESS_ENV] for _, env in launches] == [str(index) for index in range(len(roles))]
    assert [config["task"]["type"] for config in configs] == roles
    assert roles[reporter] == "chief"
    # One cluster, every task on a port of its own on this machine's loopback.
    (cluster,) = {json.dumps(config["cluster"], sort_keys=True) for config in configs}
    addresses = [entry for entries in json.loads(cluster).values() for entry in entries]
    assert len(addresses) == len(roles) == len(set(addresses))
    assert all(address.startswith("127.0.0.1:") for address in addresses)
    for command, env in launches:  # each as a host of one CPU, with such a host's settings
        assert command[-6:] == ["trainer", "plan", "--exchange-rank", mode, "--exchange-cpus", "1"]
        assert env["OMP_NUM_THREADS"] == "1"


def test_a_machine_without_mpirun_is_told_what_the_probe_needs(job, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun here
    with pytest.raises(JobError, match="OpenMPI's mpirun, which is not on this machine's PATH"):
        probe.measure_exchange(job, "horovod", 1, 0.01)


@pytest.mark.parametrize("input_mode, cache_input, epochs, share", [
    ("File", "auto", 2, 0.5),   # the first of 2 epochs reads the files; the second, the cache
    ("File", "true", 4, 0.25),
    ("File", "auto", 1, 1.0),
    ("File", "false", 4, 1.0),  # not cached: every epoch reads its files
    ("Pipe", "auto", 4, 1.0),   # a FIFO every epoch
])
def test_the_share_of_steps_that_read_the_files_follows_the_input_s_cache(job, input_mode, cache_input, epochs,
                                                                         share):
    hp = job.hyperparameters.with_value("cache_input", cache_input).with_value("num_epochs", epochs)
    assert probe.first_pass_share(hp, input_mode) == share


def test_a_job_the_probe_cannot_measure_is_told_why_and_trains_on(job, caplog):
    """probe_scaling on a job with GPUs: a warning in the log with the reason; no exception."""
    import dataclasses
    import logging

    from trainer.planner.planner import make_plan

    gpus = dataclasses.replace(job, num_gpus=1)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        probe.log_prediction(gpus, make_plan(gpus))
    assert caplog.messages == ["probe_scaling: not measured: --probe measures CPU hosts; this job has GPUs"]


@pytest.mark.parametrize("command, message", [
    (["sleep", "5"], "a measuring process did not end within 0.2 s"),
    (["sh", "-c", "echo broken >&2; exit 3"], "a measuring process failed (exit 3): broken"),
])
def test_a_measuring_process_that_hangs_or_fails_is_a_job_error(command, message):
    """What --probe and probe_scaling catch and report (a hung probe is not the job's end)."""
    import re

    from trainer.measure.rates import json_result

    with pytest.raises(JobError, match="^" + re.escape(message)):
        json_result(command, {}, 0.2 if command[0] == "sleep" else 10, "a measuring process")


@pytest.mark.parametrize("mode", ["horovod", "local_sgd", "multi_worker_mirrored", "parameter_server"])
def test_one_host_s_step_is_measured_as_one_host_alone_trains_not_as_the_mode_steps(job, mode):
    """The baseline --probe compares more hosts with: the plan of the job on its first host
    alone, whatever the mode asked for; a strategy's replicas step once a call, one process
    several times."""
    import dataclasses

    from trainer.measure.rates import alone_on_this_host
    from trainer.planner.planner import make_plan

    asked = dataclasses.replace(job, hyperparameters=job.hyperparameters.with_value("distribution", mode))
    alone = make_plan(alone_on_this_host(asked))
    one_host_job = make_plan(dataclasses.replace(job, hosts=(job.current_host,)))
    assert alone.hosts == (job.current_host,) and alone.mode == one_host_job.mode == "single"
    assert alone.steps_per_execution == one_host_job.steps_per_execution > 1
    if mode == "multi_worker_mirrored":
        assert make_plan(asked).steps_per_execution == 1


def test_the_one_host_step_s_measuring_process_is_told_so():
    from trainer.measure import tune

    start = {"intra_op_threads": 1, "inter_op_threads": 2, "omp_num_threads": 1, "kmp_affinity": "disabled",
             "kmp_blocktime": 1}
    assert tune.probe_command(start, cached=True, one_host=True)[0][-2:] == ["--cached", "--one-host"]
    assert "--one-host" not in tune.probe_command(start)[0]


def test_one_host_alone_of_a_job_with_a_data_group_is_fed_by_no_other_host():
    from test_groups import CPU
    from test_groups import job as grouped_job

    from trainer.measure.rates import alone_on_this_host
    from trainer.planner.planner import make_plan

    grouped = grouped_job([("dnn", CPU, 2), ("feed", CPU, 1)], hp={"training_groups": "dnn"})
    assert make_plan(grouped).data_service is not None
    alone = make_plan(alone_on_this_host(grouped))
    assert alone.hosts == ("algo-1",) and alone.mode == "single" and alone.data_service is None
