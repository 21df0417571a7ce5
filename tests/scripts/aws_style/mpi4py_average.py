"""A script for AWS's TensorFlow 2.21 image with `sagemaker_mpi_enabled` and no Horovod
(that image has none): mpirun starts it once per rank; each rank trains a Keras 3 model on
its own slice of the MNIST-shaped arrays, the ranks average their weights with mpi4py's
allreduce, and rank 0 exports the averaged model. Prints each rank's view and a checksum of
the averaged weights (equal on every rank when the allreduce worked)."""
import argparse
import glob
import os

import keras
import numpy as np
from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAINING"))
args, _ = parser.parse_known_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
print(f"rank {rank} of {size} on {os.environ['SM_CURRENT_HOST']}", flush=True)


def array(name):
    return np.load(glob.glob(os.path.join(args.train, "**", f"{name}_train.npy"), recursive=True)[0])


images, labels = array("x")[rank::size].astype("float32") / 255.0, array("y")[rank::size].astype("int64")
keras.utils.set_random_seed(1)  # the same starting weights on every rank
model = keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(images, labels, epochs=args.epochs, batch_size=64, verbose=2)
model.set_weights([comm.allreduce(weights, op=MPI.SUM) / size for weights in model.get_weights()])
print(f"rank {rank}: averaged weights checksum {sum(float(np.sum(w)) for w in model.get_weights()):.6f}", flush=True)
if rank == 0:
    model.export(os.path.join(args.model_dir, "1"))
