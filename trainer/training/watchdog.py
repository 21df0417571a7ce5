"""A progress watchdog for one training process: a stall ends the job, saying where.

A process that makes no progress bills by the hour and tells nobody why (a FIFO whose
writer went quiet, a collective waiting for a rank that will never come, a dead-locked
input thread). Training and evaluation steps report progress; saving a checkpoint or
exporting the model makes no steps, so it is a phase with its own, longer limit, and the
log says every minute what is taking long (P16: saving, not stuck). When a limit passes,
the watchdog writes every thread's stack to the log (faulthandler), writes the failure
file naming the process, its host, the phase and the last step, and ends the process at
once: the main thread is blocked inside TensorFlow, where no exception can reach it.
"""
from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import threading
import time

from trainer.report import EXIT_STALLED, write_failure

log = logging.getLogger("trainer")
REPORT_EVERY_SEC = 60.0  # how often a long phase is logged as still going


class Watchdog:
    """One thread per process; `progress(step)` from training and evaluation steps,
    `phase(...)` around each part of the run."""

    def __init__(self, who: str, output_dir: str, stall_timeout_sec: float, poll_sec: float | None = None):
        self.who = who
        self.output_dir = output_dir
        self.stall_timeout_sec = stall_timeout_sec
        self.poll_sec = poll_sec or min(5.0, max(0.2, stall_timeout_sec / 10))
        self._lock = threading.Lock()
        self._phase, self._limit, self._first_limit = "starting", stall_timeout_sec, stall_timeout_sec
        self._since = self._phase_started = time.monotonic()
        self._last_step = None
        self._progressed, self._reported = False, 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="trainer-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def progress(self, step: int | None = None) -> None:
        with self._lock:
            self._since = time.monotonic()
            self._progressed, self._reported = True, 0.0
            if step is not None:
                self._last_step = step

    @contextlib.contextmanager
    def phase(self, name: str, limit_sec: float | None = None, first_limit_sec: float | None = None):
        """Within `name`, `limit_sec` (default: the stall timeout) without progress is a stall;
        until the phase's first progress, `first_limit_sec` (a Pipe-mode FIFO may take its own
        pipe_wait_sec to appear, and fails by itself, more clearly, when it does not)."""
        with self._lock:
            outer = (self._phase, self._limit, self._first_limit)
            self._phase = name
            self._limit = limit_sec or self.stall_timeout_sec
            self._first_limit = max(self._limit, first_limit_sec or 0.0)
            self._since = self._phase_started = time.monotonic()
            self._progressed, self._reported = False, 0.0
        try:
            yield
        finally:
            with self._lock:
                self._phase, self._limit, self._first_limit = outer
                self._since = time.monotonic()

    def _watch(self) -> None:
        while not self._stopped.wait(self.poll_sec):
            with self._lock:
                now = time.monotonic()
                idle, phase, step = now - self._since, self._phase, self._last_step
                limit = self._limit if self._progressed else self._first_limit
                in_phase = now - self._phase_started
                report = idle >= REPORT_EVERY_SEC and idle - self._reported >= REPORT_EVERY_SEC
                if report:
                    self._reported = idle
            if idle > limit:
                self._stall(phase, idle, step)
                return
            if report:
                log.info("%s: %s, %.0f s without progress (%.0f s in this phase; limit %.0f s)",
                         self.who, phase, idle, in_phase, limit)

    def _stall(self, phase: str, idle: float, step: int | None) -> None:
        where = f"last step {step}" if step is not None else "no step yet"
        reason = (f"{self.who}: no progress for {idle:.0f} s while {phase} ({where}); "
                  "every thread's stack is in the log")
        log.error("%s", reason)
        sys.stdout.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        write_failure(self.output_dir, reason)
        os._exit(EXIT_STALLED)
