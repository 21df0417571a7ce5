"""A Horovod script whose ranks hold the job open until the test lets them go: rank 0 waits
for a file in its host's /opt/ml (the test writes it into that host's job folder), then
every rank meets it in an allreduce and the job ends. Bounded: rank 0 gives up after
--wait_sec."""
import argparse
import os
import time

import horovod.tensorflow as hvd
import tensorflow as tf

RELEASE = "/opt/ml/release"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait_sec", type=float, default=300)
    args, _ = parser.parse_known_args()
    hvd.init()
    if hvd.rank() == 0:
        print(f"{hvd.size()} ranks up; waiting to be released", flush=True)
        deadline = time.monotonic() + args.wait_sec
        while not os.path.exists(RELEASE):
            if time.monotonic() > deadline:
                raise SystemExit(f"not released within {args.wait_sec:.0f} s")
            time.sleep(0.5)
    total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)
    if hvd.rank() == 0:
        print(f"released: {int(total.numpy())} ranks met", flush=True)


if __name__ == "__main__":
    main()
