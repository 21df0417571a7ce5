"""A Keras DeepFM script as people write it for AWS's TensorFlow container: argparse, the
training channel from SM_CHANNEL_TRAINING, model.fit."""
import os

import deepfm_user


def main():
    args = deepfm_user.arguments()
    model = deepfm_user.deepfm(args.learning_rate)
    model.fit(deepfm_user.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size), epochs=args.epochs,
              verbose=0, callbacks=[deepfm_user.Speed(args.batch_size)])


if __name__ == "__main__":
    main()
