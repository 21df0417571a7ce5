"""Starting from a checkpoint or a SavedModel, for real on a small Keras model
(trainer.training.saving): resume, warm start, a damaged checkpoint set aside, another shape
refused, another model's weights refused."""
import os

import numpy as np
import pytest
import tensorflow as tf

from trainer.contract.checkpoint_folder import checkpoints_in
from trainer.contract.job import Channel
from trainer.errors import JobError
from trainer.models.optimizers import build_optimizer_state
from trainer.plan.start import Source, choose_start
from trainer.training.saving import Checkpoints, export_saved_model, weights_fingerprint

SHAPE = {"feature_size": 10, "field_size": 3, "embedding_size": 4, "deep_layers": [4]}


def model(width=4, extra_layer=False):
    inputs = tf.keras.Input((3,))
    hidden = tf.keras.layers.Dense(3, name="pre")(inputs) if extra_layer else inputs
    outputs = tf.keras.layers.Dense(1, name="out")(tf.keras.layers.Dense(width, name="hidden")(hidden))
    built = tf.keras.Model(inputs, outputs)
    built.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
    build_optimizer_state(built.optimizer, built.trainable_variables)
    return built


def trained(job, directory, epochs=2, shape=SHAPE, width=4):
    """A job's model trained `epochs` times one step, a checkpoint after each."""
    keras_model = model(width)
    saved = Checkpoints(keras_model, str(directory), 3, None, {"job": job, "model": shape, "optimizer": "adam"})
    for epoch in range(epochs):
        keras_model.train_on_batch(np.ones((4, 3)), np.ones((4, 1)))
        saved.epoch.assign(epoch + 1)
        saved.save(int(keras_model.optimizer.iterations.numpy()))
    return keras_model, saved


def starting(job, directory, shape=SHAPE, **model_options):
    """Job `job`'s model and checkpoints, and its start as the plan decides it."""
    keras_model = model(**model_options)
    saved = Checkpoints(keras_model, str(directory), 3, None, {"job": job, "model": shape, "optimizer": "adam"})
    return keras_model, saved, choose_start(checkpoints_in(str(directory)), job, "auto", None, str(directory))


def test_a_restart_resumes_its_own_and_numbers_on(tmp_path):
    first, _ = trained("a", tmp_path)
    again, saved, start = starting("a", tmp_path)
    used = saved.begin(start)
    assert used.resume and used.path == str(tmp_path / "ckpt-2")
    assert int(saved.epoch) == 2 and int(again.optimizer.iterations) == 2
    assert weights_fingerprint(again) == weights_fingerprint(first)
    assert saved.number_offset == 0


def test_a_new_job_warm_starts_from_step_0_and_numbers_after_the_other_s(tmp_path):
    first, _ = trained("a", tmp_path)
    today, saved, start = starting("b", tmp_path)
    used = saved.begin(start)
    assert not used.resume and used.job == "a"
    assert int(saved.epoch) == 0 and int(today.optimizer.iterations) == 0  # its own epochs, from step 0
    assert weights_fingerprint(today) == weights_fingerprint(first)
    today.train_on_batch(np.ones((4, 3)), np.ones((4, 1)))
    saved.save(1)
    assert [(r.number, r.job, r.step) for r in checkpoints_in(str(tmp_path))][0] == (3, "b", 1)


@pytest.mark.parametrize("damage", ["index cut short", "data cut short"])
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_older_one_used(tmp_path, damage):
    trained("a", tmp_path)
    suffix = ".index" if damage == "index cut short" else ".data-00000-of-00001"
    path = str(tmp_path / f"ckpt-2{suffix}")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    _, saved, start = starting("a", tmp_path)
    used = saved.begin(start)
    assert used.path == str(tmp_path / "ckpt-1") and int(saved.epoch) == 1
    assert sorted(os.listdir(tmp_path / "set-aside")) == ["ckpt-2.data-00000-of-00001", "ckpt-2.index", "ckpt-2.json"]


def test_no_intact_checkpoint_names_each(tmp_path):
    trained("a", tmp_path)
    for number in (1, 2):
        with open(tmp_path / f"ckpt-{number}.index", "r+b") as f:
            f.truncate(10)
    _, saved, start = starting("a", tmp_path)
    with pytest.raises(JobError, match=rf"no checkpoint or model to start from can be read \(checkpoint folder "
                                       rf"{tmp_path}\); tried: {tmp_path}/ckpt-2: .+; {tmp_path}/ckpt-1: "):
        saved.begin(start)


def test_another_shape_is_refused_naming_both_values(tmp_path):
    trained("a", tmp_path)
    _, saved, start = starting("b", tmp_path, shape={**SHAPE, "deep_layers": [8]}, width=8)
    with pytest.raises(JobError, match=rf"checkpoint {tmp_path}/ckpt-2 holds a model of another shape "
                                       r"\(deep_layers=4 there, 8 here\)"):
        saved.begin(start)


def test_a_hooks_model_of_another_shape_is_named_by_its_variable(tmp_path):
    trained("a", tmp_path, shape=None)
    _, saved, start = starting("b", tmp_path, shape=None, width=8)
    with pytest.raises(JobError, match=rf"checkpoint {tmp_path}/ckpt-2 holds a model of another shape: .*hidden"):
        saved.begin(start)


def test_a_saved_model_warm_starts_the_weights_and_another_model_s_is_refused(tmp_path):
    first, _ = trained("a", tmp_path / "a-checkpoints")
    export_saved_model(first, str(tmp_path / "export"), 1, record={"job": "a", "model": SHAPE, "epoch": 2})
    channel = Channel("model", "File", "FullyReplicated", "", str(tmp_path / "export"))
    today, saved, _ = starting("b", tmp_path / "b-checkpoints")
    start = choose_start((), "b", "model", Source("model", channel.path, resume=False), str(tmp_path / "b-checkpoints"))
    assert saved.begin(start, channel).kind == "model"
    assert weights_fingerprint(today) == weights_fingerprint(first) and int(today.optimizer.iterations) == 0
    _, saved, _ = starting("c", tmp_path / "c-checkpoints", shape=None, extra_layer=True)
    with pytest.raises(JobError, match="channel 'model' .* (is not this model's|holds a model of another shape)"):
        saved.begin(start, channel)

