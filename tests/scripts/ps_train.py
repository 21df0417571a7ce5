"""A TF 2 parameter-server script for AWS's container (distribution={'parameter_server':
...}): TF_CONFIG names a master (here the coordinator), workers and the PS tasks the
container runs; a worker serves until the job ends. --worker_leaves_after_sec S: the worker
leaves S seconds after it started serving (exit 0, while the master still trains)."""
import argparse
import json
import os
import time

import tensorflow as tf

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--steps_per_epoch", type=int, default=20)
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--worker_leaves_after_sec", type=float, default=0)
    args, _ = parser.parse_known_args()
    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec({("chief" if job == "master" else job): hosts
                                    for job, hosts in tf_config["cluster"].items()})
    task = tf_config["task"]
    criteo_input.record_what_i_saw(f"{task['type']}{task['index']}", tf_config=tf_config)
    if task["type"] == "worker":
        server = tf.distribute.Server(cluster, job_name="worker", task_index=task["index"], protocol="grpc")
        if args.worker_leaves_after_sec:
            time.sleep(args.worker_leaves_after_sec)
            print("the worker leaves", flush=True)
            # Exit 0 at once: TensorFlow's own teardown of a server that other tasks still
            # call into crashes at times (SIGSEGV), which would be a different fault.
            os._exit(0)
        server.join()
        return
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, task_type="chief", task_id=0,
                                                                    rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = criteo_input.small_model()
    folder = os.environ["SM_CHANNEL_TRAINING"]
    data = tf.keras.utils.experimental.DatasetCreator(
        lambda context: criteo_input.dataset(folder, args.batch_size).repeat())
    model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
    model.save(os.path.join(os.environ["SM_MODEL_DIR"], "1"))


if __name__ == "__main__":
    main()
