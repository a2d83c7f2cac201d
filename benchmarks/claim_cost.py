"""What claiming an output costs (``zephyr.io.claim``): the lock, the
check of a folder's files against its manifest, the checksums a publish records, and a whole small write.

    .venv/bin/python benchmarks/claim_cost.py [--rounds 200] [--mb 256] [--s3] [--no-append]

Rows (each the median of ``--rounds`` rounds, on local disk unless said):

* ``lock``: ``claim.held`` of one lock file: open, ``flock``, write, remove;
* ``claim, N parts``: ``claim.claimed`` of an output a finished run wrote with N part files: the overlap
  check, the lock, the listing of the folder and the manifest read;
* ``checksum``: ``claim.file_record`` (xxh3-128) of one ``--mb`` MB file in the page cache, in GB/s: what a
  publish adds per byte written (on object stores the ETag is taken from the listing instead: no read);
* ``write_parquet, 4 parts``: a whole ``from_arrow(...).write_parquet`` of 1,000 rows in-process, against the
  same write with the claim and the manifest stubbed out (the difference is what the claim costs a write);
* ``lock on S3 (moto)`` (``--s3``): the same lock on a moto server on loopback (a conditional PUT, a GET and a
  DELETE): its latency is the loopback server's, a real store adds its round trips.

The Markdown section printed at the end is appended to the month's notebook, benchmarks/history/<YYYY-MM>.md,
unless ``--no-append``; the figures' rows in benchmarks/RESULTS.md are updated by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

import zephyr
from zephyr.io import claim

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import append_history  # noqa: E402


def _median_us(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def _lock_round(url: str) -> None:
    with claim.held(url, "bench", url):
        pass


def _claim_round(out: str) -> None:
    with claim.claimed(out):
        pass


def _published(root: Path, parts: int) -> str:
    out = root / f"out-{parts}"
    table = pa.table({"n": list(range(parts * 10))})
    zephyr.from_arrow(table, num_shards=parts).write_parquet(str(out), executor="inprocess")
    return str(out)


def _write(root: Path, n: int) -> None:
    out = root / f"w-{n}"
    zephyr.from_arrow(pa.table({"n": list(range(1000))}), num_shards=4).write_parquet(
        str(out), executor="inprocess", overwrite=True
    )


@contextlib.contextmanager
def _unclaimed():
    """``write_parquet`` with the claim, the lock and the manifest's checksums stubbed out: the baseline."""
    saved = claim.claimed, claim.file_record, claim.write_manifest, claim.write_pending
    claim.claimed = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]
    claim.file_record = lambda url: {"bytes": 0}  # type: ignore[assignment]
    claim.write_manifest = claim.write_pending = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        claim.claimed, claim.file_record, claim.write_manifest, claim.write_pending = saved


def _s3_lock_us(rounds: int) -> float:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(number)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        endpoint = f"http://127.0.0.1:{number}"
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        os.environ.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=endpoint,
        )
        import fsspec

        fsspec.filesystem("s3").mkdir("bench")
        return _median_us(lambda: _lock_round("s3://bench/out.zephyr/lock.json"), rounds)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--s3", action="store_true", help="also the lock on a moto S3 server on loopback")
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="zephyr-claim-cost-"))
    rows: list[tuple[str, str]] = []
    try:
        rows.append(
            (
                "lock (create + remove)",
                f"{_median_us(lambda: _lock_round(str(root / 'l.json')), args.rounds):.0f} µs",
            )
        )
        for parts in (4, 64, 512):
            out = _published(root, parts)
            rows.append(
                (f"claim, {parts} parts", f"{_median_us(lambda o=out: _claim_round(o), args.rounds):.0f} µs")
            )
        big = root / "big.bin"
        big.write_bytes(os.urandom(args.mb << 20))
        claim.file_record(str(big))  # into the page cache
        best = min(_median_us(lambda: claim.file_record(str(big)), 1) for _ in range(5)) / 1e6
        rows.append((f"checksum (xxh3-128, {args.mb} MB in page cache)", f"{args.mb / 1024 / best:.2f} GB/s"))
        counter = iter(range(10**9))
        rounds = max(10, args.rounds // 10)
        claimed = _median_us(lambda: _write(root, next(counter)), rounds)
        with _unclaimed():
            bare = _median_us(lambda: _write(root, next(counter)), rounds)
        rows.append(
            (
                "write_parquet, 1,000 rows, 4 parts",
                f"{claimed / 1000:.1f} ms claimed, {bare / 1000:.1f} ms without",
            )
        )
        if args.s3:
            rows.append(
                ("lock on S3 (moto on loopback)", f"{_s3_lock_us(max(20, args.rounds // 10)) / 1000:.1f} ms")
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"### Claim and lock cost (benchmarks/claim_cost.py) — {when}, {commit}, {platform.machine()} "
        f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "",
        f"`.venv/bin/python benchmarks/claim_cost.py --rounds {args.rounds} --mb {args.mb}{' --s3' if args.s3 else ''}`",
        "",
        "| what | cost |",
        "|---|---|",
        *(f"| {what} | {cost} |" for what, cost in rows),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_append:
        append_history(text)


if __name__ == "__main__":
    main()
