"""A real S3 API for the tests of s3:// paths: moto's S3 server (requirements-dev.txt), started
by a test and stopped at its end, listening where only this machine reaches it: on loopback
for jobs run here, or inside a helper container's own network namespace for jobs in
containers (the host's Python runs there through nsenter; only that container network and
this machine reach it)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import boto3

from conftest import IMAGE, remove_containers

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": "us-east-1"}
START_WITHIN_SEC = 60  # a guard against a server that never comes up


def free_port(host: str = "127.0.0.1") -> int:
    with socket.create_server((host, 0)) as server:
        return server.getsockname()[1]


class S3Server:
    """moto's server on `address`:`port`; `netns`: run it in that network namespace (a path
    such as /proc/<pid>/ns/net) and bind every address there."""

    def __init__(self, log_path, address: str = "127.0.0.1", port: int | None = None, netns: str | None = None):
        self.port = port or free_port()
        command = [sys.executable, "-m", "moto.server", "-H", "0.0.0.0" if netns else address, "-p", str(self.port)]
        if netns:
            command = ["nsenter", f"--net={netns}", *command]
        self.endpoint = f"http://{address}:{self.port}"
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        env={**os.environ, **CREDENTIALS})
        self._wait_until_it_answers(address)

    def _wait_until_it_answers(self, address: str) -> None:
        deadline = time.monotonic() + START_WITHIN_SEC
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"moto's server ended with {self.process.returncode}"
            try:
                with socket.create_connection((address, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"moto's server did not answer on {address}:{self.port} in {START_WITHIN_SEC} s")

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
                            aws_access_key_id="local", aws_secret_access_key="local")

    def bucket(self, name: str | None = None) -> str:
        name = name or f"test-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


class S3OnContainerNetwork:
    """moto's server reachable from the containers of `network` (and this machine): a helper
    container of the image holds the network namespace, the host's Python serves in it."""

    def __init__(self, engine: str, network: str, log_path):
        self.engine = engine
        self.name = f"trainer-test-s3-{uuid.uuid4().hex[:8]}"
        run = subprocess.run([engine, "run", "-d", "--name", self.name, "--network", network, "--entrypoint",
                              "sleep", IMAGE, "infinity"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        try:
            pid, address = self._inspect("{{.State.Pid}}"), self._inspect(
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")
            self.server = S3Server(log_path, address=address, port=9000, netns=f"/proc/{pid}/ns/net")
        except BaseException:
            remove_containers(engine, self.name)
            raise

    def _inspect(self, template: str) -> str:
        done = subprocess.run([self.engine, "inspect", "--format", template, self.name], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.strip(), done.stderr
        return done.stdout.strip()

    def stop(self) -> None:
        try:
            self.server.stop()
        finally:
            remove_containers(self.engine, self.name)
