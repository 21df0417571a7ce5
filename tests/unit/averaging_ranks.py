"""One rank of local SGD's averages (trainer.training.averaging) under mpirun, on plain
arrays: test_averaging.py starts it. Argument: JSON {"every": K, "steps": [a rank's steps of
data, ...], "stop_at": [a rank's step at which it is asked to stop, or null, ...],
"passes": P, "output": a folder}. Each step adds (rank + 1) to every element of the rank's variables, as a
training step changes them; a sync point every K steps, the end of data after the rank's
steps. Writes rank-N.json to the folder: per pass the steps this rank trained and the outcome, then its
variables, the exchanges and what the ranks' own updates were."""
import json
import os
import sys

import numpy as np
from mpi4py import MPI

from trainer.training.averaging import ModelAverages, SyncOutcome


class Variable:
    """What ModelAverages asks of a variable (a tf.Variable's numpy, assign, assign_add)."""

    def __init__(self, shape):
        self.value = np.zeros(shape, np.float32)

    def numpy(self):
        return self.value.copy()

    def assign(self, array):
        self.value = np.array(array, np.float32)

    def assign_add(self, array):
        self.value = self.value + np.asarray(array)


def main() -> None:
    case = json.loads(sys.argv[1])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    variables = [Variable((5, 3)), Variable((4,))]
    averages = ModelAverages(comm, variables)
    passes, updates, stop_at = [], 0.0, case["stop_at"][rank]
    for _ in range(case["passes"]):
        averages.start_pass()
        trained, outcome = 0, SyncOutcome.GO_ON
        while outcome == SyncOutcome.GO_ON and trained < case["steps"][rank]:
            for variable in variables:
                variable.assign_add(np.full(variable.value.shape, rank + 1.0, np.float32))
            trained += 1
            updates += rank + 1.0
            stopping = stop_at is not None and trained >= stop_at
            if trained % case["every"] == 0:
                outcome = averages.at_sync_point(stopping=stopping)
        if outcome == SyncOutcome.GO_ON:
            outcome = averages.at_end_of_data(stopping=stop_at is not None and trained >= stop_at)
        passes.append({"trained": trained, "outcome": outcome})
    with open(os.path.join(case["output"], f"rank-{rank}.json"), "w") as out:
        json.dump({"rank": rank, "passes": passes, "values": [v.value.ravel().tolist() for v in variables],
                   "exchanges": averages.exchanges, "updates": updates}, out)


if __name__ == "__main__":
    main()
