"""Local SGD's averages (trainer.training.averaging) between real MPI ranks (mpirun, on plain
arrays: averaging_ranks.py): where each rank's pass ends, that every rank ends it at the same
exchange with the same model, and that the model is the mean of what the ranks trained."""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

RANKS = os.path.join(os.path.dirname(__file__), "averaging_ranks.py")

pytestmark = [pytest.mark.cores(1),  # the ranks mostly wait for each other
              pytest.mark.skipif(not shutil.which("mpirun"), reason="needs OpenMPI's mpirun")]


def run_ranks(every: int, steps: list, stop_at: list | None = None, passes: int = 1) -> list[dict]:
    output = tempfile.mkdtemp(prefix="averaging-ranks-")
    case = {"every": every, "steps": steps, "stop_at": stop_at or [None] * len(steps), "passes": passes,
            "output": output}
    command = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(len(steps)),
               "-mca", "btl_vader_single_copy_mechanism", "none", sys.executable, RANKS, json.dumps(case)]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        return [json.load(open(os.path.join(output, f"rank-{rank}.json"))) for rank in range(len(steps))]
    finally:
        shutil.rmtree(output)


def expected_steps(every: int, steps: list) -> list[int]:
    """A rank whose data ended first ends the pass at the average after its next one: the
    exchange that carries its end is waited for one period later (the averages overlap)."""
    first_end = min(steps) // every  # sync points the earliest-ending rank reached
    return [min(own, (first_end + 2) * every) for own in steps]


@pytest.mark.parametrize("every, steps", [
    (4, [20, 20]),      # the same data: both run to its end
    (4, [10, 30]),      # one ends between sync points: the other stops two averages later
    (4, [8, 30]),       # one ends on a sync point
    (4, [0, 9]),        # one has no data: the other stops at its second sync point
    (3, [7, 13, 40]),   # three ranks: the two with more data stop together
    (1, [5, 6]),        # an average every step
    (32, [5, 100]),     # a pass shorter than a period
])
def test_every_rank_ends_the_pass_at_the_same_exchange_with_the_mean_model(every, steps):
    ranks = run_ranks(every, steps)
    assert [rank["passes"][0]["trained"] for rank in ranks] == expected_steps(every, steps)
    assert {rank["passes"][0]["outcome"] for rank in ranks} == {"ended"}
    assert len({rank["exchanges"] for rank in ranks}) == 1, ranks  # the same sequence of collectives
    # An average moves no rank's share of the mean: every rank ends with the mean of the
    # ranks' own updates (each step adds rank + 1 to every element).
    mean = sum(rank["updates"] for rank in ranks) / len(ranks)
    for rank in ranks:
        assert all(math.isclose(value, mean, rel_tol=1e-6) for values in rank["values"] for value in values), rank


def test_a_stop_asked_of_one_rank_stops_every_rank_at_the_same_step():
    # Asked at step 5: it says so at its sync point at step 8; that exchange is read at step 12.
    ranks = run_ranks(4, [40, 40], stop_at=[None, 5])
    assert [rank["passes"][0] for rank in ranks] == [{"trained": 12, "outcome": "stopped"}] * 2
    assert ranks[0]["values"] == ranks[1]["values"]


def test_the_next_pass_starts_afresh():
    ranks = run_ranks(4, [10, 30], passes=2)
    assert [[p["trained"] for p in rank["passes"]] for rank in ranks] == [[10, 10], [16, 16]]
    assert ranks[0]["values"] == ranks[1]["values"]
