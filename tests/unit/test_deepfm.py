"""DeepFM's FM term against NumPy, the model's shape, and sparse optimizer updates."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.models.deepfm import FactorizationMachine, build_deepfm
from trainer.models.optimizers import LazyAdam, make_optimizer


def fm_reference(weights, vectors, values):
    """Factorization machine by its definition: pairwise dot products, no algebraic trick."""
    batch, fields, _ = vectors.shape
    out = np.zeros((batch, 1))
    for b in range(batch):
        out[b, 0] = sum(weights[b, f] * values[b, f] for f in range(fields))
        for i in range(fields):
            for j in range(i + 1, fields):
                out[b, 0] += vectors[b, i] @ vectors[b, j] * values[b, i] * values[b, j]
    return out


def test_fm_term_matches_numpy():
    rng = np.random.default_rng(0)
    weights, vectors, values = rng.normal(size=(4, 7)), rng.normal(size=(4, 7, 3)), rng.random((4, 7))
    got = FactorizationMachine()([tf.constant(weights), tf.constant(vectors), tf.constant(values)])
    np.testing.assert_allclose(got.numpy(), fm_reference(weights, vectors, values), rtol=1e-6)


def test_model_is_fm_plus_mlp_on_one_table():
    model = build_deepfm(field_size=5, feature_size=100, embedding_size=4, deep_layers=[8, 4], dropout=[0.5],
                         l2_reg=1e-3, seed=1)
    tables = [w for w in model.weights if "embedding" in w.name]
    assert len(tables) == 1 and tables[0].shape == (100, 5)  # [first-order weight, 4 factors] per id
    ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    values = np.ones((2, 5), np.float32)
    probability = model({"ids": ids, "values": values}, training=False).numpy()
    assert probability.shape == (2, 1) and np.all((probability > 0) & (probability < 1))
    assert len(model.losses) == 1 + 3  # L2 of the rows looked up, plus the three dense kernels

    # The output is sigmoid(FM + MLP): rebuild the FM part from the table and compare.
    table = tables[0].numpy()
    rows = table[ids]
    fm = fm_reference(rows[:, :, 0], rows[:, :, 1:], values)
    deep_input = (rows[:, :, 1:] * values[:, :, None]).reshape(2, -1)
    hidden = deep_input
    for name in ("deep_0", "deep_1"):
        kernel, bias = model.get_layer(name).get_weights()
        hidden = np.maximum(hidden @ kernel + bias, 0)
    kernel, bias = model.get_layer("deep_out").get_weights()
    expected = 1 / (1 + np.exp(-(fm + hidden @ kernel + bias)))
    np.testing.assert_allclose(probability, expected, rtol=1e-4)


@pytest.mark.parametrize("name", ["adam", "adagrad", "ftrl", "sgd", "momentum"])
def test_optimizers_touch_only_the_rows_of_the_batch(name):
    model = build_deepfm(3, 1000, 4, [8], [0.0], 1e-4, seed=0)
    optimizer = make_optimizer(name, 0.01)
    model.compile(optimizer=optimizer, loss="binary_crossentropy")
    table = model.get_layer("embedding").table
    before = table.numpy().copy()
    ids = np.array([[1, 2, 3], [3, 4, 5]], np.int64)
    model.fit({"ids": ids, "values": np.ones((2, 3), np.float32)}, np.array([[1.0], [0.0]]), epochs=2, verbose=0)
    changed = np.flatnonzero(np.any(table.numpy() != before, axis=1))
    assert changed.tolist() == [1, 2, 3, 4, 5]
    for slot in optimizer.get_slot_names():
        values = optimizer.get_slot(table, slot).numpy()
        untouched = np.delete(values, [1, 2, 3, 4, 5], axis=0)
        assert np.all(untouched == untouched[0]), slot  # still at their initial value


# Lazy Adam keeps a table's moments apart (m, v) or side by side in one slot (mv) when the
# table has at least `fused_rows` rows: the same updates either way.
LAYOUTS = {"moments apart": 65536, "moments side by side": 1}


def moment_m(optimizer, var):
    if "mv" in optimizer.get_slot_names():
        return optimizer.get_slot(var, "mv").numpy()[:, :var.shape[1]]
    return optimizer.get_slot(var, "m").numpy()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lazy_adam_matches_adam_on_the_rows_it_updates(layout):
    """On rows present in every step, lazy Adam is exactly Adam."""
    initial = np.random.default_rng(0).normal(size=(6, 2)).astype(np.float32)
    rows = [1, 4]
    lazy_var, dense_var = tf.Variable(initial), tf.Variable(initial)
    lazy, dense = LazyAdam(0.1, fused_rows=LAYOUTS[layout]), tf.keras.optimizers.legacy.Adam(0.1)
    for step in range(3):
        grad_rows = tf.constant(np.full((2, 2), step + 1.0, np.float32))
        lazy.apply_gradients([(tf.IndexedSlices(grad_rows, tf.constant(rows), tf.constant([6, 2])), lazy_var)])
        dense_grad = np.zeros((6, 2), np.float32)
        dense_grad[rows] = grad_rows.numpy()
        dense.apply_gradients([(tf.constant(dense_grad), dense_var)])
    np.testing.assert_allclose(lazy_var.numpy()[rows], dense_var.numpy()[rows], rtol=1e-5)
    untouched = [0, 2, 3, 5]
    np.testing.assert_array_equal(lazy_var.numpy()[untouched], initial[untouched])
    np.testing.assert_allclose(moment_m(lazy, lazy_var)[rows], dense.get_slot(dense_var, "m").numpy()[rows],
                               rtol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lazy_adam_on_a_dense_gradient_is_adam(layout):
    initial = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    lazy_var, dense_var = tf.Variable(initial), tf.Variable(initial)
    lazy, dense = LazyAdam(0.05, fused_rows=LAYOUTS[layout]), tf.keras.optimizers.legacy.Adam(0.05)
    for step in range(3):
        grad = tf.constant(np.random.default_rng(step).normal(size=(4, 3)).astype(np.float32))
        lazy.apply_gradients([(grad, lazy_var)])
        dense.apply_gradients([(grad, dense_var)])
    np.testing.assert_allclose(lazy_var.numpy(), dense_var.numpy(), rtol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lazy_adam_sums_repeated_ids(layout):
    var = tf.Variable(np.zeros((3, 1), np.float32))
    optimizer = LazyAdam(0.1, fused_rows=LAYOUTS[layout])
    optimizer.apply_gradients([(tf.IndexedSlices(tf.constant([[1.0], [1.0]]), tf.constant([2, 2]),
                                                 tf.constant([3, 1])), var)])
    assert moment_m(optimizer, var)[2, 0] == pytest.approx(0.1 * 2.0)  # (1 - beta_1) * (1 + 1)
    assert var.numpy()[2, 0] == pytest.approx(-0.1, rel=1e-3)

@pytest.mark.parametrize("rate", [0.5, 0.25, 0.0])
def test_byte_dropout_drops_its_rate_and_keeps_the_expectation(rate):
    from trainer.models.deepfm import ByteDropout

    layer = ByteDropout(rate)
    inputs = tf.ones([64, 1000])
    dropped = layer(inputs, training=True).numpy()
    assert dropped.shape == (64, 1000)
    assert abs(np.mean(dropped == 0) - rate) < 0.01  # 64,000 units: the rate within 1%
    assert abs(dropped.mean() - 1.0) < 0.02  # the kept ones scaled by 1 / (1 - rate)
    np.testing.assert_array_equal(layer(inputs, training=False).numpy(), inputs.numpy())  # serving: identity
    assert ByteDropout.from_config(layer.get_config()).rate == rate


def test_the_fm_gradient_written_out_is_automatic_differentiation_s():
    from trainer.models.deepfm import second_order

    scaled = tf.constant(np.random.default_rng(2).normal(size=(4, 7, 3)), tf.float32)
    upstream = tf.constant(np.random.default_rng(3).normal(size=(4, 1)), tf.float32)

    def by_autodiff(s):
        total = tf.reduce_sum(s, axis=1)
        return 0.5 * tf.reduce_sum(tf.square(total) - tf.reduce_sum(tf.square(s), axis=1), axis=1, keepdims=True)

    grads = []
    for function in (second_order, by_autodiff):
        with tf.GradientTape() as tape:
            tape.watch(scaled)
            out = function(scaled)
        grads.append(tape.gradient(out, scaled, output_gradients=upstream).numpy())
    np.testing.assert_allclose(second_order(scaled).numpy(), by_autodiff(scaled).numpy(), rtol=1e-6)
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)
