"""A Keras 3 script of the kind written today for AWS's TensorFlow 2.21 training image, in the
style of that image's own MNIST test script: `import keras`, the strategy a hyperparameter
(`none`: plain `fit`; `mwms`: MultiWorkerMirroredStrategy with a custom loop, since Keras 3's
`fit` does not take a multi-worker strategy's per-replica batches), TF_CONFIG built by the
script itself from SM_HOSTS (worker tasks only, a port of its own) unless the container wrote
one (the SDK's multi-worker mirrored key), the optimizer's slots built
before the loop is traced, and the first host exporting a SavedModel with `model.export`
into model_dir/1. MNIST-shaped arrays from the training channel."""
import argparse
import glob
import json
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--strategy", choices=["none", "mwms"], default="none")
parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
parser.add_argument("--train", default=os.environ.get("SM_CHANNEL_TRAINING"))
args, _ = parser.parse_known_args()

hosts = json.loads(os.environ["SM_HOSTS"])
current_host = os.environ["SM_CURRENT_HOST"]
print(f"keras {keras.__version__} tensorflow {tf.__version__} on {current_host}")


def load(split):
    """x_<split>.npy and y_<split>.npy, in the channel's <split>/ folder or at its top."""
    def array(name):
        return np.load(glob.glob(os.path.join(args.train, "**", f"{name}_{split}.npy"), recursive=True)[0])

    return array("x").astype("float32") / 255.0, array("y").astype("int64")


def classifier():
    return keras.Sequential([keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


images, labels = load("train")
if args.strategy == "mwms":
    if len(hosts) > 1 and "TF_CONFIG" not in os.environ:
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"{host}:12345" for host in hosts]},
                                              "task": {"type": "worker", "index": hosts.index(current_host)}})
    print(f"TF_CONFIG={os.environ.get('TF_CONFIG')}")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync

    def per_worker(context):
        data = tf.data.Dataset.from_tensor_slices((images, labels))
        data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
        return data.repeat().batch(context.get_per_replica_batch_size(global_batch))

    batches = iter(strategy.distribute_datasets_from_function(per_worker))
    with strategy.scope():
        model = classifier()
        optimizer = keras.optimizers.AdamW(learning_rate=0.003)
        optimizer.build(model.trainable_variables)
        per_example = keras.losses.SparseCategoricalCrossentropy(reduction=None)
        accuracy = keras.metrics.SparseCategoricalAccuracy()

    def step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            predicted = model(x, training=True)
            loss = tf.nn.compute_average_loss(per_example(y, predicted), global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        accuracy.update_state(y, predicted)
        return loss

    @tf.function
    def distributed_step(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(batch,)), axis=None)

    steps = max(1, len(images) // global_batch)
    for epoch in range(args.epochs):
        accuracy.reset_state()
        losses = [float(distributed_step(next(batches))) for _ in range(steps)]
        print(f"epoch {epoch + 1}: loss={np.mean(losses):.4f} accuracy={float(accuracy.result()):.3f} "
              f"replicas={strategy.num_replicas_in_sync}")
else:
    model = classifier()
    model.compile(optimizer=keras.optimizers.AdamW(), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(images, labels, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
    _, test_accuracy = model.evaluate(*load("test"), verbose=0)
    print(f"test accuracy={test_accuracy:.3f} on {current_host}")

if current_host == hosts[0]:
    model.export(os.path.join(args.model_dir, "1"))
    print(f"exported to {os.path.join(args.model_dir, '1')}")
