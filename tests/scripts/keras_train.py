"""A training script as people write it for AWS's TensorFlow container: argparse for the
hyperparameters and --model_dir, SM_* for the folders, model.fit, a SavedModel under
SM_MODEL_DIR/1. Nothing in it knows this container."""
import argparse
import importlib
import os
import signal

import tensorflow as tf

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--fail_with", default="")
    parser.add_argument("--write_failure_file", type=int, default=0)  # as SageMaker documents, before failing
    parser.add_argument("--import_module", default="")  # one that requirements.txt installs
    parser.add_argument("--ignore_sigterm", type=int, default=0)
    parser.add_argument("--model_dir", default=None)  # the SDK's; a Keras script saves to SM_MODEL_DIR
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAINING"))
    parser.add_argument("--eval", default=os.environ.get("SM_CHANNEL_EVALUATION"))
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    imported = importlib.import_module(args.import_module).VALUE if args.import_module else None
    criteo_input.record_what_i_saw(os.environ["SM_CURRENT_HOST"], model_dir_arg=args.model_dir, imported=imported)
    if args.fail_with:
        if args.write_failure_file:
            with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
                f.write(f"the script's own reason: {args.fail_with}\n")
        raise ValueError(args.fail_with)
    model = criteo_input.small_model(learning_rate=args.learning_rate)
    model.fit(criteo_input.dataset(args.train, args.batch_size), epochs=args.epochs, verbose=2)
    if args.eval:
        _, auc = model.evaluate(criteo_input.dataset(args.eval, args.batch_size), verbose=0)
        print(f"eval_auc={auc:.4f}")
    model.save(os.path.join(os.environ["SM_MODEL_DIR"], "1"))


if __name__ == "__main__":
    main()
