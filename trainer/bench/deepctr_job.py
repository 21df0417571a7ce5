"""DeepCTR's DeepFM trained the way its users train it, for `trainer bench peer`.

Runs in the DeepCTR benchmark environment (bench-envs/deepctr.txt) with the project on
PYTHONPATH: it reads the same TFRecord files as the project's run, label-encodes each
categorical field (DeepCTR wants one vocabulary per field, as in its Criteo example), passes
the 13 continuous fields as dense features, and trains with `model.fit` on NumPy arrays in
memory (its documented input). The model matches the project's defaults where DeepCTR has
the same knob (embedding 8, MLP 256-128-64, dropout 0.5, batch 256, the optimizer and
learning rate given: Keras' own, as DeepCTR's users compile it);
regularisation is DeepCTR's default; thread and OpenMP settings are the ones the project's
job gets on this machine. Speed is timed as the project times its own: from the
end of each epoch's first step to the end of its last; eval AUC after every epoch. Prints
one JSON line.

    python -m trainer.bench.deepctr_job --train DIR --eval DIR --epochs 3 --optimizer adam --learning-rate 0.001
"""
from __future__ import annotations

import argparse
import glob
import json
import os

from trainer.data.records import CRITEO_CONTINUOUS

# Keras' optimizers by the project's names (Adagrad's first accumulator as the project's).
OPTIMIZERS = {
    "adam": lambda tf, rate: tf.keras.optimizers.Adam(rate),
    "adagrad": lambda tf, rate: tf.keras.optimizers.Adagrad(rate, initial_accumulator_value=0.1),
    "ftrl": lambda tf, rate: tf.keras.optimizers.Ftrl(rate),
    "sgd": lambda tf, rate: tf.keras.optimizers.SGD(rate),
    "momentum": lambda tf, rate: tf.keras.optimizers.SGD(rate, momentum=0.95),
}


def read_records(folder: str, field_size: int):
    import numpy as np
    import tensorflow as tf

    from trainer.data.records import batch_parser

    files = sorted(glob.glob(os.path.join(folder, "*")))
    dataset = tf.data.TFRecordDataset(files).batch(4096).map(batch_parser("tfrecord", field_size))
    ids, values, labels = [], [], []
    for features, label in dataset:
        ids.append(features["ids"].numpy())
        values.append(features["values"].numpy())
        labels.append(label.numpy())
    return np.concatenate(ids), np.concatenate(values), np.concatenate(labels)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--eval", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--field-size", type=int, default=39)
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adam")
    parser.add_argument("--learning-rate", type=float, default=0.001)
    args = parser.parse_args()

    from trainer.bench.common import apply_job_cpu_settings
    from trainer.measure.rates import StepClock

    apply_job_cpu_settings()  # the same thread and OpenMP settings as the project's job gets here
    import numpy as np
    import tensorflow as tf
    from deepctr.feature_column import DenseFeat, SparseFeat, get_feature_names
    from deepctr.models import DeepFM

    train_ids, train_values, train_labels = read_records(args.train, args.field_size)
    eval_ids, eval_values, eval_labels = read_records(args.eval, args.field_size)
    columns, train_x, eval_x = [], {}, {}
    for field in range(args.field_size):
        name = f"f{field}"
        if field < CRITEO_CONTINUOUS:
            columns.append(DenseFeat(name, 1))
            train_x[name], eval_x[name] = train_values[:, field], eval_values[:, field]
        else:  # a LabelEncoder per field, fitted on all rows, as DeepCTR's examples do
            vocabulary, codes = np.unique(np.concatenate([train_ids[:, field], eval_ids[:, field]]),
                                          return_inverse=True)
            columns.append(SparseFeat(name, vocabulary_size=len(vocabulary), embedding_dim=8))
            train_x[name], eval_x[name] = codes[:len(train_ids)], codes[len(train_ids):]

    tf.keras.utils.set_random_seed(42)
    model = DeepFM(columns, columns, dnn_hidden_units=(256, 128, 64), dnn_dropout=0.5, task="binary")
    model.compile(OPTIMIZERS[args.optimizer](tf, args.learning_rate), "binary_crossentropy")

    names = get_feature_names(columns)
    x, eval_x = {name: train_x[name] for name in names}, {name: eval_x[name] for name in names}
    auc_by_epoch = []

    class EvaluateEachEpoch(tf.keras.callbacks.Callback):
        """Eval AUC after every epoch, as the project's job logs it (after the clock's window)."""

        def on_epoch_end(self, epoch, logs=None):
            auc = tf.keras.metrics.AUC(num_thresholds=1000)
            auc.update_state(eval_labels, self.model.predict(eval_x, batch_size=4096, verbose=0))
            auc_by_epoch.append(float(auc.result()))

    clock = StepClock()
    model.fit(x, train_labels, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=0,
              callbacks=[clock.callback, EvaluateEachEpoch()])
    print(json.dumps({"samples_per_sec": clock.samples_per_sec(args.batch_size), "eval_auc": auc_by_epoch[-1],
                      "eval_auc_by_epoch": auc_by_epoch, "parameters": int(model.count_params())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
