"""Parameter-server training with tf.estimator, in the style of the SageMaker DeepFM
demo of the TensorFlow 1 era: argparse at the top, the Estimator API's
`model_fn(features, labels, mode, params)`, device filters from TF_CONFIG (master, worker,
ps), `train_and_evaluate`, and the master exporting a SavedModel. A factorisation machine
with a small deep part over the Criteo-style TFRecords of the training channel."""
import argparse
import glob
import json
import os
import time

import tensorflow as tf
import tensorflow_io  # noqa: F401  (s3:// for the Estimator's model_dir, which the SDK puts on S3)

parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", type=str, required=True)
parser.add_argument("--training", default=os.environ.get("SM_CHANNEL_TRAINING"))
parser.add_argument("--evaluation", default=os.environ.get("SM_CHANNEL_EVALUATION"))
parser.add_argument("--batch_size", type=int, default=256)
parser.add_argument("--max_steps", type=int, default=40)
parser.add_argument("--field_size", type=int, default=39)
parser.add_argument("--feature_size", type=int, default=117581)
parser.add_argument("--embedding_size", type=int, default=8)
parser.add_argument("--learning_rate", type=float, default=0.01)
parser.add_argument("--hosts", type=json.loads, default=os.environ["SM_HOSTS"])
parser.add_argument("--current_host", default=os.environ["SM_CURRENT_HOST"])
# Seconds a worker host waits before it starts (a slow start: the master may be done by then).
parser.add_argument("--worker_start_delay", type=float, default=0.0)
FLAGS, _ = parser.parse_known_args()


def feature_spec():
    return {"ids": tf.io.FixedLenFeature([FLAGS.field_size], tf.int64),
            "values": tf.io.FixedLenFeature([FLAGS.field_size], tf.float32)}


def input_fn(folder, repeat):
    files = sorted(glob.glob(os.path.join(folder, "**", "*.tfrecords"), recursive=True))
    spec = {**feature_spec(), "label": tf.io.FixedLenFeature([1], tf.float32)}

    def parse(records):
        parsed = tf.io.parse_example(records, spec)
        return {"ids": parsed["ids"], "values": parsed["values"]}, parsed["label"]

    dataset = tf.data.TFRecordDataset(files)
    if len(FLAGS.hosts) > 1:  # each host its part (the channel is replicated to every host)
        dataset = dataset.shard(len(FLAGS.hosts), FLAGS.hosts.index(FLAGS.current_host))
    return dataset.repeat(None if repeat else 1).batch(FLAGS.batch_size).map(parse)


def model_fn(features, labels, mode, params):
    """DeepFM: first-order weights, pairwise factors and an MLP over the same embeddings."""
    values = tf.expand_dims(features["values"], -1)
    weights = tf.compat.v1.get_variable("weights", [params["feature_size"], 1])
    factors = tf.compat.v1.get_variable("factors", [params["feature_size"], params["embedding_size"]])
    first = tf.reduce_sum(tf.nn.embedding_lookup(weights, features["ids"]) * values, axis=[1, 2])
    embedded = tf.nn.embedding_lookup(factors, features["ids"]) * values
    second = 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(embedded, 1)) - tf.reduce_sum(tf.square(embedded), 1), 1)
    deep = tf.compat.v1.layers.dense(tf.reshape(embedded, [-1, params["field_size"] * params["embedding_size"]]),
                                     32, activation=tf.nn.relu)
    logits = first + second + tf.squeeze(tf.compat.v1.layers.dense(deep, 1), 1)
    probability = tf.sigmoid(logits)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"probability": probability})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.squeeze(labels, 1), logits=logits))
    metrics = {"auc": tf.compat.v1.metrics.auc(tf.squeeze(labels, 1), probability)}
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    optimizer = tf.compat.v1.train.AdagradOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def session_config():
    """Each task sees the parameter servers and itself only: without these device filters
    the master hangs at the end while the other workers are done."""
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = tf_config.get("task", {})
    filters = None
    if task:
        own = "/job:master" if task["type"] == "master" else f"/job:worker/task:{task['index']}"
        filters = ["/job:ps", own]
    return tf.compat.v1.ConfigProto(allow_soft_placement=True, device_filters=filters)


def main():
    if FLAGS.current_host != FLAGS.hosts[0] and FLAGS.worker_start_delay:
        time.sleep(FLAGS.worker_start_delay)
        print(f"{FLAGS.current_host}: starting {FLAGS.worker_start_delay:g} s late", flush=True)
    params = {"feature_size": FLAGS.feature_size, "field_size": FLAGS.field_size,
              "embedding_size": FLAGS.embedding_size, "learning_rate": FLAGS.learning_rate}
    config = tf.estimator.RunConfig(session_config=session_config(), save_checkpoints_steps=20,
                                    log_step_count_steps=10)
    estimator = tf.estimator.Estimator(model_fn, model_dir=FLAGS.model_dir, params=params, config=config)
    train_spec = tf.estimator.TrainSpec(lambda: input_fn(FLAGS.training, repeat=True), max_steps=FLAGS.max_steps)
    eval_spec = tf.estimator.EvalSpec(lambda: input_fn(FLAGS.evaluation or FLAGS.training, repeat=False),
                                      steps=None, start_delay_secs=1, throttle_secs=1)
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    if FLAGS.current_host == FLAGS.hosts[0]:
        serving = tf.estimator.export.build_parsing_serving_input_receiver_fn(feature_spec())
        print("exported", estimator.export_saved_model(os.environ["SM_MODEL_DIR"], serving), flush=True)
    print(f"{FLAGS.current_host}: the script's last line", flush=True)


if __name__ == "__main__":
    main()
