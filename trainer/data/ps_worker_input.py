"""A parameter-server worker's own input, read on its own host.

TensorFlow's coordinator traces one dataset function and runs that same graph on every
worker task (its input context says pipeline 0 on all of them), so nothing in the graph
itself can tell one worker from another; and a worker's Pipe-mode FIFOs exist only on its
host, where only Python can read them outside the image (TensorFlow's file readers seek,
which a FIFO refuses; AWS's PipeModeDataset is native but has no build for this Python).

So each worker task provides two Python functions under fixed names, and the graphs the
coordinator sends call them by name with TensorFlow's PyFunc op, in the worker's process:
the worker's index (its shard of a shared channel), and the next chunk of records from one
of its host's FIFOs. TensorFlow has no public way to give a py_func a name another process
can call, so `provide` writes the worker's registry directly (checked by the tests).
"""
from __future__ import annotations

import logging
import threading

from trainer.data.fifo import record_chunks
from trainer.errors import JobError

log = logging.getLogger(__name__)

WORKER_INDEX = "trainer.ps_worker.index"
FIFO_CHUNK = "trainer.ps_worker.fifo_chunk"
_PROVIDED: dict = {}  # the registry keeps weak references: the functions live here


class WorkerFifos:
    """The FIFOs of this worker's host, read a chunk of records at a time."""

    def __init__(self, job):
        self.job = job
        self.streams: dict[tuple[str, int], object] = {}
        self.lock = threading.Lock()

    def next_chunk(self, channel: bytes, pass_index, data_format: bytes):
        """The next records of the channel's FIFO of this pass; none at its end."""
        import numpy as np

        key = (channel.decode(), int(pass_index))
        with self.lock:
            stream = self.streams.get(key)
            if stream is None:
                stream = self.streams[key] = self._open(*key, data_format.decode())
        try:
            chunk = next(stream, None)
        except JobError as err:
            raise JobError(f"{self.job.current_host}: channel '{key[0]}': {err}") from err
        if chunk is None:
            with self.lock:
                self.streams.pop(key, None)
            return np.array([], dtype=object)
        return np.array(chunk, dtype=object)

    def path_of(self, name: str, pass_index: int) -> str:
        """The FIFO of a channel's pass on this host."""
        channel = self.job.channels.get(name)
        if channel is None or not channel.is_pipe:
            raise JobError(f"{self.job.current_host}: channel '{name}' is not a Pipe-mode channel on this host")
        return channel.fifo_path(pass_index)

    def _open(self, name: str, pass_index: int, data_format: str):
        return record_chunks(self.path_of(name, pass_index), data_format, self.job.hyperparameters.pipe_wait_sec,
                             recordio=self.job.channels[name].is_recordio_wrapped)


def provide(job, index: int) -> None:
    """In a worker task, before it serves: make its index and its FIFOs callable by name."""
    import numpy as np
    from tensorflow.python.ops import script_ops  # the registry PyFunc ops look names up in

    from trainer.data import parquet

    fifos = WorkerFifos(job)
    _PROVIDED.update({WORKER_INDEX: lambda: np.int64(index), FIFO_CHUNK: fifos.next_chunk})
    for name, function in _PROVIDED.items():
        script_ops._py_funcs._funcs[name] = function
    # Parquet: its reader, and this host's FIFO of a channel's pass (its own path, on this host).
    parquet.register_readers()
    parquet.FIFO_OF_CHANNEL["path"] = lambda name, pass_index: fifos.path_of(name, pass_index)


def worker_index():
    """The index of the worker task this graph runs on (a scalar int64 tensor)."""
    import tensorflow as tf

    index = tf.raw_ops.PyFunc(input=[], token=WORKER_INDEX, Tout=[tf.int64])[0]
    return tf.ensure_shape(index, [])


def host_fifo_blocks(channel: str, pass_index: int, data_format: str):
    """The records of `channel`'s FIFO of this pass on the worker's host, in blocks."""
    import tensorflow as tf

    arguments = [tf.constant(channel), tf.constant(pass_index, tf.int64), tf.constant(data_format)]

    def next_chunk(_):
        chunk = tf.raw_ops.PyFunc(input=arguments, token=FIFO_CHUNK, Tout=[tf.string])[0]
        return tf.ensure_shape(chunk, [None])

    return tf.data.Dataset.from_tensors(0).repeat().map(next_chunk).take_while(lambda chunk: tf.size(chunk) > 0)
