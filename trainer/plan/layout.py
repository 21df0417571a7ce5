"""Which data each process reads: P3's sharding table for the training channels, and the
evaluation shard; the modes lay their processes out with it (trainer.modes)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from trainer.errors import JobError
from trainer.plan.types import Process

NO_TRAINING_CHANNEL = "no channel named training: the script reads its channels (SM_CHANNEL_*) itself"

SHARDING = {  # (one channel per process, ShardedByS3Key) -> P3's row
    (True, True): "one channel per process and ShardedByS3Key: no sharding in code",
    (True, False): "one channel per process, FullyReplicated: shard(hosts, host_index)",
    (False, True): "shared channel, ShardedByS3Key: shard(processes_per_host, local_rank)",
    (False, False): "shared channel, FullyReplicated: shard(world_size, rank)",
}


@dataclass(frozen=True)
class Layout:
    """The job's training processes: `per_host` on every host, reading `channels` (none: a
    script that reads its channels itself), evaluating on `eval_channel` (None: no evaluation)."""

    job: object  # trainer.contract.job.Job
    channels: tuple
    per_host: int
    eval_channel: object | None  # trainer.contract.job.Channel

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.job.hosts

    @property
    def one_channel_per_process(self) -> bool:
        return len(self.channels) >= self.per_host

    @property
    def s3_sharded(self) -> bool:
        return bool(self.channels) and self.channels[0].s3_distribution == "ShardedByS3Key"

    @property
    def sharding(self) -> str:
        if not self.channels:
            return NO_TRAINING_CHANNEL
        return SHARDING[(self.one_channel_per_process, self.s3_sharded)]

    def rank(self, host_index: int, local_rank: int) -> int:
        return host_index * self.per_host + local_rank

    def shard(self, host_index: int, local_rank: int) -> tuple[int, int]:
        """P3: dataset.shard(n, i) of a process's training channels."""
        hosts = len(self.hosts)
        if not self.channels or (self.one_channel_per_process and self.s3_sharded):
            return (1, 0)
        if self.one_channel_per_process:
            return (hosts, host_index) if hosts > 1 else (1, 0)
        if self.s3_sharded:
            return (self.per_host, local_rank)
        return (hosts * self.per_host, self.rank(host_index, local_rank))

    def channels_of(self, local_rank: int) -> tuple[str, ...]:
        """A process's training channels: its own (every per_host-th, from its local rank) when
        there are enough for each process of the host, else all of them (shared, File mode)."""
        own = self.channels[local_rank::self.per_host] if self.one_channel_per_process else self.channels
        return tuple(c.name for c in own)

    def eval_shard(self, host_index: int, local_rank: int, sharded: bool) -> tuple[int, int] | None:
        """Evaluation data of one process: sharded when the metric is aggregated after (P4, P6);
        else (1, 0), the whole set, which only the chief evaluates."""
        channel = self.eval_channel
        if channel is None:
            return None
        hosts = len(self.hosts)
        if not sharded:
            return (1, 0)
        s3_sharded = channel.s3_distribution == "ShardedByS3Key"
        if channel.is_pipe:  # one FIFO reader per host: local rank 0
            if local_rank:
                return None
            return (1, 0) if s3_sharded or hosts == 1 else (hosts, host_index)
        if s3_sharded:
            return (self.per_host, local_rank)
        return (hosts * self.per_host, self.rank(host_index, local_rank))

    def process(self, host_index: int, local_rank: int, role: str, eval_shard, tf_config=None) -> Process:
        """A training process, reading its channels and shard."""
        channels = self.channels_of(local_rank)
        return Process(host=self.hosts[host_index], role=role, rank=self.rank(host_index, local_rank),
                       local_rank=local_rank, channels=channels,
                       shard=self.shard(host_index, local_rank), eval_shard=eval_shard,
                       gpu=local_rank if self.job.num_gpus else None, tf_config=tf_config,
                       reads=self.reads(channels, eval_shard is not None))

    def reads(self, channels: tuple[str, ...], evaluates: bool) -> tuple[str, ...]:
        """The FIFOs (Pipe mode: one per epoch, <channel>_<epoch>) or folders a process reads,
        under its host's /opt/ml (the same path on every host)."""
        read = [self.job.channels[name] for name in channels]
        if evaluates and self.eval_channel is not None:
            read.append(self.eval_channel)
        paths = (os.path.relpath(channel.path, self.job.base_dir) for channel in read)
        return tuple(f"{path}_<epoch>" if channel.is_pipe else path for path, channel in zip(paths, read))


def check_channels(channels, per_host: int) -> None:
    """Training channels the processes can read (P1, P3)."""
    if len({c.s3_distribution for c in channels}) > 1:
        raise JobError("training channels mix ShardedByS3Key and FullyReplicated; use one for all")
    if len(channels) < per_host and channels[0].is_pipe:
        raise JobError(
            f"Pipe mode: {len(channels)} training channel(s) ({', '.join(c.name for c in channels)}) for "
            f"{per_host} training processes per host; each process needs its own channel, since a FIFO "
            f"has one reader (see P1 in docs/pitfalls.md). Pass {per_host} channels named like "
            f"{channels[0].name}-1 .. {channels[0].name}-{per_host}, or use fewer processes per host")
