"""A script that reads its rank's share of a raw channel through trainer.kit: the rows as
named columns (kit.rows), and the built-in model's features of them (kit.dataset); it records
what each rank read."""
import argparse
import os

import numpy as np

from trainer import kit

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=512)
    args, _ = parser.parse_known_args()
    rows, clicks, i1_total, names = 0, 0.0, 0.0, None
    for batch in kit.rows(args.batch_size):
        names = sorted(batch)
        rows += int(batch["label"].shape[0])
        clicks += float(batch["label"].numpy().sum())
        i1_total += float(np.nansum(batch["I1"].numpy()))
        assert batch["C1"].dtype.name == "string"
    features = next(iter(kit.dataset(args.batch_size, epoch=1)))[0]  # Pipe mode: the next FIFO
    criteo_input.record_what_i_saw(f"rank{kit.rank()}", rows=rows, clicks=clicks, i1_total=i1_total, names=names,
                                   field_size=int(features["ids"].shape[1]),
                                   channels=os.environ.get("TRAINER_CHANNELS", ""))


if __name__ == "__main__":
    main()
