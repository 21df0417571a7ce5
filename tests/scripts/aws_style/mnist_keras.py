"""A Keras script in the style of AWS's mnist example for its TensorFlow container: its
hyperparameters and folders from argparse and SM_* at the top level (no __main__ guard),
MNIST-shaped arrays from the training channel, fit and evaluate on every host, and the
first host alone saves `my_model.h5` in the model folder."""
import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
parser.add_argument("--train", type=str, default=os.environ["SM_CHANNEL_TRAINING"])
parser.add_argument("--hosts", type=json.loads, default=os.environ["SM_HOSTS"])
parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
args, _ = parser.parse_known_args()


def arrays(split):
    folder = os.path.join(args.train, split)
    return np.load(os.path.join(folder, f"x_{split}.npy")), np.load(os.path.join(folder, f"y_{split}.npy"))


images, labels = arrays("train")
classifier = tf.keras.Sequential([
    tf.keras.layers.Flatten(input_shape=(28, 28)),
    tf.keras.layers.Rescaling(1 / 255),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dense(10, activation="softmax"),
])
classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
classifier.fit(images, labels, epochs=args.epochs, verbose=2)
_, accuracy = classifier.evaluate(*arrays("test"), verbose=0)
print(f"test accuracy={accuracy:.3f} on {args.current_host}")
if args.current_host == args.hosts[0]:
    classifier.save(os.path.join(args.model_dir, "my_model.h5"))
