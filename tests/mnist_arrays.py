"""Arrays of the shapes and types of the MNIST files in AWS's TensorFlow toolkit tests,
generated (the images' left half brighter or darker decides the label, so a model learns):
`data/{train,test}/{x,y}_{train,test}.npy` (uint8 images 28x28, uint8 labels) and
`data-distributed/{train,eval}_{data,labels}.npy` (float32 rows of 784, int32 labels)."""
from __future__ import annotations

import os

import numpy as np

ROWS = 1000


def _images_and_labels(seed: int) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    images = generator.integers(0, 256, size=(ROWS, 28, 28), dtype=np.uint8)
    labels = (images[:, :, :14].mean(axis=(1, 2)) > images[:, :, 14:].mean(axis=(1, 2))).astype(np.uint8) * 9
    return images, labels


def write_mnist_arrays(folder) -> dict[str, str]:
    """{"data": its folder, "data-distributed": its folder}, written under `folder`."""
    folders = {name: os.path.join(str(folder), name) for name in ("data", "data-distributed")}
    for split, seed in (("train", 1), ("test", 2)):
        os.makedirs(os.path.join(folders["data"], split), exist_ok=True)
        images, labels = _images_and_labels(seed)
        np.save(os.path.join(folders["data"], split, f"x_{split}.npy"), images)
        np.save(os.path.join(folders["data"], split, f"y_{split}.npy"), labels)
    os.makedirs(folders["data-distributed"], exist_ok=True)
    for split, seed in (("train", 3), ("eval", 4)):
        images, labels = _images_and_labels(seed)
        np.save(os.path.join(folders["data-distributed"], f"{split}_data.npy"),
                images.reshape(ROWS, 784).astype(np.float32))
        np.save(os.path.join(folders["data-distributed"], f"{split}_labels.npy"), labels.astype(np.int32))
    return folders
