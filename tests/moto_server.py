"""A moto S3 server on 127.0.0.1 for the tests that talk to S3, and the AWS_* environment pointing every process
(workers included) at it: tests/test_s3.py serves moto as it is, tests/shuffle/test_s3_requests.py its own
request-counting wrapper (tests/s3_requests.py)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import fsspec
import pytest

STARTUP_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(command: Callable[[int], list[str]], health: str, log_path: Path) -> Iterator[str]:
    """Start ``command(port)``, wait until ``GET health`` answers, and yield the endpoint URL with the AWS_*
    environment set to it (any profile or session of the machine's own unset); stop the server after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command(port), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{url}{health}", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start: {log_path.read_text()[-2000:]}") from None
                time.sleep(0.1)
        with pytest.MonkeyPatch.context() as env:
            for name in (
                "AWS_PROFILE",
                "AWS_SESSION_TOKEN",
                "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE",
            ):
                env.delenv(name, raising=False)
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_DEFAULT_REGION", "us-east-1")
            env.setenv("AWS_ENDPOINT_URL", url)
            fsspec.filesystem("s3").clear_instance_cache()  # no instance made before these variables
            yield url
            fsspec.filesystem("s3").clear_instance_cache()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
