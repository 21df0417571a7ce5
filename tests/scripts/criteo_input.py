"""Input and model helpers shared by these example scripts (a user's source_dir often has one)."""
import glob
import json
import os

import tensorflow as tf

FIELDS = 39
FEATURES = {"ids": tf.io.FixedLenFeature([FIELDS], tf.int64), "values": tf.io.FixedLenFeature([FIELDS], tf.float32),
            "label": tf.io.FixedLenFeature([1], tf.float32)}


def files_of(folder):
    return sorted(glob.glob(os.path.join(folder, "**", "*.tfrecords"), recursive=True))


def parse(serialized):
    example = tf.io.parse_example(serialized, FEATURES)
    return {"ids": example["ids"], "values": example["values"]}, example["label"]


def dataset(folder, batch_size, shard=(1, 0)):
    records = tf.data.TFRecordDataset(files_of(folder)).shard(*shard)
    return records.batch(batch_size).map(parse).prefetch(tf.data.AUTOTUNE)


def small_model(feature_size=117581, learning_rate=0.001, optimizer=None):
    ids = tf.keras.Input((FIELDS,), name="ids", dtype=tf.int64)
    values = tf.keras.Input((FIELDS,), name="values")
    embedded = tf.keras.layers.Embedding(feature_size, 8)(ids) * tf.expand_dims(values, -1)
    hidden = tf.keras.layers.Dense(32, activation="relu")(tf.keras.layers.Flatten()(embedded))
    output = tf.keras.layers.Dense(1, activation="sigmoid")(hidden)
    model = tf.keras.Model({"ids": ids, "values": values}, output)
    model.compile(optimizer=optimizer or tf.keras.optimizers.Adam(learning_rate), loss="binary_crossentropy",
                  metrics=[tf.keras.metrics.AUC(name="auc")])
    return model


def record_what_i_saw(name, **more):
    """What this process was given, for the tests: its arguments and environment."""
    keys = [k for k in os.environ if k.startswith(("SM_", "TRAINER_", "TF_", "OMP_", "KMP_"))]
    seen = {"argv": __import__("sys").argv[1:], "env": {k: os.environ[k] for k in keys}, "cwd": os.getcwd(), **more}
    folder = os.environ.get("SM_OUTPUT_DATA_DIR", "/tmp")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"seen-{name}.json"), "w") as f:
        json.dump(seen, f, indent=1)
