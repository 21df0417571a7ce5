"""A Horovod Keras script as people write it for AWS's container (distribution={'mpi': ...}):
hvd.init(), a shard per rank, the learning rate scaled by hvd.size(), DistributedOptimizer,
broadcast from rank 0, and only rank 0 saves."""
import argparse
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

import criteo_input


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    parser.add_argument("--fail_on_rank", type=int, default=-1)
    # Ranks out of step, as scripts get them by mistake: rank 0 alone stops early, or reads fewer batches.
    parser.add_argument("--early_stopping_on_rank0", type=int, default=0)
    parser.add_argument("--rank0_batches", type=int, default=-1)
    parser.add_argument("--model_dir", default=None)
    args, _ = parser.parse_known_args()
    hvd.init()
    criteo_input.record_what_i_saw(f"rank{hvd.rank()}", rank=hvd.rank(), size=hvd.size(),
                                   local_rank=hvd.local_rank())
    if hvd.rank() == args.fail_on_rank:
        raise RuntimeError(f"rank {hvd.rank()} cannot go on")
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(args.learning_rate * hvd.size()))
    model = criteo_input.small_model(optimizer=optimizer)
    data = criteo_input.dataset(os.environ["SM_CHANNEL_TRAINING"], args.batch_size, (hvd.size(), hvd.rank()))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if hvd.rank() == 0:
        data = data.take(args.rank0_batches)
        if args.early_stopping_on_rank0:  # no epoch improves the loss by 10: stops after the second
            callbacks.append(tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10))
    model.fit(data, epochs=args.epochs, verbose=2 if hvd.rank() == 0 else 0, callbacks=callbacks)
    print(f"WEIGHTS rank{hvd.rank()} {[float(abs(w).sum()) for w in model.get_weights()]}")
    if hvd.rank() == 0:
        # Horovod's allreduce ops live in the optimizer, which serving does not need.
        model.save(os.path.join(os.environ["SM_MODEL_DIR"], "1"), include_optimizer=False)


if __name__ == "__main__":
    main()
