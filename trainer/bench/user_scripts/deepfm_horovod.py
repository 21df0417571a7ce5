"""The same DeepFM with Horovod, as people write it for AWS's container with
distribution={'mpi': ...}: a shard per rank, DistributedOptimizer, rank 0 reports."""
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

import deepfm_user


def main():
    args = deepfm_user.arguments()
    hvd.init()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(args.learning_rate * hvd.size()))
    model = deepfm_user.deepfm(args.learning_rate, optimizer)
    data = deepfm_user.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size, (hvd.size(), hvd.rank()))
    model.fit(data, epochs=args.epochs, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         deepfm_user.Speed(args.batch_size, hvd.size(), report=hvd.rank() == 0)])


if __name__ == "__main__":
    main()
