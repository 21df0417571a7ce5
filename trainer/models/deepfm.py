"""DeepFM (Guo et al., 2017) in Keras, on the DeepFM sample's feature layout.

Inputs: `ids` int64[batch, field_size] and `values` float32[batch, field_size], one id per
field. One embedding table serves all fields; its first column is the FM first-order
weight and the other `embedding_size` columns the factor vector, so one gather per batch
feeds both the FM and the MLP. The table's gradient stays an IndexedSlices (only the
rows the batch uses) so sparse optimizers update those rows only.
"""
from __future__ import annotations

import tensorflow as tf


class FeatureEmbedding(tf.keras.layers.Layer):
    """One table for every field: rows of [first-order weight, factor vector].

    L2 applies to the rows the batch looks up (averaged over the batch), not to the whole
    table: a table-wide penalty would make every step's gradient dense and its cost grow
    with feature_size.
    """

    def __init__(self, feature_size: int, embedding_size: int, l2_reg: float, **kwargs):
        super().__init__(**kwargs)
        self.feature_size = feature_size
        self.embedding_size = embedding_size
        self.l2_reg = l2_reg

    def build(self, input_shape):
        # Under a mixed-precision policy the table stays float32 and is read as such (no
        # autocast, which would cast the whole table every step); the rows looked up are
        # cast afterwards, as Keras' own Embedding does.
        self.table = self.add_weight(
            name="table",
            shape=(self.feature_size, 1 + self.embedding_size),
            initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
            experimental_autocast=False,
        )
        super().build(input_shape)

    def call(self, ids):
        rows = tf.nn.embedding_lookup(self.table, ids)  # [batch, fields, 1 + k], float32
        if self.l2_reg:
            # The mean over the batch of each example's 1/2 sum of squares, as one L2Loss:
            # its gradient is the rows times a scalar, where a per-example sum's is a Tile.
            batch = tf.cast(tf.shape(rows)[0], rows.dtype)
            self.add_loss(self.l2_reg * tf.nn.l2_loss(rows) / batch)
        return tf.cast(rows, self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "feature_size": self.feature_size,
                "embedding_size": self.embedding_size, "l2_reg": self.l2_reg}


class FactorizationMachine(tf.keras.layers.Layer):
    """FM logit: sum_f w_f x_f + 1/2 sum_k [(sum_f v_fk x_f)^2 - sum_f (v_fk x_f)^2]."""

    def call(self, inputs):
        weights, vectors, values = inputs  # [b, f], [b, f, k], [b, f]
        first_order = tf.reduce_sum(weights * values, axis=1, keepdims=True)
        return first_order + second_order(vectors * tf.expand_dims(values, -1))


@tf.custom_gradient
def second_order(scaled):
    """1/2 sum_k [(sum_f s_fk)^2 - sum_f s_fk^2] for s = v x, [b, f, k] -> [b, 1]. Its
    gradient is written out, d/ds_fk = sum_f' s_f'k - s_fk: one broadcast subtraction and
    one product, where automatic differentiation of the squares and sums takes a dozen ops
    (two of them Tiles of the whole block)."""
    total = tf.reduce_sum(scaled, axis=1)  # [b, k]
    out = 0.5 * tf.reduce_sum(tf.square(total) - tf.reduce_sum(tf.square(scaled), axis=1), axis=1, keepdims=True)

    def gradient(upstream):  # [b, 1]
        return tf.expand_dims(upstream, -1) * (tf.expand_dims(total, 1) - scaled)

    return out, gradient


class ByteDropout(tf.keras.layers.Layer):
    """Dropout whose mask takes one random byte per unit: each random 32-bit integer gives
    four, where Keras' Dropout draws a float per unit (its random numbers were 7% of a
    DeepFM step's op time); the mask is the scale or zero, so one multiplication applies it
    forward and one backward. The rate is applied in steps of 1/256 (0.5 exactly)."""

    def __init__(self, rate: float, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.threshold = min(255, round(rate * 256))  # a byte below it drops the unit

    def call(self, inputs, training=None):
        if not training or not self.threshold:
            return inputs
        units = tf.size(inputs)
        # Every int32 but the largest (maxval is exclusive): a bias of one in 2^32.
        words = tf.random.uniform([(units + 3) // 4], minval=-2**31, maxval=2**31 - 1, dtype=tf.int32)
        random_bytes = tf.reshape(tf.bitcast(words, tf.uint8), [-1])[:units]
        scale = tf.constant(256.0 / (256 - self.threshold), inputs.dtype)
        mask = tf.where(random_bytes >= self.threshold, scale, tf.zeros([], inputs.dtype))
        return inputs * tf.reshape(mask, tf.shape(inputs))

    def get_config(self):
        return {**super().get_config(), "rate": self.rate}


def build_deepfm(field_size: int, feature_size: int, embedding_size: int, deep_layers,
                 dropout, l2_reg: float, seed: int | None = None) -> tf.keras.Model:
    """The DeepFM as a functional Keras model: inputs {'ids', 'values'}, output P(click)."""
    if seed is not None:
        tf.keras.utils.set_random_seed(seed)
    dropout = list(dropout)
    if len(dropout) == 1:
        dropout = dropout * len(deep_layers)
    ids = tf.keras.Input(shape=(field_size,), dtype=tf.int64, name="ids")
    values = tf.keras.Input(shape=(field_size,), dtype=tf.float32, name="values")

    rows = FeatureEmbedding(feature_size, embedding_size, l2_reg, name="embedding")(ids)
    # A split, not two slices: its gradient is one concatenation, where each slice's
    # gradient writes a zero-filled copy of the whole block (9% of a step's op time).
    weights, vectors = tf.split(rows, [1, embedding_size], axis=-1)
    weights = tf.squeeze(weights, axis=-1)
    fm_logit = FactorizationMachine(name="fm")([weights, vectors, values])

    regularizer = tf.keras.regularizers.l2(l2_reg) if l2_reg else None
    deep = tf.keras.layers.Reshape((field_size * embedding_size,))(
        vectors * tf.expand_dims(tf.cast(values, vectors.dtype), -1))
    for index, (units, rate) in enumerate(zip(deep_layers, dropout)):
        deep = tf.keras.layers.Dense(units, activation="relu", kernel_regularizer=regularizer,
                                     name=f"deep_{index}")(deep)
        if rate:
            deep = ByteDropout(rate, name=f"dropout_{index}")(deep)
    deep_logit = tf.keras.layers.Dense(1, kernel_regularizer=regularizer, name="deep_out")(deep)

    logit = tf.keras.layers.Add(name="logit")([fm_logit, deep_logit])
    # float32 output under mixed precision: the loss and AUC see full-precision probabilities.
    probability = tf.keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logit)
    return tf.keras.Model(inputs={"ids": ids, "values": values}, outputs=probability, name="deepfm")


def model_from_hyperparameters(hp) -> tf.keras.Model:
    return build_deepfm(hp.field_size, hp.feature_size, hp.embedding_size, hp.deep_layers,
                        hp.dropout, hp.l2_reg, seed=hp.seed)
