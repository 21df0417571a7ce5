"""A Horovod script whose last rank skips an allreduce (as one does behind an `if` on its
rank) and goes on with its own work: the others wait in it for a rank that never comes.
--pause_sec: every rank first pauses that long (a healthy long evaluation), then all meet;
--skip 0: nobody skips."""
import argparse
import time

import horovod.tensorflow as hvd
import tensorflow as tf


def write_the_report_alone(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pause_sec", type=float, default=0)
    parser.add_argument("--skip", type=int, default=1)
    parser.add_argument("--alone_sec", type=float, default=600)
    args, _ = parser.parse_known_args()
    hvd.init()
    hvd.allreduce(tf.constant(1.0), name="warmup")
    time.sleep(args.pause_sec)
    if args.skip and hvd.rank() == hvd.size() - 1:
        write_the_report_alone(args.alone_sec)
        return
    total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="gradients")
    print(f"rank {hvd.rank()}: {int(total.numpy())} ranks met", flush=True)


if __name__ == "__main__":
    main()
