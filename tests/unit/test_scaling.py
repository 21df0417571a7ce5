"""The prediction of whether more hosts pay (trainer.plan.scaling), from given measurements."""
import pytest

from trainer.plan import scaling

BATCH = 256
ONE_HOST = 50_000.0  # samples/s: a step of 5.12 ms
NO_BYTES = scaling.Exchange(seconds=0.0, dense_bytes=0, sparse_bytes=0)


@pytest.mark.parametrize("hosts, exchange, instance_type, samples_per_sec, network", [
    # Free exchange: the ideal.
    (2, NO_BYTES, "local", 100_000.0, 0.0),
    (4, NO_BYTES, "local", 200_000.0, 0.0),
    # The exchange as long as the compute: each host at half speed, H/2 the one host's.
    (2, scaling.Exchange(BATCH / ONE_HOST, 0, 0), "local", 50_000.0, 0.0),
    # Simulated hosts: loopback, already in the probe's seconds; no wire time.
    (2, scaling.Exchange(0.0, 10**9, 10**9), "local", 100_000.0, 0.0),
    # 2 hosts on 2.5 Gbit/s: 1 MB dense all-reduced (1 MB each way) and 0.5 MB of rows
    # gathered = 1.5e6 bytes = 4.8 ms on the wire, after a 5.12 ms step.
    (2, scaling.Exchange(0.0, 1_000_000, 500_000), "ml.c5.2xlarge", 2 * BATCH / (BATCH / ONE_HOST + 0.0048), 0.0048),
    # 4 hosts: 1.5 MB of dense (2 x 3/4) and 3 x 0.5 MB of rows = 3e6 bytes = 9.6 ms.
    (4, scaling.Exchange(0.0, 1_000_000, 500_000), "ml.c5.2xlarge", 4 * BATCH / (BATCH / ONE_HOST + 0.0096), 0.0096),
    # A bandwidth the table lacks: the wire left out, and said so (None).
    (2, scaling.Exchange(0.001, 1_000_000, 0), "ml.x9.huge", 2 * BATCH / (BATCH / ONE_HOST + 0.001), None),
])
def test_samples_per_sec_of_hosts_is_a_batch_each_per_step_of_compute_and_exchange(
        hosts, exchange, instance_type, samples_per_sec, network):
    prediction = scaling.predict(hosts, BATCH, ONE_HOST, exchange, instance_type, None)
    assert prediction.samples_per_sec == pytest.approx(samples_per_sec)
    assert prediction.network_seconds_per_step == (None if network is None else pytest.approx(network))
    assert prediction.speedup == pytest.approx(samples_per_sec / ONE_HOST)


def test_samples_per_dollar_pay_each_host_s_price():
    prediction = scaling.predict(2, BATCH, ONE_HOST, scaling.Exchange(BATCH / ONE_HOST / 3, 0, 0), "local", 0.408)
    assert prediction.speedup == pytest.approx(1.5)
    assert prediction.one_host_samples_per_dollar == pytest.approx(ONE_HOST * 3600 / 0.408)
    assert prediction.samples_per_dollar == pytest.approx(1.5 * ONE_HOST * 3600 / (2 * 0.408))
    assert "a sample costs 1.33x what it costs on one host" in prediction.verdict()
    assert prediction.to_dict()["samples_per_dollar"] == round(prediction.samples_per_dollar)


def test_no_price_no_samples_per_dollar():
    prediction = scaling.predict(2, BATCH, ONE_HOST, NO_BYTES, "local", None)
    assert prediction.samples_per_dollar is None and prediction.one_host_samples_per_dollar is None


@pytest.mark.parametrize("exchange_over_compute, pays", [
    (0.0, True),  # 2.00x
    (0.6, True),  # 1.25x
    (0.7, False),  # 1.18x: below PAYS_FROM_SPEEDUP
    (1.0, False),  # 1.00x
    (3.0, False),  # 0.50x: slower than one host
])
def test_the_verdict_says_plainly_when_hosts_train_no_faster_than_one(exchange_over_compute, pays):
    exchange = scaling.Exchange(exchange_over_compute * BATCH / ONE_HOST, 0, 0)
    verdict = scaling.predict(2, BATCH, ONE_HOST, exchange, "local", None).verdict()
    assert verdict.startswith("2 hosts with horovod: predicted ")
    assert ("no faster than one host" in verdict) is not pays
    assert ("Train on one host" in verdict) is not pays


def test_the_network_table_covers_every_cpu_instance_type_with_a_price():
    from trainer.pricing import TRAINING_PRICE_PER_HOUR

    cpu_types = {name for name in TRAINING_PRICE_PER_HOUR if name.startswith(("ml.m5.", "ml.c5."))}
    assert cpu_types == set(scaling.BASELINE_NETWORK_GBPS)


# Local SGD: every trainable variable (4 MB here) all-reduced once every 16 steps.
AVERAGED = scaling.Exchange(seconds=0.004, dense_bytes=1_000_000, sparse_bytes=500_000, average_seconds=0.016,
                            variable_bytes=4_000_000)


@pytest.mark.parametrize("mode, hosts, every, sent", [
    ("horovod", 2, 16, 1_000_000 + 500_000),              # every step, whatever average_every says
    ("horovod", 4, 1, 1.5 * 1_000_000 + 3 * 500_000),
    ("local_sgd", 2, 16, 4_000_000 / 16),                  # 2(H-1)/H = 1 of the model, over 16 steps
    ("local_sgd", 4, 16, 1.5 * 4_000_000 / 16),
    ("local_sgd", 2, 1, 4_000_000),
])
def test_bytes_sent_per_step(mode, hosts, every, sent):
    assert scaling.bytes_sent_per_step(mode, hosts, AVERAGED, every) == pytest.approx(sent)


def test_local_sgd_pays_its_average_once_every_average_every_steps():
    horovod = scaling.predict(2, BATCH, ONE_HOST, AVERAGED, "ml.c5.2xlarge", None)
    local = scaling.predict(2, BATCH, ONE_HOST, AVERAGED, "ml.c5.2xlarge", None, "local_sgd", 16)
    assert local.network_seconds_per_step == pytest.approx(4_000_000 / 16 * 8 / 2.5e9)
    assert local.samples_per_sec == pytest.approx(2 * BATCH / (BATCH / ONE_HOST + 0.016 / 16 + 0.0008))
    assert horovod.samples_per_sec == pytest.approx(2 * BATCH / (BATCH / ONE_HOST + 0.004 + 0.0048))
    assert local.to_dict()["mode"] == "local_sgd" and local.verdict().startswith("2 hosts with local_sgd")


@pytest.mark.parametrize("hp", [{}, {"feature_size": "1000", "embedding_size": "4", "deep_layers": "32,16",
                                     "field_size": "5", "batch_size": "64"}])
def test_the_built_in_models_bytes_are_its_variables_and_one_steps_gradients(hp):
    """Against the real model: its trainable variables, and the gradients of a step on a batch
    (the embedding's as rows and int64 ids, as Horovod all-gathers them)."""
    import tensorflow as tf

    from trainer.contract.hyperparameters import parse_hyperparameters
    from trainer.models.deepfm import model_from_hyperparameters

    parsed = parse_hyperparameters(hp)
    model = model_from_hyperparameters(parsed)
    shape = (parsed.batch_size, parsed.field_size)
    features = {"ids": tf.zeros(shape, tf.int64), "values": tf.ones(shape)}
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(features, training=True))
    gradients = tape.gradient(loss, model.trainable_variables)
    size = lambda t: int(tf.size(t)) * t.dtype.size  # noqa: E731
    expected = scaling.deepfm_exchange(parsed)
    assert expected.variable_bytes == sum(size(v) for v in model.trainable_variables)
    assert expected.dense_bytes == sum(size(g) for g in gradients if not isinstance(g, tf.IndexedSlices))
    assert expected.sparse_bytes == sum(size(g.values) + size(tf.cast(g.indices, tf.int64)) for g in gradients
                                        if isinstance(g, tf.IndexedSlices))


def _job(hosts=2, gpus=0, hp=None, hooks=None):
    import dataclasses

    from test_planner import job

    from trainer.contract.user_code import EntryPoint

    the_job = job(hosts=hosts, gpus=gpus, hp=hp)
    return the_job if hooks is None else dataclasses.replace(
        the_job, entry_point=EntryPoint("hooks.py", "/opt/ml/code", "hooks", "hooks", hooks))


@pytest.mark.parametrize("the_job, sends_less", [
    (_job(), True),                                                       # defaults: 0.29 MB against 0.92 MB
    (_job(hosts=4), True),
    (_job(hp={"feature_size": "400000"}), False),                        # 0.93 MB against 0.92 MB
    (_job(hp={"feature_size": "400000", "average_every_steps": "32"}), True),
    (_job(hp={"feature_size": "10000000"}), False),                      # 22.5 MB a step
    (_job(hosts=1), False),
    (_job(gpus=1), False),
    (_job(hooks=("model_fn",)), False),                                 # its size is not known before it is built
    (_job(hooks=("parse_fn",)), True),                                  # the built-in DeepFM still
    (_job(hp={"user_module": "my_hooks"}), False),
])
def test_local_sgd_suits_where_averaging_the_model_sends_less_than_horovods_steps(the_job, sends_less):
    assert bool(scaling.local_sgd_sends_less(the_job)) is sends_less
