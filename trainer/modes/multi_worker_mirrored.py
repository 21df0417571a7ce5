"""Multi-worker mirrored: one process per host, variables mirrored, gradients all-reduced
across hosts by tf.distribute.MultiWorkerMirroredStrategy (TF_CONFIG from the plan, with
SageMaker's master named chief, P15).

Each worker reads the shard the plan gives it (TensorFlow's own auto-sharding is not
used: the plan already decided, P3) in batches per replica. Every worker runs the same
number of steps (P5): the smallest shard's batch count, found by counting each worker's
batches once and all-reducing the counts. (Horovod's per-step agreement cannot be used
here: the strategy does not allow its gradient all-reduce inside a conditional.) Counting
needs File mode; the planner refuses Pipe mode for this strategy. A stop (SIGTERM) is voted
on after every step, so that all workers end the pass at the same step (equal_steps).
"""
from __future__ import annotations

import json
import os

import numpy as np

from trainer.contract.addresses import with_addresses
from trainer.modes.base import Deferred, Mode, Runtime, register, tf
from trainer.plan import sdk
from trainer.plan.clusters import aws_mwms_tf_config, mwms_cluster
from trainer.plan.scaling import GRADIENTS

equal_steps = Deferred("trainer.training.equal_steps")


class MultiWorkerMirroredRuntime(Runtime):
    _common_steps = None
    stop_by_vote = True  # equal_steps.install_stop_vote
    export_is_collective = True  # saving reads the mirrored variables through a collective

    def start(self) -> None:
        os.environ["TF_CONFIG"] = json.dumps(with_addresses(self.process.tf_config))
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def scope(self):
        return self.strategy.scope()

    def steps_per_epoch(self, dataset, skipped: int = 0) -> int:
        if self._common_steps is None:
            # This worker's batches of a whole epoch (the input is the same every epoch).
            own = skipped + sum(1 for _ in dataset)
            counts = np.zeros(self.plan.world_size, np.int64)
            counts[self.process.rank] = own
            (everyone,) = self.all_reduce_sum([counts])
            self._common_steps = int(everyone.min())
        return self._common_steps

    def prepare(self, model, optimizer) -> None:
        equal_steps.install_stop_vote(
            model, lambda value: tf.distribute.get_replica_context().all_reduce("SUM", value),
            self.stop_request.flag)

    def sync_initial_state(self, model, optimizer) -> None:
        # Only the chief restored a checkpoint (the others cannot see its disk): everyone
        # takes the chief's values, summed with zeros from the rest.
        variables = model.variables + optimizer.variables()
        own = [v.numpy() if self.process.writes_outputs else np.zeros(v.shape, v.dtype.as_numpy_dtype)
               for v in variables]
        for variable, value in zip(variables, self.all_reduce_sum(own)):
            variable.assign(value)

    def training_dataset(self, dataset):
        return self.strategy.distribute_datasets_from_function(lambda context: dataset)

    def all_reduce_sum(self, values: list) -> list:
        results = []
        for value in values:
            per_replica = self.strategy.run(lambda v=value: tf.identity(tf.constant(v)))
            results.append(np.asarray(self.strategy.reduce("SUM", per_replica, axis=None)))
        return results

    def broadcast_from_chief(self, value):
        (total,) = self.all_reduce_sum([np.int64(value if self.process.writes_outputs else 0)])
        return int(total)


@register
class MultiWorkerMirrored(Mode):
    name = "multi_worker_mirrored"
    runtime = MultiWorkerMirroredRuntime
    speed_rank = 40  # Horovod's steps on CPU hosts are faster (docs/modes-measured.md, "Scaling out, per core")
    sdk_key = sdk.MWMS
    min_hosts = 2
    exchange = GRADIENTS
    sharded_evaluation = True
    # Keras 3's fit trains under this strategy with the image's fix of keras-team/keras#20585
    # (trainer.script.keras_multi_worker_fit): a script's tf.keras stays Keras 3, as in AWS's image.
    pipe_mode_refusal = ("multi_worker_mirrored needs File mode: its workers count their batches before "
                         "training to run equal steps; for Pipe mode use horovod")

    def describe(self, job) -> str:
        return "one worker per host, gradients all-reduced across hosts by TensorFlow"

    def tf_config(self, layout, host_index: int, local_rank: int) -> dict:
        if layout.job.runs_script:
            return aws_mwms_tf_config(layout.hosts, layout.hosts[host_index])
        rank = layout.rank(host_index, local_rank)
        task = {"type": "chief", "index": 0} if rank == 0 else {"type": "worker", "index": rank - 1}
        return {"cluster": mwms_cluster(layout.hosts), "task": task}
