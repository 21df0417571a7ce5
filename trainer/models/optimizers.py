"""Optimizers that update embedding rows sparsely.

Keras 2.14's new optimizers apply Adam and FTRL densely to an IndexedSlices gradient
(every step touches the whole table, so the step cost grows with feature_size). The
`tf.keras.optimizers.legacy` classes call TensorFlow's fused sparse kernels
(ResourceSparseApplyAdagradV2, ResourceSparseApplyFtrl, ...) and are what Horovod's
DistributedOptimizer wraps for TF >= 2.11. Legacy Adam is still dense on sparse
gradients, hence `LazyAdam`.
"""
from __future__ import annotations

import tensorflow as tf

Legacy = tf.keras.optimizers.legacy


class LazyAdam(Legacy.Adam):
    """Adam whose moment and weight updates touch only the rows in the gradient.

    Same semantics as TensorFlow Addons' LazyAdam; written here because Addons is
    end-of-life and its optimizers do not follow TF 2.14's optimizer classes. Dense
    gradients (MLP weights) get plain Adam; repeated ids in a batch are summed first by
    the base class (_resource_apply_sparse_duplicate_indices).

    An embedding table (rank 2, at least `fused_rows` rows) keeps both moments in one slot,
    `mv` = [m | v] side by side: a step gathers and scatters each of its rows' moments once
    instead of twice, and the two halves share a cache line's neighbourhood.
    """

    def __init__(self, *args, fused_rows: int = 65536, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused_rows = fused_rows

    def _fused(self, var) -> bool:
        return var.shape.rank == 2 and var.shape[0] is not None and var.shape[0] >= self.fused_rows

    def _create_slots(self, var_list):
        tables = [var for var in var_list if self._fused(var)]
        for var in tables:
            self.add_slot(var, "mv", shape=[var.shape[0], 2 * var.shape[1]])
        super()._create_slots([var for var in var_list if not self._fused(var)])

    def _coefficients(self, var, apply_state):
        var_device, var_dtype = var.device, var.dtype.base_dtype
        coefficients = (apply_state or {}).get((var_device, var_dtype)) or self._fallback_apply_state(
            var_device, var_dtype)
        local_step = tf.cast(self.iterations + 1, var_dtype)
        lr = coefficients["lr_t"] * tf.sqrt(1 - tf.pow(coefficients["beta_2_t"], local_step)) / (
            1 - tf.pow(coefficients["beta_1_t"], local_step))
        return coefficients, lr

    def _moments(self, coefficients, lr, m, v, grad):
        beta_1, beta_2 = coefficients["beta_1_t"], coefficients["beta_2_t"]
        m = beta_1 * m + (1 - beta_1) * grad
        v = beta_2 * v + (1 - beta_2) * tf.square(grad)
        return m, v, lr * m / (tf.sqrt(v) + coefficients["epsilon"])

    def _resource_apply_dense(self, grad, var, apply_state=None):
        if not self._fused(var):
            return super()._resource_apply_dense(grad, var, apply_state)
        coefficients, lr = self._coefficients(var, apply_state)
        mv = self.get_slot(var, "mv")
        m, v = tf.split(mv, 2, axis=1)
        m, v, update = self._moments(coefficients, lr, m, v, grad)
        return tf.group(mv.assign(tf.concat([m, v], axis=1)), var.assign_sub(update))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        coefficients, lr = self._coefficients(var, apply_state)
        if self._fused(var):
            mv = self.get_slot(var, "mv")
            m_rows, v_rows = tf.split(tf.gather(mv, indices), 2, axis=1)
            m_rows, v_rows, update = self._moments(coefficients, lr, m_rows, v_rows, grad)
            # New rows written whole: TensorFlow's scatter that assigns copies rows, where its
            # scatter that subtracts evaluates an expression per row, several times slower.
            return tf.group(mv.scatter_update(tf.IndexedSlices(tf.concat([m_rows, v_rows], axis=1), indices)),
                            var.scatter_update(tf.IndexedSlices(tf.gather(var, indices) - update, indices)))
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        m_rows, v_rows, update = self._moments(coefficients, lr, tf.gather(m, indices), tf.gather(v, indices), grad)
        return tf.group(
            m.scatter_update(tf.IndexedSlices(m_rows, indices)),
            v.scatter_update(tf.IndexedSlices(v_rows, indices)),
            var.scatter_sub(tf.IndexedSlices(update, indices)),
        )

    def get_config(self):
        return {**super().get_config(), "fused_rows": self.fused_rows}


# Registered: Horovod's DistributedOptimizer rebuilds the optimizer from its config.
@tf.keras.utils.register_keras_serializable(package="trainer")
class WarmupSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """A linear ramp from `start` to `peak` over `steps` steps, then `peak` (P7: a rate
    scaled by the number of replicas is reached gradually)."""

    def __init__(self, start: float, peak: float, steps: int):
        self.start, self.peak, self.steps = start, peak, steps

    def __call__(self, step):
        fraction = tf.minimum(1.0, tf.cast(step, tf.float32) / float(max(1, self.steps)))
        return self.start + (self.peak - self.start) * fraction

    def get_config(self):
        return {"start": self.start, "peak": self.peak, "steps": self.steps}


def learning_rate_for(plan):
    """The plan's (scaled) learning rate, ramped up over its warm-up steps."""
    if plan.warmup_steps and plan.learning_rate_scale > 1:
        return WarmupSchedule(plan.learning_rate / plan.learning_rate_scale, plan.learning_rate,
                              plan.warmup_steps)
    return plan.learning_rate


def build_optimizer_state(optimizer, variables) -> None:
    """Create the optimizer's slots now, so that restoring, broadcasting and conditional
    train steps find them (they cannot be created inside a conditional branch)."""
    if isinstance(optimizer, Legacy.Optimizer):
        optimizer._create_all_weights(variables)  # what legacy apply_gradients calls first
    else:
        optimizer.build(variables)


def make_optimizer(name: str, learning_rate):
    """The optimizer named by the `optimizer` hyperparameter (already validated)."""
    factories = {
        "adam": lambda: LazyAdam(learning_rate=learning_rate),
        "adagrad": lambda: Legacy.Adagrad(learning_rate=learning_rate, initial_accumulator_value=0.1),
        "ftrl": lambda: Legacy.Ftrl(learning_rate=learning_rate),
        "sgd": lambda: Legacy.SGD(learning_rate=learning_rate),
        "momentum": lambda: Legacy.SGD(learning_rate=learning_rate, momentum=0.95),
    }
    return factories[name]()
