"""A multi-worker mirrored script for AWS's TF 2 container: TF_CONFIG comes from the
container; the chief (worker 0) saves to SM_MODEL_DIR, the others to a scratch folder.
--stall_on_worker N: that worker stops inside its third step of training (a sleep of 10
minutes), while the others wait for it in the step's all-reduce.
--early_stopping_on_worker0 1: worker 0 alone stops after its second epoch (EarlyStopping
on its own), while the others go on into the third epoch's all-reduce.
--save_on_chief_only 1: the others end without saving, while worker 0's save all-reduces
the metrics' variables (a save is a collective under this strategy)."""
import argparse
import json
import os
import tempfile
import time

import tensorflow as tf

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--fail_on_worker", type=int, default=-1)
    parser.add_argument("--stall_on_worker", type=int, default=-1)
    parser.add_argument("--early_stopping_on_worker0", type=int, default=0)
    parser.add_argument("--save_on_chief_only", type=int, default=0)
    args, _ = parser.parse_known_args()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    criteo_input.record_what_i_saw(f"worker{task['index']}", tf_config=json.loads(os.environ["TF_CONFIG"]))
    if task["index"] == args.fail_on_worker:
        raise RuntimeError(f"worker {task['index']} cannot go on")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = criteo_input.small_model()
    data = criteo_input.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size * strategy.num_replicas_in_sync)
    options = tf.data.Options()  # one file for two workers: each takes every other batch
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = data.with_options(options)
    callbacks = [StallAtTheThirdStep()] if task["index"] == args.stall_on_worker else []
    if args.early_stopping_on_worker0 and task["index"] == 0:  # no epoch improves the loss by 10
        callbacks.append(tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10))
    model.fit(data, epochs=args.epochs, verbose=2, callbacks=callbacks)
    is_chief = task["index"] == 0
    if args.save_on_chief_only and not is_chief:
        return
    model.save(os.path.join(os.environ["SM_MODEL_DIR"], "1") if is_chief else tempfile.mkdtemp())


class StallAtTheThirdStep(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 2:
            stop_here(600)


def stop_here(seconds):
    print(f"stopping here for {seconds} s", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1)


if __name__ == "__main__":
    main()
