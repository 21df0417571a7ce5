"""Multi-worker mirrored in the style of AWS's check: the script reads the TF_CONFIG the
container gave it, trains a small convolutional model on MNIST-shaped arrays with
MultiWorkerMirroredStrategy, and writes what it saw into the model folder."""
import json
import os

import numpy as np
import tensorflow as tf

tf_config = json.loads(os.environ["TF_CONFIG"])
print(f"TF_CONFIG={json.dumps(tf_config)}", flush=True)
workers = len(tf_config["cluster"]["worker"])
strategy = tf.distribute.MultiWorkerMirroredStrategy()

generator = np.random.default_rng(7)
images = generator.random((512, 28, 28), dtype=np.float32)
labels = (images[:, :14].sum(axis=(1, 2)) > images[:, 14:].sum(axis=(1, 2))).astype(np.int64)
batches = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(32 * workers)
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Reshape((28, 28, 1), input_shape=(28, 28)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(2),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(batches, epochs=2, steps_per_epoch=10, verbose=2)
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"tf-config-{tf_config['task']['index']}.json"), "w") as f:
    json.dump(tf_config, f)
