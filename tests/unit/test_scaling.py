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
    assert verdict.startswith("2 hosts: predicted ")
    assert ("no faster than one host" in verdict) is not pays
    assert ("Train on one host" in verdict) is not pays


def test_the_network_table_covers_every_cpu_instance_type_with_a_price():
    from trainer.pricing import TRAINING_PRICE_PER_HOUR

    cpu_types = {name for name in TRAINING_PRICE_PER_HOUR if name.startswith(("ml.m5.", "ml.c5."))}
    assert cpu_types == set(scaling.BASELINE_NETWORK_GBPS)
