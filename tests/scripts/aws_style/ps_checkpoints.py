"""A custom training loop in the style of AWS's parameter-server example: every host trains
on its own (the container runs a parameter server beside each), and the first host saves
checkpoints to --model_dir with tf.train.CheckpointManager, an s3:// path when the SDK's
default is kept (tensorflow_io gives TensorFlow the S3 filesystem). A job started again
with the same model_dir resumes from its latest checkpoint."""
import argparse
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_io  # noqa: F401  (s3:// for TensorFlow's file APIs)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", type=str, default=os.environ["SM_CHANNEL_TRAINING"])
    parser.add_argument("--model_dir", type=str)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hosts", type=json.loads, default=os.environ["SM_HOSTS"])
    parser.add_argument("--current-host", type=str, default=os.environ["SM_CURRENT_HOST"])
    return parser.parse_known_args()[0]


def batches(folder):
    images = np.load(os.path.join(folder, "train_data.npy")).reshape(-1, 28, 28, 1) / 255.0
    labels = np.load(os.path.join(folder, "train_labels.npy")).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((images.astype(np.float32), labels)).shuffle(1000).batch(100)


def main(args):
    net = tf.keras.Sequential([tf.keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                               tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
    net.build((None, 28, 28, 1))
    optimizer = tf.keras.optimizers.Adam()
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, args.model_dir, max_to_keep=5, checkpoint_name="model.ckpt")
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
        print(f"resumed from {manager.latest_checkpoint} at step {int(optimizer.iterations.numpy())}", flush=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, net(x), from_logits=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss

    for epoch in range(args.epochs):
        for x, y in batches(args.train):
            loss = train_step(x, y)
        print(f"epoch {epoch + 1}: loss {float(loss):.4f}", flush=True)
        if args.current_host == args.hosts[0]:
            print(f"saved {manager.save(checkpoint_number=int(optimizer.iterations.numpy()))}", flush=True)


if __name__ == "__main__":
    main(parse_args())
