"""A user's model module for script mode: hooks only, no distribution code."""
import tensorflow as tf


def model_fn(hp):
    """Logistic regression with pairwise factors over the DeepFM layout (ids, values)."""
    ids = tf.keras.Input((hp["field_size"],), dtype=tf.int64, name="ids")
    values = tf.keras.Input((hp["field_size"],), name="values")
    factors = tf.keras.layers.Embedding(hp["feature_size"], 5, name="factors")(ids) * values[:, :, None]
    first = tf.reduce_sum(factors[:, :, 0], axis=1, keepdims=True)
    vectors = factors[:, :, 1:]
    second = 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(vectors, 1)) - tf.reduce_sum(tf.square(vectors), 1),
                                 axis=1, keepdims=True)
    probability = tf.keras.layers.Activation("sigmoid")(first + second)
    return tf.keras.Model({"ids": ids, "values": values}, probability)


def optimizer_fn(hp):
    return tf.keras.optimizers.legacy.Adagrad(float(hp.get("adagrad_rate", 0.05)))
