"""A Keras script for a heterogeneous cluster: its own input pipeline read through the data
hosts' tf.data service with trainer.kit.from_data_service (the pipeline itself where the job
has no data group), or trainer.kit.dataset (--reader kit). Where it runs on a data host
(data_hosts_run=script) it says so and ends, as a script written for AWS's container would
after starting what it serves."""
import argparse
import os

import tensorflow as tf

import criteo_input
from trainer import kit


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--reader", choices=("own", "kit"), default="own")
    parser.add_argument("--data_group", default="data")
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAINING"))
    args = parser.parse_args()
    host = os.environ["SM_CURRENT_HOST"]
    if os.environ.get("SM_CURRENT_INSTANCE_GROUP") == args.data_group:
        print(f"{host} is in instance group {args.data_group}: nothing to train here")
        return
    if args.reader == "kit":
        dataset = kit.dataset(args.batch_size)
    else:
        files = tf.data.Dataset.from_tensor_slices(criteo_input.files_of(args.train))
        records = files.interleave(tf.data.TFRecordDataset, num_parallel_calls=tf.data.AUTOTUNE)
        dataset = kit.from_data_service(records.batch(args.batch_size).map(criteo_input.parse))
    examples = sum(int(label.shape[0]) for _, label in dataset)
    print(f"{host}: one pass of {examples} examples; TRAINER_DATA_SERVICE={os.environ.get('TRAINER_DATA_SERVICE')}")
    model = criteo_input.small_model()
    model.fit(dataset, epochs=args.epochs, verbose=2)
    kit.export(model)


if __name__ == "__main__":
    main()
