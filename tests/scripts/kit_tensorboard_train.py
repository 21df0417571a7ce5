"""A Horovod script that writes TensorBoard's runs through the container's helper
(kit.tensorboard): the chief its loss by step and each epoch's loss and val_auc, every rank
its own samples/sec."""
import argparse
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

from trainer import kit

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=256)
    args, _ = parser.parse_known_args()
    hvd.init()
    model = criteo_input.small_model(
        optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(kit.learning_rate(0.001))))
    train = criteo_input.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size, (hvd.size(), hvd.rank()))
    evaluation = criteo_input.dataset(os.environ["SM_CHANNEL_EVALUATION"], args.batch_size)
    model.fit(train, validation_data=evaluation, epochs=args.epochs, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), *kit.tensorboard(args.batch_size, log_steps=4)])


if __name__ == "__main__":
    main()
