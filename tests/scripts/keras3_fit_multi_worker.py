"""A Keras 3 script whose `model.fit` runs under MultiWorkerMirroredStrategy with no TF_CONFIG
code of its own (the SDK's multi-worker mirrored key: the container writes it), as Keras'
own guide writes it; on one host (no TF_CONFIG) the same fit runs in one process on the same
global batch. Each host prints its weights, so a test can compare the workers with each
other and with the one-process fit. MNIST-shaped arrays from the training channel."""
import argparse
import glob
import json
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--global_batch_size", type=int, default=128)
args, _ = parser.parse_known_args()

keras.utils.set_random_seed(7)
distributed = "TF_CONFIG" in os.environ
strategy = tf.distribute.MultiWorkerMirroredStrategy() if distributed else tf.distribute.get_strategy()
folder = os.environ["SM_CHANNEL_TRAINING"]
images = np.load(glob.glob(os.path.join(folder, "**", "x_train.npy"), recursive=True)[0])
labels = np.load(glob.glob(os.path.join(folder, "**", "y_train.npy"), recursive=True)[0])
data = tf.data.Dataset.from_tensor_slices((images.astype("float32") / 255.0, labels.astype("int64")))
with strategy.scope():
    model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(0.002), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
history = model.fit(data.batch(args.global_batch_size), epochs=args.epochs, verbose=2)
host = os.environ["SM_CURRENT_HOST"]
print(f"replicas={strategy.num_replicas_in_sync} on {host}")
print(f"WEIGHTS {host} " + json.dumps({"loss": history.history["loss"],
                                       "weights": [float(np.abs(w).sum()) for w in model.get_weights()]}))
if host == json.loads(os.environ["SM_HOSTS"])[0]:
    model.export(os.path.join(os.environ["SM_MODEL_DIR"], "1"))
