"""What a launcher does around the processes it starts: pass SIGTERM on, and when one of
them dies, make the failure file name it first.

A process killed by a signal (the kernel's OOM killer, a crash in native code, kill -9)
writes nothing itself, and the processes that lose it fail next with errors that are
consequences ("Horovod has been shut down", a connection reset). The launcher learns
which process went first (mpirun says so; a child's exit status says so) and puts that
first in the failure file, above whatever the others wrote.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

from trainer.contract.job import BASE_DIR_ENV
from trainer.errors import JobError, Stopped
from trainer.supervision import peers
from trainer.plan.types import WORKER_COMMAND
from trainer.report import EXIT_STALLED, EXIT_STOPPED, AlreadyReported, write_failure

log = logging.getLogger("trainer")

# mpirun's (Open MPI 4) own words about the first rank to end the job.
MPIRUN_SIGNALED = re.compile(r"mpirun noticed that process rank (\d+) with PID \d+ on node \S+ "
                             r"exited on signal (\d+)(?: \(([^)]+)\))?")
MPIRUN_ABORTED = re.compile(r"MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (\d+)")
MPIRUN_EXITED = re.compile(r"The first process to do so was:\s+Process name:\s+\[\[\d+,\d+\],(\d+)\]\s+"
                           r"Exit code:\s+(\d+)")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def first_failed_rank(mpirun_output: str) -> tuple[int, str] | None:
    """(rank, why) of the rank mpirun blames for ending the job, if it blames one."""
    signaled = MPIRUN_SIGNALED.search(mpirun_output)
    if signaled:
        number = int(signaled.group(2))
        return int(signaled.group(1)), how_it_ended(-number)
    aborted = MPIRUN_ABORTED.search(mpirun_output)
    if aborted:  # mpi4py's end of a rank with an uncaught exception
        return int(aborted.group(1)), f"exited with code {aborted.group(2)} (an uncaught exception)"
    exited = MPIRUN_EXITED.search(mpirun_output)
    if exited:
        return int(exited.group(1)), f"exited with code {exited.group(2)}"
    return None


def how_it_ended(exit_code: int) -> str:
    """A child's end in words, from its Popen return code (negative: the signal)."""
    if exit_code < 0:
        return f"was killed by signal {-exit_code} ({signal_name(-exit_code)})"
    return f"exited with code {exit_code}"


def with_this_python(command) -> list[str]:
    """A plan's command with "python" as this process's interpreter."""
    return [sys.executable if part == "python" else part for part in command]


def start_tasks(job, roles) -> list:
    """This host's parameter-server cluster tasks (`ps`, `worker`: the plan's worker command
    with --serve)."""
    env = {**os.environ, BASE_DIR_ENV: job.base_dir}
    return [subprocess.Popen(with_this_python(WORKER_COMMAND) + ["--serve", role], env=env,
                             preexec_fn=die_with_parent) for role in roles]


# A process ended by its launcher (the job's end, or a failure elsewhere) gets this long
# between SIGTERM and SIGKILL.
END_GRACE_SEC = 10.0


def end_tasks(tasks: list, grace_sec: float = END_GRACE_SEC) -> None:
    """Stop helper processes (parameter-server tasks) at the end: SIGTERM, SIGKILL after `grace_sec`."""
    for task in tasks:
        task.terminate()
    for task in tasks:
        try:
            task.wait(timeout=grace_sec)
        except subprocess.TimeoutExpired:
            task.kill()
            task.wait()


def die_with_parent() -> None:
    """In a child between fork and exec: SIGKILL it when its parent dies (Linux prctl
    PR_SET_PDEATHSIG), so no process outlives a launcher that was killed."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def processes_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every process (from /proc: Linux only, as in
    the container)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # The command name (field 2) may hold spaces; the parent id follows its ')'.
                    stat = f.read()
                name = stat[stat.index("(") + 1:stat.rindex(")")]
                found[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), name)
            except (OSError, IndexError, ValueError):
                continue
    return found


def children_of(pid: int, except_named: tuple[str, ...] = ()) -> list[int]:
    """Direct children of `pid`, but those whose command is one of `except_named`."""
    return [child for child, (parent, name) in processes_table().items()
            if parent == pid and name not in except_named]


def children_of_named(name: str) -> list[int]:
    """Direct children of every process called `name` (an MPI worker host's ranks are
    the children of its `orted`)."""
    table = processes_table()
    parents = {pid for pid, (_, command) in table.items() if command == name}
    return [pid for pid, (parent, _) in table.items() if parent in parents]


def send_signal(pids: list[int], number: int = signal.SIGTERM) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)


@contextlib.contextmanager
def handling_sigterm(handler):
    """`handler(signum, frame)` for SIGTERM while the block runs (signals reach the main
    thread only: elsewhere the block runs without it); the previous handler after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Supervised:
    """A child process whose output is passed through and its tail kept, with SIGTERM to
    this process passed on to the child, or with `stop_grandchildren` to the child's own
    children (mpirun's ranks: mpirun would pass it on too, but SIGKILLs them a second
    later, too soon for the chief to save a checkpoint).

    `stop_grace_sec`: the child runs in a process group of its own (a shell script's
    children get the signals too), and what is still running that long after a SIGTERM
    is killed (`before_kill(this)` first: a script's stacks).

    `on_line(text)`: each line of the child's output, as it comes (a stall watch reads
    Horovod's reports there)."""

    def __init__(self, command: list[str], env: dict, stop_grandchildren: bool = False, tail_lines: int = 400,
                 cwd: str | None = None, stop_grace_sec: float | None = None, on_line=None, before_kill=None):
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        preexec_fn=die_with_parent, cwd=cwd,
                                        start_new_session=stop_grace_sec is not None)
        self.stop_grandchildren = stop_grandchildren
        self.stop_grace_sec = stop_grace_sec
        self.stop_requested = False
        self._on_line, self._before_kill = on_line, before_kill
        self._stopped_at = 0.0
        self._tail = collections.deque(maxlen=tail_lines)
        self._copier = threading.Thread(target=self._copy, daemon=True)
        self._copier.start()

    def _copy(self) -> None:
        for line in iter(self.process.stdout.readline, b""):
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            text = line.decode(errors="replace")
            self._tail.append(text)
            if self._on_line is not None:
                self._on_line(text)

    @property
    def output_tail(self) -> str:
        return "".join(self._tail)

    def wait(self, timeout: float | None = None) -> int | None:
        """The child's exit code once it has ended; None if it still runs after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with handling_sigterm(self._pass_stop_on):
            while True:
                try:
                    code = self.process.wait(timeout=1.0 if deadline is None else
                                             max(0.0, min(1.0, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if deadline is not None and time.monotonic() >= deadline and not self.stop_requested:
                        return None
                    if self._grace_is_over():
                        log.warning("still running %.0f s after SIGTERM: killed", self.stop_grace_sec)
                        if self._before_kill is not None:
                            self._before_kill(self)
                        if self.stop_grandchildren:
                            send_signal(children_of(self.process.pid), signal.SIGKILL)
                        self._signal(signal.SIGKILL)
        self._copier.join(timeout=10)
        return code

    def _grace_is_over(self) -> bool:
        return (self.stop_requested and self.stop_grace_sec is not None
                and time.monotonic() - self._stopped_at > self.stop_grace_sec)

    def _signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.stop_grace_sec is not None:
                os.killpg(self.process.pid, number)
            else:
                os.kill(self.process.pid, number)

    def _pass_stop_on(self, signum, frame) -> None:
        if not self.stop_requested:
            self._stopped_at = time.monotonic()
        self.stop_requested = True
        log.warning("SIGTERM: passing it on to the training processes")
        if self.stop_grandchildren:
            # Across hosts mpirun's children also include its ssh connections to the other
            # hosts' orted: ending those would end the remote ranks before they can save.
            send_signal(children_of(self.process.pid, except_named=("ssh",)))
        else:
            self._signal(signal.SIGTERM)

    def terminate(self) -> None:
        """SIGTERM to the child (and its group), without waiting."""
        self._signal(signal.SIGTERM)

    def end(self, grace_sec: float = END_GRACE_SEC) -> None:
        """Stop the child (and its group) if it still runs: SIGTERM, then SIGKILL after `grace_sec`."""
        if self.process.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_sec)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait()


# TensorFlow's words when a peer of a multi-worker or parameter-server job is gone: (its
# message, what it means). The task named is the one that stopped answering.
TF_PEER_LOST = (
    (re.compile(r"Task /job:(?P<job>\w+)/replica:\d+/task:(?P<task>\d+) heartbeat timeout"),
     "stopped answering (TensorFlow's heartbeat timed out)"),
    (re.compile(r"(?P<why>failed to connect to all addresses|Connection reset by peer|Socket closed)\s+"
                r"Additional GRPC error information from remote target /job:(?P<job>\w+)/replica:\d+/task:(?P<task>\d+)"),
     "cannot be reached (gRPC: {why})"),
)


def lost_peer(plan, tf_message: str) -> str | None:
    """"worker on algo-2 stopped answering (...)": the process of the job that TensorFlow's
    message says is gone (its last such message), if it says so."""
    lost = lost_peer_process(plan, tf_message)
    return lost[1] if lost else None


def lost_peer_process(plan, tf_message: str):
    """(the plan's process that TensorFlow's last such message says is gone, or None when the
    plan has no such task; lost_peer's words for it), or None when no message says so."""
    found = None
    for pattern, meaning in TF_PEER_LOST:
        for lost in pattern.finditer(tf_message):
            if found is None or lost.start() > found[0]:
                found = (lost.start(), lost, meaning)
    if found is None:
        return None
    _, lost, meaning = found
    task = {"type": lost.group("job"), "index": int(lost.group("task"))}
    peer = next((p for p in plan.processes if p.tf_config and p.tf_config["task"] == task), None)
    name = peer.name if peer else f"TensorFlow task /job:{task['type']}/task:{task['index']}"
    return peer, f"{name} {meaning.format(**lost.groupdict())}"


def lost_peer_reason(plan, who: str, tf_message: str) -> str:
    """The failure reason of a process whose collective or RPC failed because another
    process of the job is gone: names that process when TensorFlow says which it was."""
    peer = lost_peer(plan, tf_message)
    if peer:
        return f"{who}: {peer}: it failed, was preempted or crashed; see its own log"
    return (f"{who}: lost contact with another process of the job (TensorFlow's UnavailableError, below); "
            "the one that failed first names itself in its own host's failure file or log")


def blame_first(output_dir: str, who: str, why: str) -> str:
    """Put "`who` `why`" first in the failure file (the others' errors stay below it)."""
    reason = f"{who} {why}; the other processes were ended because of it"
    write_failure(output_dir, reason, cause_first=True)
    log.error("%s", reason)
    return reason


def supervise_mpirun(job, plan, command, cwd: str | None = None, explain=None, watch=None) -> None:
    """Run mpirun on this host and supervise it: its output passed through, SIGTERM passed
    on to this host's ranks, and a rank that died first named first in the failure file.

    `explain(rank, how, output)`: for ranks that write no failure file of their own (a
    user's script), writes it from the failed rank (None: unknown), how it ended and
    mpirun's last output. `watch`: a script's stall watch (trainer.script.stall), which
    ends mpirun when the ranks stall and names them."""
    command = with_this_python(command)
    log.info("starting %d ranks: %s", plan.world_size, " ".join(command))
    env = {**os.environ, **plan.launch.env, BASE_DIR_ENV: job.base_dir}
    # Ranks of a user's script get a bounded grace after a SIGTERM (ours bound it themselves).
    grace = job.hyperparameters.stop_grace_sec + FOLLOW_MARGIN_SEC if explain is not None else None
    mpirun = Supervised(command, env, stop_grandchildren=True, cwd=cwd, stop_grace_sec=grace,
                        on_line=watch and watch.feed, before_kill=watch and watch.stacks_before_kill)
    if watch is not None:
        watch.follow(mpirun)
    exit_code = mpirun.wait()
    if watch is not None:
        watch.stop()
        if watch.stalled:
            raise AlreadyReported(EXIT_STALLED)
    if exit_code == 0:
        return
    reported = os.path.exists(os.path.join(job.output_dir, "failure"))
    if mpirun.stop_requested:
        if reported:
            raise AlreadyReported(EXIT_STOPPED)  # the ranks said where they stopped
        if watch is not None and watch.stacks_at_kill:
            write_failure(job.output_dir, f"stopped by SIGTERM; the ranks did not end within their grace "
                                          f"(stop_grace_sec) and were killed", watch.stacks_at_kill)
            raise AlreadyReported(EXIT_STOPPED)
        raise Stopped(f"stopped by SIGTERM; the ranks ended (mpirun's exit code {exit_code}) and none said "
                      "what it saved")
    blamed = first_failed_rank(mpirun.output_tail)
    if explain is not None and not reported:
        rank, how = blamed or (None, f"ended mpirun with exit code {exit_code}")
        explain(rank, how, mpirun.output_tail)
        raise AlreadyReported(exit_code)
    # A rank killed by a signal wrote nothing, and the others' errors are consequences.
    if blamed and (not reported or "signal" in blamed[1]):
        blame_first(job.output_dir, plan.process(blamed[0]).name, blamed[1])
        raise AlreadyReported(exit_code)
    if reported:
        raise AlreadyReported(exit_code)  # the failing rank said why
    raise JobError(f"mpirun exited with code {exit_code} and no rank reported why")


def serve_until_the_leader_ends(job, plan, tasks: list, names: list[str], who: str) -> None:
    """This host's helper tasks (parameter-server tasks, tf.data service tasks) serve until
    the plan's leader host (`who` in the log) has ended; a task that dies first fails this
    host, named. They serve on after a SIGTERM: the leader saves its checkpoint through them."""
    def tasks_alive():
        for task, name in zip(tasks, names):
            if task.poll() is not None:
                raise JobError(f"{name} {how_it_ended(task.returncode)}")

    follow_leader(job, plan, who, alive=tasks_alive,
                  on_stop=lambda: log.warning("SIGTERM: this host's tasks serve until %s has saved", who))


# After a SIGTERM a follower waits for the leader's save at most this much beyond its grace.
FOLLOW_MARGIN_SEC = 20.0


def follow_leader(job, plan, who: str, alive=lambda: None, on_stop=lambda: None) -> None:
    """Wait until the plan's leader host has ended (trainer.supervision.peers.follow). A SIGTERM does not
    end the wait: the leader saves first (SageMaker stops every host), so `on_stop()` passes
    it on where needed, and the wait goes on for the leader's grace time at most."""
    stopped_at: list[float] = []

    def on_sigterm(signum, frame):
        if not stopped_at:
            stopped_at.append(time.monotonic())
            on_stop()

    def still_alive():
        alive()
        grace = job.hyperparameters.stop_grace_sec + FOLLOW_MARGIN_SEC
        if stopped_at and time.monotonic() - stopped_at[0] > grace:
            raise Stopped(f"{job.current_host}: stopped by SIGTERM; {who} did not end within {grace:.0f} s")

    with handling_sigterm(on_sigterm):
        peers.follow(plan.leader, peers.STATUS_PORT, job.current_host, who, alive=still_alive)
    log.info("%s is done; this host's part has ended", who)
