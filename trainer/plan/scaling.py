"""Whether more hosts pay: a job's samples/s and samples per dollar on its hosts against one
host of the same type, predicted from short measurements (`trainer plan --probe`,
trainer.measure.probe): one host's training step, and the same step as the mode runs it on two
hosts, each on CPUs of its own, exchanging with each other (Horovod's and multi-worker
mirrored's gradients every step, local SGD's average of the model every
`average_every_steps`, parameter servers' reads and updates).

A step on H hosts is one host's step, plus what the exchange added to the two ranks' step
(on the CPUs that also compute it), plus the bytes the hosts send each other over the
instance type's network. Each host trains a batch a step, so H hosts train H batches in
that time. A job's first pass also reads and parses its files (later epochs train from the
input's cache): that time is the same on every host, and is added a step. The hosts pay H
times one host's price, so a sample costs 1/efficiency times as much.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainer.pricing import Price

# Sustained (baseline) network bandwidth in Gbit/s of the CPU instance types in
# trainer.pricing's table, from EC2's instance type pages: the smaller sizes burst to "up to
# 10 Gbps" for minutes only, and a training job sends all the time.
BASELINE_NETWORK_GBPS = {
    "ml.m5.large": 0.75, "ml.m5.xlarge": 1.25, "ml.m5.2xlarge": 2.5, "ml.m5.4xlarge": 5.0,
    "ml.m5.12xlarge": 12.0, "ml.m5.24xlarge": 25.0,
    "ml.c5.xlarge": 1.25, "ml.c5.2xlarge": 2.5, "ml.c5.4xlarge": 5.0, "ml.c5.9xlarge": 12.0,
    "ml.c5.18xlarge": 25.0,
}

# Below this speed-up the hosts train no faster than one, within the prediction's error
# (docs/modes-measured.md, "Will more hosts pay?").
PAYS_FROM_SPEEDUP = 1.2


@dataclass(frozen=True)
class Compute:
    """One host's training step, as measured on the probing host."""

    cached_samples_per_sec: float  # on batches from the input's cache: the step alone
    first_pass_samples_per_sec: float  # reading and parsing the job's files as it goes
    first_pass_share: float  # of the job's steps that read its files: 1/epochs when the input is cached, else 1

    def parse_seconds_per_step(self, batch_size: int) -> float:
        """What reading the files adds to a step, on average over the job's epochs."""
        extra = batch_size / self.first_pass_samples_per_sec - batch_size / self.cached_samples_per_sec
        return self.first_pass_share * max(0.0, extra)

    def one_host_samples_per_sec(self, batch_size: int) -> float:
        return batch_size / (batch_size / self.cached_samples_per_sec + self.parse_seconds_per_step(batch_size))


@dataclass(frozen=True)
class Exchange:
    """A mode's step on two ranks, as measured on the probing host, and the bytes it sends."""

    step_seconds: float  # each rank's step, on batches from the cache, exchange included
    alone_seconds: float  # one rank's step alone, on as many CPUs: the step without the exchange
    dense_bytes: int  # all-reduced each step (every rank sends and receives about twice this)
    sparse_bytes: int  # each rank's embedding rows and ids, all-gathered each step
    variable_bytes: int = 0  # every trainable variable: what local SGD's average all-reduces

    @property
    def seconds_per_step(self) -> float:
        """What the exchange adds to a step, on the CPUs that also compute it. Never below
        nothing: two ranks measured faster than one alone is the probing machine's noise."""
        return max(0.0, self.step_seconds - self.alone_seconds)


# How a mode's hosts exchange what they learn (each mode declares one: Mode.exchange).
GRADIENTS = "gradients"  # every step's gradients all-reduced (dense) and all-gathered (embedding rows)
MODEL_AVERAGES = "model averages"  # every trainable variable averaged every `average_every` steps
SERVER_READS = "server reads"  # each worker reads the variables from parameter servers and sends its gradients


def bytes_sent_per_step(kind: str, hosts: int, exchange: Exchange, average_every: int = 1) -> float:
    """Pure: what each host sends a step with the exchange `kind`. A ring all-reduce sends
    2(H-1)/H of its tensors, an all-gather brings each rank the other H-1 ranks' rows.
    GRADIENTS all-reduce the dense gradients and all-gather the embedding's rows every step;
    MODEL_AVERAGES all-reduce every trainable variable (the whole embedding table too) once
    every `average_every` steps; with SERVER_READS a worker reads the dense variables and its
    batch's embedding rows and sends their gradients back, (H-1)/H of them to other hosts'
    PS tasks (which send as much to the other hosts' workers)."""
    ring = 2 * (hosts - 1) / hosts
    if kind == MODEL_AVERAGES:
        return ring * exchange.variable_bytes / average_every
    if kind == SERVER_READS:
        return ring * (exchange.dense_bytes + exchange.sparse_bytes)
    return ring * exchange.dense_bytes + (hosts - 1) * exchange.sparse_bytes


def deepfm_exchange(hp) -> Exchange:
    """Pure: the built-in DeepFM's bytes (trainer.models.deepfm) from its hyperparameters, as
    float32 variables and int64 ids; no times. The planner compares the modes' bytes with it."""
    rows, width = hp.field_size * hp.batch_size, 1 + hp.embedding_size
    layers = [hp.field_size * hp.embedding_size, *hp.deep_layers, 1]
    dense = sum(units_in * units + units for units_in, units in zip(layers, layers[1:]))
    return Exchange(0.0, 0.0, dense_bytes=4 * dense, sparse_bytes=rows * (4 * width + 8),
                    variable_bytes=4 * (dense + hp.feature_size * width))


@dataclass(frozen=True)
class Prediction:
    hosts: int
    one_host_samples_per_sec: float
    samples_per_sec: float
    network_seconds_per_step: float | None  # None: the instance type's bandwidth is not known
    samples_per_dollar: float | None
    one_host_samples_per_dollar: float | None
    mode: str  # the mode's name

    @property
    def speedup(self) -> float:
        return self.samples_per_sec / self.one_host_samples_per_sec

    @property
    def efficiency(self) -> float:
        return self.speedup / self.hosts

    def verdict(self) -> str:
        head = (f"{self.hosts} hosts with {self.mode}: predicted {self.samples_per_sec:,.0f} samples/s, "
                f"{self.speedup:.2f}x one host's {self.one_host_samples_per_sec:,.0f}")
        cost = f"a sample costs {1 / self.efficiency:.2f}x what it costs on one host"
        if self.speedup < PAYS_FROM_SPEEDUP:
            return (f"{head}: no faster than one host, and {cost}. Train on one host (a larger instance type "
                    "before more instances)")
        return f"{head} ({self.efficiency:.0%} of the ideal {self.hosts}x); {cost}"

    def to_dict(self) -> dict:
        return {"hosts": self.hosts, "mode": self.mode,
                "one_host_samples_per_sec": round(self.one_host_samples_per_sec, 1),
                "samples_per_sec": round(self.samples_per_sec, 1), "speedup": round(self.speedup, 3),
                "efficiency": round(self.efficiency, 3),
                "network_seconds_per_step": (None if self.network_seconds_per_step is None
                                             else round(self.network_seconds_per_step, 6)),
                "samples_per_dollar": _rounded(self.samples_per_dollar),
                "one_host_samples_per_dollar": _rounded(self.one_host_samples_per_dollar),
                "verdict": self.verdict()}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value)


def predict(hosts: int, batch_size: int, compute: Compute, exchange: Exchange, instance_type: str,
            price_per_instance_hour: float | None, mode, average_every: int = 1) -> Prediction:
    """Pure: `hosts` hosts of `instance_type` in data parallelism (`mode`, a Mode whose step on
    two hosts `exchange` measured), with `batch_size` a step on each."""
    one_host = compute.one_host_samples_per_sec(batch_size)
    gbps = BASELINE_NETWORK_GBPS.get(instance_type)
    # Simulated hosts on one machine ("local") exchange over loopback, which the probe measured.
    network = (0.0 if instance_type == "local" else None if gbps is None
               else bytes_sent_per_step(mode.exchange, hosts, exchange, average_every) * 8 / (gbps * 1e9))
    step = (batch_size / compute.cached_samples_per_sec + exchange.seconds_per_step
            + compute.parse_seconds_per_step(batch_size) + (network or 0.0))
    rate = hosts * batch_size / step
    return Prediction(hosts, one_host, rate, network, Price(price_per_instance_hour, hosts, "").samples_per_dollar(rate),
                      Price(price_per_instance_hour, 1, "").samples_per_dollar(one_host), mode.name)
