"""A job's TensorBoard folder read back with TensorBoard's own reader (the tensorboard
package, which comes with TensorFlow), for the tests."""
import os

from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
from tensorboard.util import tensor_util


def event_files(run_dir: str) -> list[str]:
    return sorted(name for name in os.listdir(run_dir) if name.startswith("events.out.tfevents."))


def runs(root: str) -> dict[str, int]:
    """Every run under `root` (a folder holding event files) and how many event files it
    holds: one writer each, so 1."""
    found = {}
    for folder, _, files in os.walk(root):
        count = len(event_files(folder))
        if count:
            found[os.path.relpath(folder, root)] = count
    return found


def series(run_dir: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a scalar written with tf.summary.scalar, in the order written."""
    events = EventAccumulator(run_dir, size_guidance={TENSORS: 0})
    events.Reload()
    if tag not in events.Tags()["tensors"]:
        return []
    return [(event.step, float(tensor_util.make_ndarray(event.tensor_proto))) for event in events.Tensors(tag)]
