"""AWS's check of a tuning job's model_dir: every training job of a tuning job gets a model_dir
of its own, with its job name in it (they would otherwise write to the same place)."""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", type=str)
parser.add_argument("--arbitrary_value", type=int, default=0)
args, _ = parser.parse_known_args()
assert os.environ["TRAINING_JOB_NAME"] in args.model_dir, f"model_dir not the job's own: {args.model_dir}"
print(f"model_dir={args.model_dir}")
print("accuracy=1")
