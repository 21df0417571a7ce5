"""The prediction of whether more hosts pay (trainer.plan.scaling), from given measurements."""
import pytest

from trainer import modes
from trainer.plan import scaling

HOROVOD = modes.get("horovod")

BATCH = 256
ONE_HOST = 50_000.0  # samples/s: a step of 5.12 ms
STEP = BATCH / ONE_HOST
CACHED = scaling.Compute(ONE_HOST, ONE_HOST, 0.5)  # no time to read the files


def two_ranks(step_seconds=STEP, dense=0, sparse=0, variables=0, alone=STEP):
    """Two ranks' step of `step_seconds` (compute and exchange) where one alone takes `alone`,
    and the bytes it sends."""
    return scaling.Exchange(step_seconds, alone, dense_bytes=dense, sparse_bytes=sparse, variable_bytes=variables)


NO_BYTES = two_ranks()


@pytest.mark.parametrize("hosts, exchange, instance_type, samples_per_sec, network", [
    # Two ranks step as fast as one host alone: the ideal.
    (2, NO_BYTES, "local", 100_000.0, 0.0),
    (4, NO_BYTES, "local", 200_000.0, 0.0),
    # The exchange as long as the compute: each host at half speed, H/2 the one host's.
    (2, two_ranks(2 * STEP), "local", 50_000.0, 0.0),
    # Simulated hosts: loopback, already in the probe's seconds; no wire time.
    (2, two_ranks(dense=10**9, sparse=10**9), "local", 100_000.0, 0.0),
    # 2 hosts on 2.5 Gbit/s: 1 MB dense all-reduced (1 MB each way) and 0.5 MB of rows
    # gathered = 1.5e6 bytes = 4.8 ms on the wire, after a 5.12 ms step.
    (2, two_ranks(dense=1_000_000, sparse=500_000), "ml.c5.2xlarge", 2 * BATCH / (STEP + 0.0048), 0.0048),
    # 4 hosts: 1.5 MB of dense (2 x 3/4) and 3 x 0.5 MB of rows = 3e6 bytes = 9.6 ms.
    (4, two_ranks(dense=1_000_000, sparse=500_000), "ml.c5.2xlarge", 4 * BATCH / (STEP + 0.0096), 0.0096),
    # Two ranks measured faster than one host alone (the machine's noise): the ideal, no more.
    (2, two_ranks(0.9 * STEP), "local", 100_000.0, 0.0),
    # Ranks probed on fewer CPUs than a host's (a step of 2 x STEP alone): what the exchange
    # added to their step (STEP / 2) is added to the host's.
    (2, two_ranks(2.5 * STEP, alone=2 * STEP), "local", 2 * BATCH / (1.5 * STEP), 0.0),
    # A bandwidth the table lacks: the wire left out, and said so (None).
    (2, two_ranks(STEP + 0.001, dense=1_000_000), "ml.x9.huge", 2 * BATCH / (STEP + 0.001), None),
])
def test_samples_per_sec_of_hosts_is_a_batch_each_per_step_of_the_two_ranks_and_the_wire(
        hosts, exchange, instance_type, samples_per_sec, network):
    prediction = scaling.predict(hosts, BATCH, CACHED, exchange, instance_type, None, HOROVOD)
    assert prediction.samples_per_sec == pytest.approx(samples_per_sec)
    assert prediction.network_seconds_per_step == (None if network is None else pytest.approx(network))
    assert prediction.speedup == pytest.approx(samples_per_sec / ONE_HOST)


def test_samples_per_dollar_pay_each_host_s_price():
    prediction = scaling.predict(2, BATCH, CACHED, two_ranks(STEP * 4 / 3), "local", 0.408, HOROVOD)
    assert prediction.speedup == pytest.approx(1.5)
    assert prediction.one_host_samples_per_dollar == pytest.approx(ONE_HOST * 3600 / 0.408)
    assert prediction.samples_per_dollar == pytest.approx(1.5 * ONE_HOST * 3600 / (2 * 0.408))
    assert "a sample costs 1.33x what it costs on one host" in prediction.verdict()
    assert prediction.to_dict()["samples_per_dollar"] == round(prediction.samples_per_dollar)


def test_no_price_no_samples_per_dollar():
    prediction = scaling.predict(2, BATCH, CACHED, NO_BYTES, "local", None, HOROVOD)
    assert prediction.samples_per_dollar is None and prediction.one_host_samples_per_dollar is None


@pytest.mark.parametrize("exchange_over_compute, pays", [
    (0.0, True),  # 2.00x
    (0.6, True),  # 1.25x
    (0.7, False),  # 1.18x: below PAYS_FROM_SPEEDUP
    (1.0, False),  # 1.00x
    (3.0, False),  # 0.50x: slower than one host
])
def test_the_verdict_says_plainly_when_hosts_train_no_faster_than_one(exchange_over_compute, pays):
    exchange = two_ranks(STEP * (1 + exchange_over_compute))
    verdict = scaling.predict(2, BATCH, CACHED, exchange, "local", None, HOROVOD).verdict()
    assert verdict.startswith("2 hosts with horovod: predicted ")
    assert ("no faster than one host" in verdict) is not pays
    assert ("Train on one host" in verdict) is not pays


def test_the_network_table_covers_every_cpu_instance_type_with_a_price():
    from trainer.pricing import TRAINING_PRICE_PER_HOUR

    cpu_types = {name for name in TRAINING_PRICE_PER_HOUR if name.startswith(("ml.m5.", "ml.c5."))}
    assert cpu_types == set(scaling.BASELINE_NETWORK_GBPS)


# Local SGD: every trainable variable (4 MB here) all-reduced once every 16 steps.
AVERAGED = two_ranks(STEP + 0.001, dense=1_000_000, sparse=500_000, variables=4_000_000)


@pytest.mark.parametrize("mode, hosts, every, sent", [
    ("horovod", 2, 16, 1_000_000 + 500_000),              # every step, whatever average_every says
    ("horovod", 4, 1, 1.5 * 1_000_000 + 3 * 500_000),
    ("local_sgd", 2, 16, 4_000_000 / 16),                  # 2(H-1)/H = 1 of the model, over 16 steps
    ("local_sgd", 4, 16, 1.5 * 4_000_000 / 16),
    ("local_sgd", 2, 1, 4_000_000),
    ("multi_worker_mirrored", 4, 16, 1.5 * 1_000_000 + 3 * 500_000),  # Horovod's exchange, by TF's collectives
    # Variables read and gradients sent, the share on other hosts' PS tasks: 2(H-1)/H of them.
    ("parameter_server", 2, 16, 1_000_000 + 500_000),
    ("parameter_server", 4, 16, 1.5 * (1_000_000 + 500_000)),
])
def test_bytes_sent_per_step(mode, hosts, every, sent):
    assert scaling.bytes_sent_per_step(modes.get(mode).exchange, hosts, AVERAGED, every) == pytest.approx(sent)


def test_local_sgd_sends_its_average_once_every_average_every_steps():
    horovod = scaling.predict(2, BATCH, CACHED, AVERAGED, "ml.c5.2xlarge", None, HOROVOD)
    local = scaling.predict(2, BATCH, CACHED, AVERAGED, "ml.c5.2xlarge", None, modes.get("local_sgd"), 16)
    assert local.network_seconds_per_step == pytest.approx(4_000_000 / 16 * 8 / 2.5e9)
    assert local.samples_per_sec == pytest.approx(2 * BATCH / (STEP + 0.001 + 0.0008))
    assert horovod.samples_per_sec == pytest.approx(2 * BATCH / (STEP + 0.001 + 0.0048))
    assert local.to_dict()["mode"] == "local_sgd" and local.verdict().startswith("2 hosts with local_sgd")


@pytest.mark.parametrize("cached, first_pass, share, one_host, parse", [
    (50_000.0, 50_000.0, 0.5, 50_000.0, 0.0),                       # parsing costs nothing
    (50_000.0, 25_000.0, 1.0, 25_000.0, STEP),                      # not cached: every epoch parses
    (50_000.0, 25_000.0, 0.5, BATCH / (1.5 * STEP), STEP / 2),      # 2 epochs, cached: half the steps parse
    (50_000.0, 60_000.0, 0.5, 50_000.0, 0.0),                       # noise: the first pass measured faster
])
def test_reading_the_files_adds_to_every_host_s_step_for_the_epochs_that_read_them(
        cached, first_pass, share, one_host, parse):
    compute = scaling.Compute(cached, first_pass, share)
    assert compute.one_host_samples_per_sec(BATCH) == pytest.approx(one_host)
    assert compute.parse_seconds_per_step(BATCH) == pytest.approx(parse)
    prediction = scaling.predict(2, BATCH, compute, NO_BYTES, "local", None, HOROVOD)
    assert prediction.one_host_samples_per_sec == pytest.approx(one_host)
    assert prediction.samples_per_sec == pytest.approx(2 * BATCH / (STEP + parse))


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
