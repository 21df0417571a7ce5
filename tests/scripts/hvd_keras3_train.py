"""A Horovod script written for Keras 3 (TensorFlow 2.16 or later): `import keras` for the
model, horovod.tensorflow's DistributedGradientTape in a custom loop, its variables broadcast
from rank 0 after the first step, a shard per rank. Each rank prints its weights, so a test
can compare them; rank 0 exports the model. MNIST-shaped arrays from the training channel."""
import argparse
import glob
import json
import os

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch_size", type=int, default=64)
args, _ = parser.parse_known_args()

hvd.init()
folder = os.environ["SM_CHANNEL_TRAINING"]
images = np.load(glob.glob(os.path.join(folder, "**", "x_train.npy"), recursive=True)[0])
labels = np.load(glob.glob(os.path.join(folder, "**", "y_train.npy"), recursive=True)[0])
data = (tf.data.Dataset.from_tensor_slices((images.astype("float32") / 255.0, labels.astype("int64")))
        .shard(hvd.size(), hvd.rank()).batch(args.batch_size))
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
optimizer = keras.optimizers.Adam(0.001 * hvd.size())
per_example = keras.losses.SparseCategoricalCrossentropy()


@tf.function
def step(x, y, first):
    with tf.GradientTape() as tape:
        loss = per_example(y, model(x, training=True))
    tape = hvd.DistributedGradientTape(tape)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    if first:  # every rank starts from rank 0's weights and optimizer state
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables, root_rank=0)
    return loss


first = True
for epoch in range(args.epochs):
    for x, y in data:
        loss = step(x, y, first)
        first = False
    print(f"rank {hvd.rank()} epoch {epoch + 1}: loss={float(loss):.4f}")
print(f"WEIGHTS rank{hvd.rank()} " + json.dumps([float(np.abs(w).sum()) for w in model.get_weights()]))
if hvd.rank() == 0:
    model.export(os.path.join(os.environ["SM_MODEL_DIR"], "1"))
