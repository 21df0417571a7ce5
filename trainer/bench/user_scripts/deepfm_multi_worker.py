"""The Keras DeepFM script under MultiWorkerMirroredStrategy, as people write it for AWS's
TensorFlow 2.21 container (`sagemaker_multi_worker_mirrored_strategy_enabled`; that image has
no Horovod): the strategy reads TF_CONFIG, each worker reads the whole channel and the
strategy shards it by file, and the batch size is per worker."""
import os

import tensorflow as tf

import deepfm_user


def main():
    args = deepfm_user.arguments()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    with strategy.scope():
        model = deepfm_user.deepfm(args.learning_rate * workers)
    data = deepfm_user.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size * workers)
    chief = strategy.cluster_resolver.task_id == 0
    model.fit(data, epochs=args.epochs, verbose=0,
              callbacks=[deepfm_user.Speed(args.batch_size, workers, report=chief)])


if __name__ == "__main__":
    main()
