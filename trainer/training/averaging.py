"""Local SGD's averages: ranks that train on their own batches and, every K steps, average
their models over MPI, each average sent while the next K steps train.

At a sync point a rank reads its variables S, starts their all-reduce (a sum) without
waiting, and trains on; at the next sync point it takes the mean A and keeps what it trained
meanwhile: W <- W + (A - S). The wait for the slowest rank and the bytes on the wire then
overlap the next period's steps instead of stopping them. This keeps the mean of the ranks'
models what plain local SGD makes it (an average moves no rank's share of it), one period
late. A background thread drives the non-blocking all-reduces, sleeping between polls: a
blocking MPI wait spins on the CPU the steps need.

Every average also sums two counts, the ranks whose data has ended and the ranks asked to
stop (SIGTERM), so the ranks agree on the pass's end in the same exchange that averages
them. A rank whose data ended sends its count at once and waits; the others learn it at
their next sync point, where the pass ends on every rank, and one more average, waited for,
leaves every rank the same model (the one evaluated, saved and exported). Until then the
others train on their own data, so every record is still trained at most once a pass.
Collectives are matched by their order on the communicator: every rank runs the same
sequence (an exchange at each of its sync points, then the one that counts an end, then
the final one).

On one CPU every pass over the embedding table costs about as much as a few training steps,
so each average makes as few as it can: a variable is sent as it was read (TensorFlow's
read copies it once; no flat buffer, which would be a second copy), its sum is received
into memory TensorFlow can take without a copy (zero_copy_tensor), and the mean is put in
place by one assign_add.

No TensorFlow here but in zero_copy_tensor: the variables are anything with numpy(),
assign() and assign_add() (a tf.Variable), so the protocol also runs, in tests, on plain
arrays under a real mpirun.
"""
from __future__ import annotations

import threading
import time

import numpy as np

POLL_SEC = 0.0005  # between polls of the in-flight all-reduces (each poll moves their bytes on)
ALIGNMENT = 256  # bytes: what TensorFlow needs of memory it takes over (EIGEN_MAX_ALIGN_BYTES, 64 or less)
ENDED, STOPPING = 0, 1  # the counts' places


class SyncOutcome:
    GO_ON, ENDED, STOPPED = "go on", "ended", "stopped"


class ModelAverages:
    """The averages of `variables` over `comm` (an mpi4py communicator), for one rank.
    `as_tensor`: an array as what the variables' assign_add takes without a copy
    (zero_copy_tensor for TensorFlow's); by default the array itself."""

    def __init__(self, comm, variables: list, as_tensor=None):
        from mpi4py import MPI

        self.comm, self.mpi, self.size = comm, MPI, comm.Get_size()
        self.variables = list(variables)
        self.as_tensor = as_tensor or (lambda array: array)
        self.received = [aligned_empty(np.shape(variable.numpy())) for variable in self.variables]
        self.counts, self.summed_counts = np.zeros(2, np.float32), np.zeros(2, np.float32)
        self.sent = []  # this rank's variables as the exchange in flight sent them
        self.in_flight = None  # the thread driving that exchange's all-reduces
        self.finished = False  # the pass has ended on every rank
        self.exchanges = 0  # started, over the run

    def start_pass(self) -> None:
        self.finished = False

    def at_sync_point(self, stopping: bool) -> str:
        """This rank trained K steps since its last sync point and still has data: the
        outcome for the pass (GO_ON: train on; else it has ended on every rank)."""
        outcome = self._settle()
        if outcome == SyncOutcome.GO_ON:
            self._start(ended=False, stopping=stopping)
        return outcome

    def at_end_of_data(self, stopping: bool) -> str:
        """This rank's pass ran out of data (or had none): ends the pass on every rank, all of
        them left the same model; the outcome (ENDED, or STOPPED where a rank asked to stop).
        Nothing more once the pass has ended."""
        if self.finished:
            return SyncOutcome.ENDED
        outcome = self._settle()
        if outcome != SyncOutcome.GO_ON:
            return outcome
        self._start(ended=True, stopping=stopping)
        outcome = self._complete(kept_steps=False)
        self._final_average()
        return outcome

    def _settle(self) -> str:
        """Puts the exchange in flight (if any) in place; where it told the ranks the pass has
        ended, ends it with the final average. The outcome it told."""
        if not self.in_flight:
            return SyncOutcome.GO_ON
        outcome = self._complete(kept_steps=True)
        if outcome != SyncOutcome.GO_ON:
            self._final_average()
        return outcome

    def _final_average(self) -> None:
        """Every rank is here (one exchange told them all that the pass ended): the mean, waited for."""
        self._start(ended=True, stopping=False)
        self._complete(kept_steps=False)
        self.finished = True

    def _start(self, ended: bool, stopping: bool) -> None:
        self.sent = [_stable_value(variable) for variable in self.variables]
        self.counts[ENDED], self.counts[STOPPING] = float(ended), float(stopping)
        requests = [self.comm.Iallreduce(sent, received, op=self.mpi.SUM)
                    for sent, received in zip(self.sent, self.received)]
        requests.append(self.comm.Iallreduce(self.counts, self.summed_counts, op=self.mpi.SUM))
        self.in_flight = threading.Thread(target=_drive, args=(self.mpi, requests), name="local-sgd-average",
                                          daemon=True)
        self.in_flight.start()
        self.exchanges += 1

    def _complete(self, kept_steps: bool) -> str:
        """Waits for the exchange in flight and puts its mean in place: with `kept_steps`, on
        top of what this rank trained since it sent (W + A - S); else as it is (it trained nothing)."""
        self.in_flight.join()
        self.in_flight = None
        for variable, sent, mean in zip(self.variables, self.sent, self.received):
            np.multiply(mean, 1.0 / self.size, out=mean)
            if kept_steps:
                variable.assign_add(self.as_tensor(np.subtract(mean, sent, out=mean)))
            else:  # copied: a variable assigned a tensor may keep its memory, the next exchange's
                variable.assign(mean)
        self.sent = []
        if self.summed_counts[STOPPING] > 0:
            return SyncOutcome.STOPPED
        return SyncOutcome.ENDED if self.summed_counts[ENDED] > 0 else SyncOutcome.GO_ON


def aligned_empty(shape) -> np.ndarray:
    """An uninitialised float32 array whose memory starts on an ALIGNMENT boundary."""
    count = int(np.prod(shape))
    raw = np.empty(count * 4 + ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset:offset + count * 4].view(np.float32).reshape(shape)


def zero_copy_tensor(array: np.ndarray):
    """A TensorFlow tensor on `array`'s memory (aligned_empty's), not a copy of it, for as
    long as the tensor is used."""
    import tensorflow as tf

    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def _stable_value(variable) -> np.ndarray:
    """A variable's value, as an array that stays as it is while the variable changes (a
    TensorFlow variable's read: its next update copies the buffer a read shares)."""
    value = variable.read_value() if hasattr(variable, "read_value") else variable.numpy()
    return np.asarray(value)


def _drive(mpi, requests: list) -> None:
    """Polls the all-reduces to their end: each test moves their bytes on, a sleep between yields the CPU."""
    while not mpi.Request.Testall(requests):
        time.sleep(POLL_SEC)


def sync_callback(averages: ModelAverages, every: int, stop_request):
    """The Keras callback that runs `averages` in `model.fit`: a sync point at the end of
    the first call at least `every` steps after the last (the plan makes a call's steps divide
    `every`), the end of data at the end of fit (end_of_data, also for a fit that ended
    before its callbacks' end). The pass starts with averages.start_pass(). A stop (SIGTERM) is told at the next sync point; the pass
    then ends on every rank at the same exchange, marked as interrupted."""
    import tensorflow as tf

    class SyncPoints(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.last = int(self.model.optimizer.iterations.numpy())

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            if step - self.last < every:
                return
            self.last = step
            self._ended(averages.at_sync_point(stopping=stop_request.requested))

        def on_train_end(self, logs=None):
            self.end_of_data()

        def end_of_data(self):
            self._ended(averages.at_end_of_data(stopping=stop_request.requested))

        def _ended(self, outcome: str) -> None:
            if outcome != SyncOutcome.GO_ON and self.model is not None:
                self.model.stop_training = True
            if outcome == SyncOutcome.STOPPED:
                stop_request.interrupted_pass = True

    return SyncPoints()
