"""A training script whose hosts end apart, as AWS's mnist example does on two hosts with no
distribution: every host trains on its own, and the first host alone saves the model, last.
Here "training" is a sleep of each host's own length (--seconds_first, --seconds_others), so
the order in which hosts end is set, and nothing else (no TensorFlow) costs time."""
import argparse
import json
import os
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds_first", type=float, default=5.0)
    parser.add_argument("--seconds_others", type=float, default=0.0)
    parser.add_argument("--model_dir", default=None)
    args, _ = parser.parse_known_args()
    hosts, me = json.loads(os.environ["SM_HOSTS"]), os.environ["SM_CURRENT_HOST"]
    first = me == hosts[0]
    time.sleep(args.seconds_first if first else args.seconds_others)
    if first:
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
            json.dump({"saved_by": me, "hosts": hosts}, f)
    print(f"{me}: trained{' and saved the model' if first else ''}", flush=True)


if __name__ == "__main__":
    main()
