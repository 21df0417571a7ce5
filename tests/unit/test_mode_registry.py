"""The mode registry: a new mode is one Mode subclass in one module; the planner and the
`distribution` hyperparameter find it, and plan with it like the built-in ones."""
import pytest
from test_planner import job

from trainer import modes
from trainer.errors import JobError
from trainer.modes.base import REGISTERED, Mode, Runtime, register
from trainer.planner.planner import make_plan
from trainer.plan.types import WORKER_COMMAND, Launch, LaunchKind


class PairRuntime(Runtime):
    pass


@pytest.fixture
def pair_mode():
    """A toy mode, as its own module would declare it: two synchronous processes per host
    started by mpirun, each evaluating its shard; faster than every built-in mode, on three
    hosts or more."""

    @register
    class Pair(Mode):
        name = "pair"
        runtime = PairRuntime
        sharded_evaluation = True
        speed_rank = 5  # before the built-in modes
        min_hosts = 3

        def describe(self, job):
            return "two per host"

        def processes_per_host(self, job):
            return 2

        def launch(self, job, per_host):
            return Launch(LaunchKind.MPIRUN, ("mpirun", "-np", str(per_host * len(job.hosts))) + WORKER_COMMAND)

    yield Pair
    del REGISTERED["pair"]


def test_a_registered_mode_is_a_distribution_and_plans(pair_mode):
    assert "pair" in modes.names()
    plan = make_plan(job(hosts=2, hp={"distribution": "pair"}))
    assert (plan.mode, plan.reason, plan.world_size, plan.learning_rate_scale) == (
        "pair", "distribution=pair (hyperparameter)", 4, 4.0)
    assert [(p.host, p.role, p.rank, p.shard, p.eval_shard) for p in plan.processes] == [
        ("algo-1", "chief", 0, (4, 0), (4, 0)), ("algo-1", "worker", 1, (4, 1), (4, 1)),
        ("algo-2", "worker", 2, (4, 2), (4, 2)), ("algo-2", "worker", 3, (4, 3), (4, 3))]
    assert plan.launch.command[:3] == ("mpirun", "-np", "4")
    the_job = job(hosts=2, hp={"distribution": "pair"})
    assert type(modes.runtime_for(plan, plan.chief, the_job.hyperparameters)) is PairRuntime


def test_a_registered_mode_is_chosen_where_it_fits(pair_mode):
    plan = make_plan(job(hosts=3))
    assert (plan.mode, plan.reason) == ("pair", "3 CPU hosts, the built-in DeepFM, TensorFlow 2.14: pair, two per host")
    assert make_plan(job(hosts=2)).mode == "local_sgd"  # the others still choose as before


def test_an_unregistered_name_is_refused():
    with pytest.raises(JobError, match="'distribution': 'Pair' is not accepted; accepted: one of auto, horovod"):
        make_plan(job(hp={"distribution": "Pair"}))


def test_a_mode_s_name_is_taken_in_any_case():
    assert make_plan(job(hosts=2, hp={"distribution": " Horovod"})).mode == "horovod"


def test_a_name_registers_once():
    class Again(Mode):
        name = "single"

    with pytest.raises(ValueError, match="already registered"):
        register(Again)


def test_planning_loads_no_tensorflow():
    """Every mode module is imported to plan; their runtimes import TensorFlow on first use."""
    import os
    import subprocess
    import sys

    code = ("import sys; from test_planner import job; from trainer.planner.planner import make_plan; "
            "make_plan(job(hosts=2)); print('tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=os.path.dirname(__file__))
    assert result.stdout.strip() == "False"


def test_every_launch_kind_a_mode_can_declare_has_a_launcher():
    from trainer.launch.host import LAUNCHERS
    from trainer.plan.types import LaunchKind

    assert set(LAUNCHERS) == set(LaunchKind)
