"""A script's progress, watched from outside: a stalled rank ends the job, named.

A user's script reports no steps to this container, so its progress is read where the
libraries and the kernel show it, without changing the script:

- Horovod's own stall check (HOROVOD_STALL_CHECK_TIME_SECONDS, set by the plan) has rank 0
  name, every check period, the ranks that have not submitted a tensor the others wait to
  reduce ("Missing ranks:"). A stall that has lasted `stall_timeout_sec` names those ranks.
  (MPI's waiting ranks spin on their cores, so their CPU time says nothing there.)
- The process table: a rank whose processes used almost no CPU for `stall_timeout_sec` is
  blocked (a collective whose peer is gone, a FIFO or socket that never answers, a sleep
  that never ends). A healthy pause shorter than the bound (a long evaluation uses CPU
  anyway) is not cut.

On a stall: every rank's stack on this host (trainer.script.stacks) goes below the reason
in the failure file and in the log, the script is ended (SIGTERM, SIGKILL 10 s later), and
the host's part fails; the other hosts end as with any failure.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass

from trainer.supervision import peers
from trainer.supervision.supervise import lost_peer, lost_peer_process, processes_table
from trainer.report import write_failure
from trainer.script import stacks

log = logging.getLogger("trainer")

# Less than this share of one core over the whole bound is no progress: a waiting process's
# own threads (gRPC's polls, TensorFlow's heartbeats) use a fraction of it.
IDLE_CPU_SHARE = 0.01
MPI_TAG = re.compile(r"\[\d+,(\d+)\]<(?:stdout|stderr)>:")  # mpirun --tag-output's, with the rank
HOROVOD_STALL = re.compile(r"waiting for remainder of ranks for more than (\d+) seconds")
HOROVOD_MISSING_RANK = re.compile(r"^\s*(\d+): \[")
TICKS_PER_SEC = os.sysconf("SC_CLK_TCK")
# How long the other hosts get to read a stall and take their own ranks' stacks (an MPI
# worker host's ranks end with the master's mpirun).
OTHER_HOSTS_STACKS_SEC = 10.0


@dataclass(frozen=True)
class Stall:
    who: str  # "rank 3 on algo-2"
    seconds: float  # without progress
    how: str  # what showed it
    idle_rank: str | None = None  # the process table's: the idle rank's key


class Progress:
    """What was seen of the ranks' progress, and whether it has stalled (no threads, no
    processes: the decisions only, fed with times)."""

    def __init__(self, bound_sec: float, name_of_rank, waiting_margin_sec: float = 0.0):
        self.bound_sec = bound_sec
        self.name_of_rank = name_of_rank  # int -> "rank 3 on algo-2"
        # An idle rank whose stack shows it waiting inside the libraries (a collective, a
        # remote call) waits for some other process: this much longer, so that where the
        # job really stopped (that process's own host) is found and named first.
        self.waiting_margin_sec = waiting_margin_sec
        self.waiting: set[str] = set()
        self._cpu: dict[str, list[tuple[float, float]]] = {}  # rank -> [(time, CPU seconds)]
        self._reports: list[tuple[float, frozenset[int], float]] = []  # Horovod: (time, missing, check period)
        # TensorFlow's word that it cannot reach a process of the job that has ended: (since
        # when, that word), while it lasts.
        self._ended_peer: tuple[float, str] | None = None

    def cpu_sample(self, now: float, cpu_seconds: dict[str, float]) -> None:
        for rank, used in cpu_seconds.items():
            samples = self._cpu.setdefault(rank, [])
            samples.append((now, used))
            # Keep one sample at least the longest window old: the window starts there.
            while len(samples) > 2 and samples[1][0] <= now - self.bound_sec - self.waiting_margin_sec:
                samples.pop(0)
        for rank in set(self._cpu) - set(cpu_seconds):
            del self._cpu[rank]  # ended: its process is gone

    def horovod_report(self, now: float, missing: frozenset[int], check_sec: float) -> None:
        self._reports.append((now, missing, check_sec))

    def waits_for_ended_process(self, now: float, lost: str | None) -> bool:
        """`lost`: what TensorFlow last said of a process it cannot reach, when that process
        has ended (None otherwise). True when this is the first such word."""
        if lost is None:
            self._ended_peer = None
            return False
        first = self._ended_peer is None
        self._ended_peer = (self._ended_peer[0] if self._ended_peer else now, lost)
        return first

    def stall(self, now: float) -> Stall | None:
        return self._horovod_stall(now) or self._idle_rank(now) or self._ended_process_stall(now)

    def _ended_process_stall(self, now: float) -> Stall | None:
        """A script process that has ended never comes back (SageMaker restarts none), so
        TensorFlow's retries of it (a parameter-server coordinator's, which use CPU) are no
        progress, however busy they keep this host's ranks."""
        if self._ended_peer is None or now - self._ended_peer[0] < self.bound_sec:
            return None
        who = ", ".join(sorted(self._cpu)) or "the script"
        return Stall(who, now - self._ended_peer[0], "waiting inside TensorFlow for another process of the job, "
                     f"which has ended (TensorFlow's last word: {self._ended_peer[1]})")

    def _horovod_stall(self, now: float) -> Stall | None:
        """Reports come every check period while the stall lasts: the latest unbroken run of
        them says since when (its first report, less one period)."""
        if not self._reports or now - self._reports[-1][0] > 3 * self._reports[-1][2]:
            return None
        first = len(self._reports) - 1
        while first > 0 and self._reports[first][0] - self._reports[first - 1][0] <= 3 * self._reports[first][2]:
            first -= 1
        since = self._reports[first][0] - self._reports[first][2]
        if now - since < self.bound_sec:
            return None
        missing = sorted(self._reports[-1][1])
        who = ", ".join(self.name_of_rank(rank) for rank in missing) or "a rank"
        return Stall(who, now - since, "never joined the Horovod collective the other ranks wait in (Horovod's "
                                       "stall check: 'Missing ranks')")

    def _idle_rank(self, now: float) -> Stall | None:
        for rank, samples in sorted(self._cpu.items()):
            if not self._idle_for(samples, now, self.bound_sec):
                self.waiting.discard(rank)  # it works again
                continue
            if rank not in self.waiting:
                return self._idle_for(samples, now, self.bound_sec, rank)
            waited = self._idle_for(samples, now, self.bound_sec + self.waiting_margin_sec, rank)
            if waited:
                return waited
        return None

    @staticmethod
    def _idle_for(samples, now: float, bound: float, rank: str = "") -> Stall | None:
        starts = [sample for sample in samples if sample[0] <= now - bound]
        if not starts:
            return None
        start_at, start_used = starts[-1]
        used = samples[-1][1] - start_used
        if used >= IDLE_CPU_SHARE * (now - start_at):
            return None
        return Stall(rank, now - start_at, f"its processes used {used:.1f} s of CPU in that time", rank)


def rank_processes(root: int) -> dict[int, list[int]]:
    """The outermost Python processes under `root` (the ranks: a shell script's Python, mpirun's
    children), each with every process under it."""
    table = processes_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)

    def tree(pid):
        found = [pid]
        for child in children.get(pid, []):
            found += tree(child)
        return found

    ranks, queue = {}, [root]
    while queue:
        pid = queue.pop(0)
        if stacks.is_python(pid):
            ranks[pid] = tree(pid)
        else:
            queue += children.get(pid, [])
    return ranks


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes and of their children that have ended."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
        except (OSError, IndexError, ValueError):
            continue
    return total / TICKS_PER_SEC


def _script_ended(host: str, me: str) -> bool:
    """Whether the script on `host` has ended: its `train` says so on its status port (a
    host serving a parameter-server task outlives its script), or has ended itself."""
    status, closed = peers.poll_status(host, peers.STATUS_PORT, me)
    return closed or peers.is_final(status) or bool(peers.read_fact(host, peers.STATUS_PORT, me, peers.SCRIPT_ENDED))


def waiting_margin_sec(bound_sec: float) -> float:
    """What a rank idle inside TensorFlow or Horovod (waiting for another process) gets
    beyond the bound, so that the host where the job really stopped names it first."""
    return min(120.0, max(15.0, bound_sec / 4))


class StallWatch:
    """Watches one supervised process (the script, or mpirun and its ranks) on this host.
    `feed` takes its output lines (Horovod's reports); `stalled` says whether it ended it."""

    def __init__(self, job, plan, output_dir: str | None = None):
        self.host = job.current_host
        self.program = job.entry_point.program
        self.output_dir = output_dir or job.output_dir
        bound = job.hyperparameters.stall_timeout_sec
        self.poll_sec = min(15.0, max(1.0, bound / 20))
        self.code_dir = job.entry_point.code_dir
        self.plan = plan
        # A process of a script run once per host has no rank of its own (-1): the plan names it.
        self.process_name = next((p.name for p in plan.on_host(self.host) if p.role != "ps"), self.host)
        self.progress = Progress(bound, lambda rank: plan.process(rank).name if rank < len(plan.processes)
                                 else f"rank {rank}", waiting_margin_sec=waiting_margin_sec(bound))
        self.stalled: Stall | None = None
        self._missing: set[int] | None = None  # a Horovod report being read
        self._check_sec = 60.0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.stacks_at_kill = ""

    def feed(self, line: str) -> None:
        text = MPI_TAG.sub("", line)
        with self._lock:
            reported = HOROVOD_STALL.search(text)
            if reported:
                self._check_sec = float(reported.group(1))
            if "Missing ranks:" in text:
                self._close_report()
                self._missing = set()
                return
            rank = HOROVOD_MISSING_RANK.match(text)
            if self._missing is not None and rank:
                self._missing.add(int(rank.group(1)))
            elif self._missing is not None and text.strip():
                self._close_report()

    def _close_report(self) -> None:
        if self._missing:
            self.progress.horovod_report(time.monotonic(), frozenset(self._missing), self._check_sec)
        self._missing = None

    def _name(self, pid: int) -> str:
        name = stacks.rank_name(pid)
        return f"{name} on {self.host}" if name.startswith("rank ") else f"{self.process_name} ({name})"

    def follow(self, supervised) -> "StallWatch":
        threading.Thread(target=self._watch, args=(supervised,), daemon=True, name="script-stall-watch").start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _watch(self, supervised) -> None:
        root = supervised.process.pid
        while not self._done.wait(self.poll_sec):
            now = time.monotonic()
            ranks = {self._name(pid): (pid, tree) for pid, tree in rank_processes(root).items()}
            self._note_an_ended_process(now, supervised)
            with self._lock:
                if self._missing is not None and self._missing:
                    self._close_report()
                self.progress.cpu_sample(now, {rank: cpu_seconds(tree) for rank, (_, tree) in ranks.items()})
                stall = self.progress.stall(now)
            if stall is None or self._done.is_set():
                continue
            if stall.idle_rank and stall.idle_rank not in self.progress.waiting and stacks.waits_in_library(
                    ranks.get(stall.idle_rank, (None,))[0], self.code_dir):
                with self._lock:
                    self.progress.waiting.add(stall.idle_rank)
                log.warning("%s has used no CPU for %.0f s, waiting inside TensorFlow or Horovod (a collective or a "
                            "remote call) for another process: if that one's host does not end the job first, this "
                            "one does in %.0f s", stall.who, stall.seconds, self.progress.waiting_margin_sec)
                continue
            if stall.idle_rank in self.progress.waiting:
                peer = lost_peer(self.plan, supervised.output_tail)
                stall = Stall(stall.who, stall.seconds, f"{stall.how}, waiting inside TensorFlow or Horovod for "
                                                        f"another process of the job"
                                                        + (f" (TensorFlow's last word: {peer})" if peer else ""),
                              stall.idle_rank)
            self._end(supervised, stall)
            return

    def _note_an_ended_process(self, now: float, supervised) -> None:
        """Whether TensorFlow's last word is that it cannot reach a process of the job that
        has ended (that process's host is asked only then)."""
        lost = lost_peer_process(self.plan, supervised.output_tail)
        ended = lost is not None and lost[0] is not None and lost[0].host != self.host and _script_ended(
            lost[0].host, self.host)
        with self._lock:
            first = self.progress.waits_for_ended_process(now, lost[1] if ended else None)
        if first:
            log.warning("TensorFlow on %s says: %s; that process has ended: this host ends the job in %.0f s "
                        "unless its script goes on (stall_timeout_sec)", self.host, lost[1],
                        self.progress.bound_sec)

    def _end(self, supervised, stall: Stall) -> None:
        self.stalled = stall
        reason = (f"script {self.program}: {stall.who} made no progress for {stall.seconds:.0f} s: {stall.how} "
                  f"(the bound is the hyperparameter stall_timeout_sec); each rank's stack on {self.host} is below")
        where = stacks.stacks(self.host, [supervised.process.pid])
        write_failure(self.output_dir, reason, f"the stacks of the script's processes on {self.host}:\n{where}",
                      cause_first=True)
        log.error("%s\n%s", reason, where)
        status = peers.serving()
        if status is not None:  # the other hosts take their ranks' stacks before these end them
            status.finish(peers.FAILED, reason)
            status.wait_until_read(status.other_hosts, wait_sec=OTHER_HOSTS_STACKS_SEC)
            time.sleep(OTHER_HOSTS_STACKS_SEC / 2)
        supervised.end(grace_sec=10.0)

    def stacks_before_kill(self, supervised) -> None:
        """A script still running after its grace past a SIGTERM: where each rank was, in the
        log now and below the reason in the failure file (`stacks_at_kill`)."""
        where = stacks.stacks(self.host, [supervised.process.pid])
        self.stacks_at_kill = f"the stacks of the script's processes on {self.host} when they were killed:\n{where}"
        log.error("%s", self.stacks_at_kill)
