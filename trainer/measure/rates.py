"""Measuring a training setting's speed: samples per second of Keras fit, and a measuring
process's JSON result (`trainer tune` and the benchmarks)."""
from __future__ import annotations

import time


class StepClock:
    """Times training steps as a job's samples/sec does: in each epoch, from the end of its
    first call to the end of its last, steps counted as the optimizer's updates (Keras calls
    back once per steps_per_execution steps). fit's setup, tracing and the iterator's start
    are left out, being once an epoch, not once a step. Needs only TensorFlow: the DeepCTR
    environment uses it too."""

    def __init__(self, untimed_steps: int = 0):
        """`untimed_steps`: of each fit, the steps before the first call timed from."""
        import tensorflow as tf

        clock = self
        self.steps, self.seconds = 0, 0.0

        class Callback(tf.keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.start = int(self.model.optimizer.iterations.numpy())

            def on_epoch_begin(self, epoch, logs=None):
                self.first = self.last = None

            def on_train_batch_end(self, batch, logs=None):
                mark = (time.perf_counter(), int(self.model.optimizer.iterations.numpy()))
                if mark[1] - self.start < untimed_steps:
                    return
                if self.first is None:
                    self.first = mark
                else:
                    self.last = mark

            def on_epoch_end(self, epoch, logs=None):
                if self.last is not None:
                    clock.steps += self.last[1] - self.first[1]
                    clock.seconds += self.last[0] - self.first[0]

        self.callback = Callback()

    def samples_per_sec(self, batch_size: int) -> float:
        return self.steps * batch_size / self.seconds if self.seconds else 0.0  # 0: one call, none timed


def fit_rate(model, dataset, steps: int, batch_size: int, untimed_steps: int = 0, callbacks: tuple = ()) -> float:
    """Samples per second of Keras fit on `dataset` (repeated) over at least `steps` timed
    steps, after `untimed_steps` untimed ones to the end of the call they end in (none: the
    first call), in the same fit: on the same iterator, so what the untimed steps filled (a
    cache) serves the timed ones. `callbacks` (a mode's) run before the clock's, so what they
    do at a call's end is timed."""
    clock = StepClock(untimed_steps)
    # Keras keeps compile's steps_per_execution in this variable (no public accessor).
    first_call = int(model._steps_per_execution.numpy())
    model.fit(dataset, steps_per_epoch=untimed_steps + steps + first_call, epochs=1, verbose=0,
              callbacks=[*callbacks, clock.callback])
    return clock.samples_per_sec(batch_size)


def later_epochs_rate(model, dataset_of, training, steps: int, batch_size: int, callbacks: tuple = ()) -> float:
    """Samples per second of fit over `steps` steps as a job's epochs after the first run
    them (training.later_epochs: a sample of `steps` batches of the job's own input, cached,
    shuffled and batched every pass as an epoch is), timed after one untimed pass that parses
    the sample into its cache and traces the step. `dataset_of`: the dataset the mode trains
    on, of the input's (a runtime's training_dataset); `callbacks`: the mode's (fit_rate)."""
    return fit_rate(model, dataset_of(training.later_epochs(steps)), steps, batch_size, untimed_steps=steps,
                    callbacks=callbacks)


def jobs_model_and_input(batch_size: int | None = None, one_host: bool = False):
    """The job in $SAGEMAKER_BASE_DIR as `train` builds it on this host, for a measuring
    process: (its plan, its hooks, its model, not compiled, and this host's first process's
    training input: an EpochInput of `batch_size` batches, the job's batch size if None).
    `one_host`: the job as this host alone would train it (alone_on_this_host)."""
    plan, hooks, training = jobs_training_input(batch_size, one_host)
    return plan, hooks, hooks.model_fn(), training


def alone_on_this_host(job):
    """`job` on this host alone, as the planner runs it there (distribution auto, one process
    with the host's CPUs, no other group's hosts feeding it): what `trainer plan --probe`
    compares more hosts with. Its plan may differ from the job's in more than the hosts: a
    strategy's replicas run one step a call where one process runs several
    (trainer.planner.planner.steps_per_execution)."""
    import dataclasses

    hp = job.hyperparameters.with_value("distribution", "auto").with_value("processes_per_host", 1)
    return dataclasses.replace(job, hosts=(job.current_host,), instance_groups=(), hyperparameters=hp)


def jobs_training_input(batch_size: int | None = None, one_host: bool = False):
    """(The plan of the job in $SAGEMAKER_BASE_DIR, its hooks, and this host's first process's
    training input: an EpochInput, whose dataset(0) is one pass of `batch_size` batches.)"""
    from trainer.contract.job import base_dir_from_env, read_job
    from trainer.models import hooks as user_hooks
    from trainer.models.optimizers import learning_rate_for
    from trainer.planner.planner import make_plan
    from trainer.training.inputs import Inputs

    job = read_job(base_dir_from_env())
    if one_host:
        job = alone_on_this_host(job)
    plan = make_plan(job)
    hooks = user_hooks.load_hooks(job, learning_rate_for(plan))
    process = plan.on_host(job.current_host)[0]
    return plan, hooks, Inputs.training(job, plan, process, hooks, batch_size or job.hyperparameters.batch_size)


def json_result(command: list, env: dict, timeout: float, what: str) -> dict:
    """Run a measuring process that prints its result as a JSON line; that result."""
    import json
    import subprocess

    from trainer.errors import JobError

    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise JobError(f"{what} did not end within {timeout:g} s") from err
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise JobError(f"{what} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])
