"""A plain Keras script, as SageMaker's ModelTrainer runs it (`python3 keras_cpu_seen.py
--epochs 1`): it writes the CPU settings its process started with into the model folder,
trains on the MNIST-shaped arrays of its training channel and saves a SavedModel."""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

CPU_SETTINGS = ("OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME", "TF_NUM_INTRAOP_THREADS",
                "TF_NUM_INTEROP_THREADS")

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args, _ = parser.parse_known_args()
model_dir, data = os.environ["SM_MODEL_DIR"], os.environ["SM_CHANNEL_TRAINING"]
with open(os.path.join(model_dir, "cpu-settings.json"), "w") as f:
    json.dump({name: os.environ.get(name) for name in CPU_SETTINGS}, f)
images, labels = (np.load(os.path.join(data, "train", f"{name}_train.npy")) for name in ("x", "y"))
model = tf.keras.Sequential([tf.keras.layers.Flatten(input_shape=(28, 28)), tf.keras.layers.Rescaling(1 / 255),
                             tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)])
model.compile(optimizer="adam", metrics=["accuracy"],
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(images, labels, epochs=args.epochs, verbose=2)
model.save(os.path.join(model_dir, "1"))
