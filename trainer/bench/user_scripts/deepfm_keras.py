"""A Keras DeepFM script as people write it for AWS's TensorFlow container: argparse, the
training channel from SM_CHANNEL_TRAINING, model.fit."""
import argparse
import os

import deepfm_user


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    args, _ = parser.parse_known_args()
    model = deepfm_user.deepfm(args.learning_rate)
    model.fit(deepfm_user.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size), epochs=args.epochs,
              verbose=0, callbacks=[deepfm_user.Speed(args.batch_size)])


if __name__ == "__main__":
    main()
