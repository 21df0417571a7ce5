"""A script of AWS's Pipe-mode examples: `from sagemaker_tensorflow import PipeModeDataset`,
the training channel's TFRecords read from its FIFO, two epochs of `fit` (each epoch a new
iterator: the next FIFO), the record count of each epoch printed. Nothing in it knows this
container."""
import argparse
import os

import tensorflow as tf
from sagemaker_tensorflow import PipeModeDataset

import criteo_input

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--model_dir", default=None)
args, _ = parser.parse_known_args()

records = PipeModeDataset(channel="training", record_format="TFRecord")
counts = []


class CountRecords(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        counts.append(0)

    def on_train_batch_end(self, batch, logs=None):
        counts[-1] += 1


model = criteo_input.small_model()
model.fit(records.batch(256).map(criteo_input.parse), epochs=args.epochs, callbacks=[CountRecords()], verbose=2)
print(f"batches per epoch: {counts}")
model.save(os.path.join(os.environ["SM_MODEL_DIR"], "model.keras"))
