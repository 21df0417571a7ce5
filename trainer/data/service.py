"""tf.data service for a heterogeneous cluster's data hosts (trainer.planner.data_groups): the
dispatcher and workers they serve, and how a training process reads its batches through them.

TensorFlow's own service does the work: its dispatcher and workers, and `distribute()` on
the training side. What this module adds is the layout the plan decided: the dispatcher on
the first data host, a worker on each, a fixed list of workers (static sharding needs it),
and each training process's own shard split among the workers block by block.
"""
from __future__ import annotations

import logging
import time

from trainer.plan.types import DATA_WORKER_PORT, DISPATCHER_PORT, DataService

log = logging.getLogger("trainer")

# Batches a training process asks the service for ahead of its step (per worker): enough to
# cover a slow worker's turn without holding much memory.
MAX_OUTSTANDING_REQUESTS = 8


def _address(host: str, port: int) -> str:
    """`host:port` as `address:port`, looked up once (trainer.contract.addresses): the dispatcher,
    the workers and the consumers then agree on every worker's address."""
    from trainer.contract.addresses import with_addresses

    return with_addresses({"cluster": {"task": [f"{host}:{port}"]}})["cluster"]["task"][0]


def worker_addresses(service: DataService) -> list[str]:
    """Every data worker's address, in the plan's order: static sharding gives worker i of N
    the blocks i, i + N, ... of each consumer's input."""
    return [_address(host, DATA_WORKER_PORT) for host in service.hosts]


def dispatcher_address(service: DataService) -> str:
    return _address(service.dispatcher, DISPATCHER_PORT)


def serve_data(service: DataService, role: str, host: str) -> None:
    """Run this host's dispatcher (`role` dispatcher) or worker (data_worker) until stopped."""
    import tensorflow as tf

    from trainer.data import parquet

    parquet.register_readers()  # the Parquet reader the pipelines sent here call by name
    data = tf.data.experimental.service
    workers = worker_addresses(service)
    if role == "dispatcher":
        server = data.DispatchServer(data.DispatcherConfig(port=DISPATCHER_PORT, worker_addresses=workers,
                                                           fault_tolerant_mode=False))
        log.info("tf.data service dispatcher on %s:%d for workers %s", host, DISPATCHER_PORT, ", ".join(workers))
    else:
        own = workers[service.hosts.index(host)]
        server = data.WorkerServer(data.WorkerConfig(dispatcher_address=dispatcher_address(service),
                                                     worker_address=own, port=DATA_WORKER_PORT))
        log.info("tf.data service worker %s (worker %d of %d)", own, service.hosts.index(host), len(workers))
    server.start()
    while True:  # until the launcher stops this task (trainer.launch.data_group)
        time.sleep(3600)


def split_among_workers(blocks):
    """The blocks of records a training process reads, each to one data worker in turn
    (tf.data's shard hint: on the service, worker i of N keeps blocks i, i + N, ...)."""
    import tensorflow as tf

    hint = tf.data.experimental.SHARD_HINT
    return blocks.shard(hint, hint)


def read_through(batches, service: DataService, batch_size: int):
    """`batches`, run on the data workers and read from them: each iteration (an epoch's
    pass, or the count of one) is a job of its own on the service. Its batches come back
    whole but for each worker's last; rebatching gives the process its own examples in as
    many batches of the same size as without a data group, so an epoch's steps are the same.
    Uncompressed: compressing would put the work back on the training host's CPUs."""
    import tensorflow as tf

    data = tf.data.experimental.service
    distributed = batches.apply(data.distribute(processing_mode=data.ShardingPolicy.HINT,
                                                service=service_address(service), compression=None,
                                                max_outstanding_requests=MAX_OUTSTANDING_REQUESTS))
    return distributed.rebatch(batch_size)


def service_address(service: DataService) -> str:
    return f"grpc://{dispatcher_address(service)}"
