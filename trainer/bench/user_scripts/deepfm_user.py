"""What the benchmark's user scripts share, as a user's source_dir often holds such a module:
the DeepFM sample's record layout parsed record by record (as AWS's samples do), a DeepFM
in plain Keras (2 or 3), the script's arguments, and a callback that reports its own samples/sec."""
import argparse
import glob
import importlib
import json
import os
import time

import tensorflow as tf

FIELDS, FEATURES = 39, 117581
SPEC = {"ids": tf.io.FixedLenFeature([FIELDS], tf.int64), "values": tf.io.FixedLenFeature([FIELDS], tf.float32),
        "label": tf.io.FixedLenFeature([1], tf.float32)}


def arguments():
    """The hyperparameters the scripts read (SageMaker passes them as --name value)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    return parser.parse_known_args()[0]


def parse(serialized):
    example = tf.io.parse_single_example(serialized, SPEC)
    return {"ids": example["ids"], "values": example["values"]}, example["label"]


def dataset(folder, batch_size, shard=(1, 0)):
    files = sorted(glob.glob(os.path.join(folder, "**", "*.tfrecord*"), recursive=True))
    records = tf.data.TFRecordDataset(files).shard(*shard)
    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size).prefetch(tf.data.AUTOTUNE)


class FactorizationMachine(tf.keras.layers.Layer):
    """DeepFM's first- and second-order terms, and the value-scaled vectors the deep part
    reads: TensorFlow ops inside a layer, so the model builds on Keras 2 and Keras 3 alike."""

    def call(self, inputs):
        weights, vectors, values = inputs
        scaled = vectors * tf.expand_dims(values, -1)
        first = tf.reduce_sum(weights[:, :, 0] * values, axis=1, keepdims=True)
        second = 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(scaled, 1)) - tf.reduce_sum(tf.square(scaled), 1),
                                     axis=1, keepdims=True)
        return first + second, tf.reshape(scaled, [-1, scaled.shape[1] * scaled.shape[2]])


def deepfm(learning_rate, optimizer=None):
    ids = tf.keras.Input((FIELDS,), dtype="int64", name="ids")
    values = tf.keras.Input((FIELDS,), name="values")
    shallow, deep = FactorizationMachine()(
        [tf.keras.layers.Embedding(FEATURES, 1)(ids), tf.keras.layers.Embedding(FEATURES, 8)(ids), values])
    for units in (256, 128, 64):
        deep = tf.keras.layers.Dropout(0.5)(tf.keras.layers.Dense(units, activation="relu")(deep))
    logit = tf.keras.layers.Add()([shallow, tf.keras.layers.Dense(1)(deep)])
    model = tf.keras.Model({"ids": ids, "values": values}, tf.keras.layers.Activation("sigmoid")(logit))
    model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(learning_rate), loss="binary_crossentropy")
    return model


class Speed(tf.keras.callbacks.Callback):
    """Samples/sec after the first `skip` steps (graph tracing), times `processes` that
    train in step; printed as one line `BENCH_RESULT {...}` when training ends."""

    def __init__(self, batch_size, processes=1, skip=20, report=True):
        super().__init__()
        self.batch_size, self.processes, self.skip, self.report = batch_size, processes, skip, report
        self.steps, self.started = 0, None

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == self.skip:
            self.started, self.timed_from = time.perf_counter(), self.steps

    def on_train_end(self, logs=None):
        if self.report and self.started is not None:
            seconds = time.perf_counter() - self.started
            rate = (self.steps - self.timed_from) * self.batch_size * self.processes / seconds
            print("BENCH_RESULT " + json.dumps({"samples_per_sec": rate, "steps": self.steps, "keras": keras_version()}),
                  flush=True)


def keras_version() -> str:
    """What tf.keras is: "2.14.0", "3.15.1" or "tf-keras 2.21.0" (from the package it comes from)."""
    package = tf.keras.__name__.split(".")[0]  # keras (Keras 2.14 or 3) or tf_keras
    return ("tf-keras " if package == "tf_keras" else "") + importlib.import_module(package).__version__
