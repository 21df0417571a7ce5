"""Keras 3's `model.fit` under MultiWorkerMirroredStrategy, on the TensorFlow backend.

Keras 3 (up to at least 3.15) cannot `fit` under a multi-worker strategy: keras-team/keras#20585,
open since TensorFlow 2.16 made Keras 3 tf.keras. Two places in its TensorFlow trainer
(keras/src/backend/tensorflow/trainer.py) fail:

- `_maybe_symbolic_build` builds the model from the first batch, which it first reduces
  across replicas with `strategy.reduce("MEAN", <(x, y) of PerReplica>)`; the multi-worker
  strategy's cross-device reduce takes one value, not a structure, and raises
  "Attempt to convert a value (PerReplica:{...}) ... to a Tensor". Only the batch's shapes
  matter there: the first local replica's batch has them, with no collective at all.
- `reduce_per_replica` averages the step's logs (scalars) across workers with
  `strategy.reduce("MEAN", v, axis=0)`: "Invalid reduction dimension 0 for input with 0
  dimensions". The mean across replicas is `axis=None`, as Keras does for one worker's
  replicas.

With both fixed, the gradients were already right (the loss scaled by the replicas in sync,
the gradients summed across them): a fit on two workers ends with the weights of one
process's fit on the global batch (tests/integration/test_line_2_21.py). The fix changes
nothing outside a multi-worker strategy. It is applied in every Python process of the image
when Keras 3's trainer is imported (an import hook that the image's site-packages installs:
container/install-trainer.sh, and the 2.21 line's environment: build.sh), so a script
needs no change, whoever starts it. Where Keras no longer has what the fix replaces, it
stands aside.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

KERAS_TRAINER = "keras.src.backend.tensorflow.trainer"
UPSTREAM_ISSUE = "keras-team/keras#20585"


def install() -> None:
    """Fix Keras 3's trainer when (and if) it is imported; cheap: imports nothing else."""
    if KERAS_TRAINER in sys.modules:
        fix(sys.modules[KERAS_TRAINER])
    elif not any(isinstance(finder, _FixAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FixAfterImport())


class _FixAfterImport(importlib.abc.MetaPathFinder):
    """Finds Keras' TensorFlow trainer as Python would, and fixes it once it has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != KERAS_TRAINER:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            fix(module)

        spec.loader.exec_module = exec_module
        return spec


def fix(trainer_module) -> bool:
    """Replace the two multi-worker paths of Keras 3's TensorFlow trainer (this module's
    docstring); False where this Keras has not the functions the fix expects."""
    trainer_class = getattr(trainer_module, "TensorFlowTrainer", None)
    reduce_per_replica = getattr(trainer_module, "reduce_per_replica", None)
    is_multi_worker = getattr(trainer_module, "_collective_all_reduce_multi_worker", None)
    symbolic_build = getattr(trainer_class, "_maybe_symbolic_build", None)
    if None in (trainer_class, reduce_per_replica, is_multi_worker, symbolic_build):
        return False
    if getattr(symbolic_build, "fixes", None) == UPSTREAM_ISSUE:
        return True
    import tensorflow as tf
    from keras.src import tree

    def first_local_replica(strategy, value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(value)[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if strategy is None or iterator is None or not is_multi_worker(strategy):
            return symbolic_build(self, iterator=iterator, data_batch=data_batch)
        for _, _, batches in iterator:
            data_batch = tree.map_structure(lambda value: first_local_replica(strategy, value), next(batches))
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def reduce_across_workers(values, strategy, reduction):
        if reduction in ("auto", "mean") and is_multi_worker(strategy):
            return tree.map_structure(lambda value: strategy.reduce("MEAN", value, axis=None), values)
        return reduce_per_replica(values, strategy, reduction)

    _maybe_symbolic_build.fixes = UPSTREAM_ISSUE
    trainer_class._maybe_symbolic_build = _maybe_symbolic_build
    trainer_module.reduce_per_replica = reduce_across_workers
    return True
