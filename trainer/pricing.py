"""Samples per dollar (P24): the job's samples/sec against what its instances cost an hour.

The built-in prices are SageMaker's On-Demand *training* list prices in us-east-1, USD per
instance-hour, as published in 2024 (https://aws.amazon.com/sagemaker/pricing/). Prices
differ by region and change; the `price_per_hour` hyperparameter (per instance) overrides
the table, and a job on an instance type the table lacks reports no samples per dollar
unless it is given.
"""
from __future__ import annotations

from dataclasses import dataclass

PRICES_AS_OF = "2024, us-east-1, On-Demand training"

TRAINING_PRICE_PER_HOUR = {
    # General purpose
    "ml.m5.large": 0.115, "ml.m5.xlarge": 0.23, "ml.m5.2xlarge": 0.461, "ml.m5.4xlarge": 0.922,
    "ml.m5.12xlarge": 2.765, "ml.m5.24xlarge": 5.53,
    # Compute optimised
    "ml.c5.xlarge": 0.204, "ml.c5.2xlarge": 0.408, "ml.c5.4xlarge": 0.816, "ml.c5.9xlarge": 1.836,
    "ml.c5.18xlarge": 3.672,
    # GPU
    "ml.g4dn.xlarge": 0.736, "ml.g4dn.2xlarge": 0.94, "ml.g4dn.4xlarge": 1.505, "ml.g4dn.8xlarge": 2.72,
    "ml.g4dn.12xlarge": 4.89, "ml.g4dn.16xlarge": 5.44,
    "ml.g5.xlarge": 1.408, "ml.g5.2xlarge": 1.515, "ml.g5.4xlarge": 2.03, "ml.g5.8xlarge": 3.06,
    "ml.g5.12xlarge": 7.09, "ml.g5.24xlarge": 10.18, "ml.g5.48xlarge": 20.36,
    "ml.p3.2xlarge": 3.825, "ml.p3.8xlarge": 14.688, "ml.p3.16xlarge": 28.152,
    "ml.p4d.24xlarge": 37.688,
}


@dataclass(frozen=True)
class Price:
    per_instance_hour: float | None
    instances: int
    source: str  # "hyperparameter", the table's date, or why there is none

    @property
    def per_hour(self) -> float | None:
        return None if self.per_instance_hour is None else self.per_instance_hour * self.instances

    def samples_per_dollar(self, samples_per_sec: float) -> float | None:
        """Samples trained per dollar of instance time: samples/sec x 3600 / (price x count)."""
        if not self.per_hour or not samples_per_sec:
            return None
        return samples_per_sec * 3600 / self.per_hour


def price_of(instance_type: str, instances: int, override: float | None = None) -> Price:
    """Pure: the hourly price of the job's instances."""
    if override is not None:
        return Price(override, instances, "hyperparameter price_per_hour")
    if instance_type in TRAINING_PRICE_PER_HOUR:
        return Price(TRAINING_PRICE_PER_HOUR[instance_type], instances, f"built-in table ({PRICES_AS_OF})")
    return Price(None, instances, f"no price for instance type '{instance_type}' (set price_per_hour)")


def price_of_job(job) -> Price:
    """What the job's instances cost an hour: its one instance type times its hosts, or on
    a heterogeneous cluster every group's type times its hosts (the data hosts' time is the
    training's cost too). Per instance, the average over the job's hosts."""
    override = job.hyperparameters.price_per_hour
    if not job.instance_groups or override is not None:
        return price_of(job.instance_type, len(job.hosts), override)
    groups = [(g, price_of(g.instance_type, len(g.hosts))) for g in job.instance_groups if g.hosts]
    hosts = sum(len(g.hosts) for g, _ in groups)
    unknown = [g.instance_type for g, price in groups if price.per_hour is None]
    if unknown:
        return Price(None, hosts, f"no price for instance type(s) {', '.join(unknown)} (set price_per_hour)")
    total = sum(price.per_hour for _, price in groups)
    listed = ", ".join(f"{len(g.hosts)} x {g.instance_type}" for g, _ in groups)
    return Price(total / hosts, hosts, f"built-in table ({PRICES_AS_OF}): {listed}")
