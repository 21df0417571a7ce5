"""Speed switches a job turns on by hyperparameter: mixed precision (P20), XLA (P21) and a
profiler window. Keras and TensorFlow do the work; this module maps the hyperparameters
onto them (the planner rejects the combinations that cannot work)."""
from __future__ import annotations

import logging

from trainer.cpu import settings as cpu
from trainer.errors import JobError

log = logging.getLogger(__name__)


def apply_precision(hp, on_cpu: bool) -> None:
    """Set Keras' global dtype policy before the model is built (its layers read it then).
    Under mixed_float16, Keras' compile wraps the optimizer in a LossScaleOptimizer (float16
    gradients underflow without it); bfloat16 has float32's range and needs none."""
    import tensorflow as tf

    if hp.mixed_precision == "mixed_bfloat16" and on_cpu and not cpu.bfloat16_supported():
        raise JobError("hyperparameter 'mixed_precision': mixed_bfloat16 needs a CPU with AVX-512 (oneDNN has "
                       "no bfloat16 kernels for this one, which has AVX2 at most); use none or mixed_float16, or "
                       "an instance type with AVX-512 (e.g. ml.c5, ml.m5, ml.c6i)")
    if hp.mixed_precision != "none":
        tf.keras.mixed_precision.set_global_policy(hp.mixed_precision)
        log.info("mixed precision: %s (variables float32, output float32%s)", hp.mixed_precision,
                 ", dynamic loss scaling" if hp.mixed_precision == "mixed_float16" else "")


def compile_options(hp) -> dict:
    return {"jit_compile": True} if hp.jit_compile else {}


def profiler_callbacks(hp, log_dir: str) -> list:
    """A TensorBoard callback tracing steps a..b into `log_dir` (TensorBoard's Profile tab)."""
    if hp.profile_steps is None:
        return []
    import tensorflow as tf

    log.info("profiling steps %d..%d into %s", *hp.profile_steps, log_dir)
    return [tf.keras.callbacks.TensorBoard(log_dir=log_dir, profile_batch=tuple(hp.profile_steps),
                                           histogram_freq=0, write_graph=False, update_freq="epoch")]
