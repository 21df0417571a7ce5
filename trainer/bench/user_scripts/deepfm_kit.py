"""The Keras DeepFM script reading its data through the container's helper: kit.dataset
gives the rank its own channel and shard, parsed a window of records at a time."""
import argparse

from trainer import kit

import deepfm_user


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    args, _ = parser.parse_known_args()
    model = deepfm_user.deepfm(kit.learning_rate(args.learning_rate))
    speed = deepfm_user.Speed(args.batch_size)
    for epoch in range(args.epochs):
        model.fit(kit.dataset(args.batch_size, epoch), epochs=1, verbose=0, callbacks=[speed])


if __name__ == "__main__":
    main()
