"""`trainer plan --check-input`: read every rank's training input for one epoch, no training.

For each training process: the records it reads (its channels, its shard, through the same
pipeline code as training) and an order-independent fingerprint of them (the sum, modulo
2**64, of each record's 64-bit farmhash; a Parquet row's, of its columns'). The totals over
the processes are set against the whole channel set, each distinct file read once: equal
counts and equal fingerprints mean every record is read exactly once per epoch.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from trainer.contract.job import read_job
from trainer.data.pipeline import InputSpec, records

BATCH = 8192


def row_fingerprints(batch):
    """uint64[n]: each record's (a line, a serialized record, a Parquet row of Columns) farmhash."""
    import tensorflow as tf

    parts = [tf.bitcast(tf.fingerprint(tensor), tf.uint64) for tensor in tf.nest.flatten(batch)]
    return tf.add_n(parts) if len(parts) > 1 else parts[0]


def _count_and_fingerprint(dataset) -> tuple[int, int]:
    count, total = 0, np.uint64(0)
    for batch in dataset.batch(BATCH).map(row_fingerprints):
        values = batch.numpy()
        count += len(values)
        total = np.add(total, values.sum(dtype=np.uint64), dtype=np.uint64)  # wraps modulo 2**64
    return count, int(total)


def check_input(plan, folders: dict[str, str]) -> dict:
    """`folders`: the job folder of each host whose data is here (File-mode layout)."""
    jobs = {host: read_job(folder) for host, folder in folders.items()}
    rows, distinct_files, spec = [], {}, None
    for process in plan.processes:
        if process.rank is None:
            continue
        if process.host not in jobs:
            rows.append({"rank": process.rank, "host": process.host, "skipped": "data not on this host"})
            continue
        job = jobs[process.host]
        spec = InputSpec.for_process(job, process)
        count, fingerprint = _count_and_fingerprint(records(spec, 0, 1.0))
        rows.append({"rank": process.rank, "host": process.host, "channels": list(process.channels),
                     "shard": list(process.shard), "records": count, "fingerprint": f"{fingerprint:016x}"})
        for path in spec.files:
            distinct_files.setdefault(os.path.realpath(path), path)
    whole = dataclasses.replace(spec, files=tuple(sorted(distinct_files.values())), shard_count=1, shard_index=0)
    total_count, total_fingerprint = _count_and_fingerprint(records(whole, 0, 1.0))
    read = [r for r in rows if "records" in r]
    read_count = sum(r["records"] for r in read)
    read_fingerprint = int(np.sum(np.array([int(r["fingerprint"], 16) for r in read], dtype=np.uint64),
                                  dtype=np.uint64))
    return {
        "ranks": rows,
        "read_by_ranks": {"records": read_count, "fingerprint": f"{read_fingerprint:016x}"},
        "channel_set": {"files": len(distinct_files), "records": total_count,
                        "fingerprint": f"{total_fingerprint:016x}"},
        "exactly_once": len(read) == len(rows) and read_count == total_count
        and read_fingerprint == total_fingerprint,
    }
