"""Helpers of the fault tests: jobs watched while they run (to kill a process or send a
signal at the right moment)."""
from __future__ import annotations

import re
import subprocess
import threading
import time

from conftest import PROJECT_ROOT, JobRun, first_host_folder, group_hosts, local_command


class WatchedJob:
    """`trainer local` started in the background, its output read as it comes."""

    def __init__(self, job_dir, channels: dict, hyperparameters: dict | None = None, input_mode: str = "File",
                 hosts: int = 1, groups: str = ""):
        self.job_dir, self.hosts = job_dir, group_hosts(groups) or hosts
        self.process = subprocess.Popen(local_command(job_dir, channels, hyperparameters, input_mode, hosts,
                                                      groups=groups),
                                        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 300.0) -> re.Match:
        """The first log line matching `pattern`, once it is there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(pattern, line)
                if found:
                    return found
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no log line matched {pattern!r}; the log ends:\n{self.log[-3000:]}")

    def finish(self, timeout: float = 300.0) -> JobRun:
        try:
            self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        self._reader.join(timeout=10)
        return JobRun(first_host_folder(self.job_dir, self.hosts), self.process.returncode, self.log)


def first_line(run: JobRun) -> str:
    assert run.failure is not None, run.log[-3000:]
    return run.failure.splitlines()[0]
