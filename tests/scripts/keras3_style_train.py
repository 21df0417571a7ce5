"""A script written for Keras 3 that uses only names Keras 2 has too (`keras.Sequential`,
`keras.optimizers.AdamW`, `metrics=["auc"]`, `model.export`): on the 2.14 line it fails inside
Keras 2.14 with an error that does not say why ("'str' object is not callable")."""
import os

import keras
import numpy as np

features = np.random.default_rng(0).random((256, 8), dtype=np.float32)
labels = (features.sum(axis=1) > 4).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=keras.optimizers.AdamW(0.01), loss="binary_crossentropy", metrics=["auc"])
model.fit(features, labels, epochs=1, verbose=2)
model.export(os.path.join(os.environ["SM_MODEL_DIR"], "1"))
