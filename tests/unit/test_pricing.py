"""Samples per dollar: the price of the job's instances, and the arithmetic."""
import pytest

from trainer.pricing import PRICES_AS_OF, price_of


@pytest.mark.parametrize("instance_type, instances, override, per_hour, source", [
    ("ml.c5.2xlarge", 1, None, 0.408, f"built-in table ({PRICES_AS_OF})"),
    ("ml.c5.2xlarge", 3, None, 3 * 0.408, f"built-in table ({PRICES_AS_OF})"),
    ("ml.p3.16xlarge", 2, None, 2 * 28.152, f"built-in table ({PRICES_AS_OF})"),
    ("ml.c5.2xlarge", 2, 0.35, 0.70, "hyperparameter price_per_hour"),  # e.g. another region or spot
    ("local", 1, 1.5, 1.5, "hyperparameter price_per_hour"),
    ("local", 1, None, None, "no price for instance type 'local' (set price_per_hour)"),
    ("ml.x9.mega", 4, None, None, "no price for instance type 'ml.x9.mega' (set price_per_hour)"),
])
def test_price_of_the_jobs_instances(instance_type, instances, override, per_hour, source):
    price = price_of(instance_type, instances, override)
    assert price.per_hour == pytest.approx(per_hour) if per_hour else price.per_hour is None
    assert price.source == source


@pytest.mark.parametrize("per_instance_hour, instances, samples_per_sec, expected", [
    (0.408, 1, 50_000, 50_000 * 3600 / 0.408),
    (0.408, 2, 50_000, 50_000 * 3600 / 0.816),  # two instances cost twice as much an hour
    (None, 1, 50_000, None),  # no price: no figure
    (0.408, 1, 0.0, None),  # nothing measured
])
def test_samples_per_dollar(per_instance_hour, instances, samples_per_sec, expected):
    price = price_of("x", instances, per_instance_hour)
    result = price.samples_per_dollar(samples_per_sec)
    assert result == pytest.approx(expected) if expected else result is None


@pytest.mark.parametrize("groups, override, per_hour, source_has", [
    ((("data", "ml.c5.4xlarge", 2), ("dnn", "ml.p3.2xlarge", 1)), None, 2 * 0.816 + 3.825,
     "2 x ml.c5.4xlarge, 1 x ml.p3.2xlarge"),
    ((("data", "ml.c5.4xlarge", 2), ("dnn", "ml.x9.mega", 1)), None, None, "no price for instance type(s) ml.x9.mega"),
    ((("data", "ml.c5.4xlarge", 2), ("dnn", "ml.p3.2xlarge", 1)), "1.0", 3.0, "hyperparameter price_per_hour"),
])
def test_a_heterogeneous_clusters_price_counts_every_group(groups, override, per_hour, source_has):
    """The data hosts' time is the training's cost too."""
    from trainer.pricing import price_of_job
    from test_groups import job

    price = price_of_job(job(groups, hp={"price_per_hour": override} if override else None))
    assert price.per_hour == pytest.approx(per_hour) if per_hour else price.per_hour is None
    assert source_has in price.source and price.instances == 3
