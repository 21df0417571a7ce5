"""The Keras DeepFM script reading its data through the container's helper: kit.dataset
gives the rank its own channel and shard, parsed a window of records at a time."""

from trainer import kit

import deepfm_user


def main():
    args = deepfm_user.arguments()
    model = deepfm_user.deepfm(kit.learning_rate(args.learning_rate))
    speed = deepfm_user.Speed(args.batch_size)
    for epoch in range(args.epochs):
        model.fit(kit.dataset(args.batch_size, epoch), epochs=1, verbose=0, callbacks=[speed])


if __name__ == "__main__":
    main()
