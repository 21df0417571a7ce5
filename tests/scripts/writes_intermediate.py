"""Writes a file to output/intermediate as its last act, then ends with --exit_code: the
file must reach S3 however the job ends."""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--exit_code", type=int, default=0)
parser.add_argument("--megabytes", type=int, default=24)
args, _ = parser.parse_known_args()
path = os.path.join(os.environ["SM_OUTPUT_INTERMEDIATE_DIR"], "last-words.bin")
with open(path, "wb") as f:
    f.write(os.urandom(args.megabytes << 20))
print(f"wrote {path}; ending with {args.exit_code}")
sys.exit(args.exit_code)
