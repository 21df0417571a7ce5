"""A script that uses the container's helpers (trainer.kit): its rank's own Pipe-mode
channel and shard, the scaled learning rate, the throughput/checkpoint/stop callbacks and
the export; it records what each rank read."""
import argparse
import os

from trainer import kit

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    args, _ = parser.parse_known_args()
    model = criteo_input.small_model(learning_rate=kit.learning_rate(0.001))
    callbacks = kit.callbacks(args.batch_size, model, log_steps=5)
    records = 0
    for epoch in range(args.epochs):
        data = kit.dataset(args.batch_size, epoch)
        records += sum(int(label.shape[0]) for _, label in data)  # what this rank's pass holds
        model.fit(kit.dataset(args.batch_size, epoch + args.epochs), epochs=1, callbacks=callbacks, verbose=0)
    criteo_input.record_what_i_saw(f"rank{kit.rank()}", records=records, channels=os.environ["TRAINER_CHANNELS"])
    kit.export(model)


if __name__ == "__main__":
    main()
