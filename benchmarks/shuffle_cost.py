"""What a hash shuffle costs on S3 at 10 TB and 100 TB, from the cost model the code uses
(``shuffle_model.py``; docs/engine.md "What a shuffle costs"; checked request for request against a moto
S3 server by tests/shuffle/test_s3_requests.py): requests by class, request-seconds at S3's per-prefix rates
(5,500 GET/s, 3,500 PUT/s), dollars at S3 Standard list prices ($0.0004 per 1,000 GET, $0.005 per 1,000 PUT)
and bytes moved — for the reducers reading the map runs as they are and coalesced, and as main 0353c3a read
them (before this change: per run an index header and entry plus the index size, per blob two sizes and
s3fs reads that fetch from the blob to the end of its run file, 50 MiB at most).

    .venv/bin/python benchmarks/shuffle_cost.py [--sizes 10TB,100TB] [--task-bytes 128MB] [--budget 1GiB]
        [--workers 100,1000]

Prints a Markdown table (the one in benchmarks/history/2026-11.md, summed up in benchmarks/RESULTS.md).
Nothing runs: this is arithmetic.

What the coalescing pass costs in time, measured:

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/shuffle_cost.py --measure CORPUS_DIR \
        [--repeat 3] [--memory-budget 64MB] [--s3-tasks 200]

runs ``zephyr sort CORPUS_DIR --by url`` (local executor, 2 workers, a local work dir) with ``--coalesce-runs
never`` and ``always``, interleaved, ``--repeat`` times: best wall, peak RSS of the process tree, the output
files' sha256 (equal, or the row says so). With ``--s3-tasks N`` it also sorts N small Parquet files into N
partitions with the work dir on a moto S3 server on loopback (tests/s3_requests.py, counting requests), the
runs read as they are and coalesced: wall seconds and requests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import shuffle_model as cost  # noqa: E402

from zephyr.config import format_bytes, parse_bytes  # noqa: E402

LEGACY_FOOTER_READ = 64 << 10
"""pyarrow reads a Parquet file's last 64 KiB first: a blob up to that size came in that one read."""


def legacy(shape: cost.Shape) -> dict[str, cost.Cost]:
    """The shuffle as main 0353c3a ran it: map side as now (a 16 + 24·R byte index), and per reducer and run:
    the index header and entry (two ranged GETs) and its size (HEAD); per blob: the data file's size (HEAD),
    an open (HEAD) and s3fs read-ahead reads from the footer and from the blob's start, each fetching up to
    50 MiB past it or to the end of the run (measured on moto: a 104 KB blob at the start of a 6.6 MB run
    cost 2 GETs of 13.3 MB)."""
    r, n, m = shape.num_partitions, shape.runs, shape.map_tasks
    run_data = shape.data_bytes // n
    blob = run_data // r
    gets = 1 if blob <= LEGACY_FOOTER_READ else 2
    # bytes a GET at partition p's blob fetches: to the end of the run, 50 MiB (s3fs's block) at most
    fetched = sum(min(cost.S3FS_BLOCK + blob, run_data - p * blob) for p in range(r)) * gets
    map_side = cost.map_task([(run_data, 16 + 24 * r)] * shape.spills).times(m)
    per_reducer = cost.MARKER_CHECK + cost.ATOMIC_WRITE + cost.Cost.of(GET=2 * n, HEAD=n)
    per_reducer = per_reducer + cost.Cost.of(GET=gets * n, HEAD=2 * n)
    reduce = per_reducer.times(r)
    reduce.read_bytes = n * (24 + 16) * r + n * fetched
    return {"map": map_side, "coalesce": cost.Cost(), "reduce": reduce}


def _count(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} G"
    if n >= 1e6:
        return f"{n / 1e6:.1f} M"
    if n >= 1e3:
        return f"{n / 1e3:.0f} k"
    return f"{n:.0f}"


def _bytes(n: float) -> str:
    """Decimal units, as storage is sold: 10 TB is 10¹³ bytes."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _seconds(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.1f} d"
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def rows(sizes: list[int], task_bytes: int, budget: int, workers: list[int]) -> list[str]:
    out = [
        "| data | W | reducers read | M | N runs | R | C | GET+HEAD | PUT+COPY+POST+LIST | per reducer "
        "| request-time at one prefix | $ list price | bytes read | bytes written |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for size in sizes:
        for w in workers:
            shape = cost.Shape(size, task_bytes, budget, w)
            groups = len(shape.groups)
            for label, phases in (
                ("map runs, main 0353c3a", legacy(shape)),
                ("map runs, this change", shape.cost(coalesce=False)),
                ("coalesced", shape.cost(coalesce=True)),
            ):
                total = phases["map"] + phases["coalesce"] + phases["reduce"]
                per_reducer = phases["reduce"].total / shape.num_partitions
                out.append(
                    f"| {_bytes(size)} | {w:,} | {label} | {shape.map_tasks:,} | {shape.runs:,} "
                    f"| {shape.num_partitions:,} | {groups if label == 'coalesced' else '—'} "
                    f"| {_count(total.get_class)} | {_count(total.put_class)} | {_count(per_reducer)} "
                    f"| {_seconds(total.prefix_seconds)} | {total.dollars:,.0f} "
                    f"| {_bytes(total.read_bytes)} | {_bytes(total.written_bytes)} |"
                )
    return out


def _digest(folder: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.glob("part-*")):
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def measure_local(corpus: str, repeat: int, budget: str, scratch: Path) -> list[str]:
    """``zephyr sort`` of ``corpus`` with coalescing off and forced on, interleaved: the pass's time on a disk."""
    from _measure import run_measured

    zephyr_cli = str(Path(sys.executable).parent / "zephyr")
    best: dict[str, dict] = {}
    for attempt in range(repeat):
        for mode in ("never", "always") if attempt % 2 == 0 else ("always", "never"):
            out, work = scratch / f"out-{mode}", scratch / f"work-{mode}"
            for folder in (out, work):
                if folder.exists():
                    import shutil

                    shutil.rmtree(folder)
            cmd = [zephyr_cli, "sort", corpus, "--by", "url", "--output", str(out), "--executor", "local"]
            cmd += ["--workers", "2", "--small-job-bytes", "0", "--memory-budget", budget]
            cmd += ["--work-dir", str(work), "--coalesce-runs", mode]
            result = run_measured(cmd, log_path=str(scratch / f"{mode}.log"))
            if result["rc"]:
                raise SystemExit(f"{' '.join(cmd)} failed: see {scratch / f'{mode}.log'}")
            stats = json.loads((work / "stats.json").read_text())
            result["digest"] = _digest(out)
            result["stages"] = [(s["stage"], s["tasks"], s["wall_seconds"]) for s in stats["stages"]]
            if mode not in best or result["wall_s"] < best[mode]["wall_s"]:
                best[mode] = result
    lines = [
        f"`zephyr sort {corpus} --by url --executor local --workers 2 --memory-budget {budget}`, best of {repeat}:",
        "",
        "| --coalesce-runs | wall s | peak RSS MB | stages (tasks, wall s) | output sha256 |",
        "|---|--:|--:|---|---|",
    ]
    for mode, r in best.items():
        stages = "; ".join(f"{name} ({n}, {s:.1f})" for name, n, s in r["stages"])
        lines.append(f"| {mode} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | {stages} | {r['digest']} |")
    same = best["never"]["digest"] == best["always"]["digest"]
    lines.append(f"\nOutputs identical: {same}.")
    return lines


def measure_s3(tasks: int, scratch: Path) -> list[str]:
    """N files sorted into N partitions with the work dir on a counting moto server: requests and wall seconds."""
    import os
    import socket
    import subprocess
    import time
    import urllib.request
    import uuid

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import s3_requests

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with open(scratch / "moto.log", "wb") as log:
        server = subprocess.Popen([sys.executable, s3_requests.__file__, str(port)], stdout=log, stderr=log)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{endpoint}/_requests", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=endpoint,
        )
        import fsspec

        import zephyr

        fs = fsspec.filesystem("s3")
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        fs.mkdir(bucket)
        rng = np.random.default_rng(0)
        for i in range(tasks):
            table = pa.table({"id": np.arange(i * 200, (i + 1) * 200), "key": rng.integers(0, 1 << 40, 200)})
            with fs.open(f"{bucket}/in/f{i:05d}.parquet", "wb") as f:
                pq.write_table(table, f)
        lines = [
            f"`sort` of {tasks} Parquet files (200 rows each) into {tasks} partitions, work dir on moto S3 on "
            "loopback, local executor, 2 workers:",
            "",
            "| runs read | wall s | requests | GET+HEAD | PUT+COPY+POST+LIST | on run files | rows equal |",
            "|---|--:|--:|--:|--:|--:|---|",
        ]
        tables = {}
        for mode in ("never", "auto"):
            s3_requests.fetch(endpoint, clear=True)
            started = time.perf_counter()
            tables[mode] = (
                zephyr.read_parquet(f"s3://{bucket}/in/*.parquet")
                .sort("key", num_partitions=tasks)
                .to_arrow(
                    executor="local",
                    workers=2,
                    work_dir=f"s3://{bucket}/work-{mode}",
                    small_job_bytes=0,
                    coalesce_runs=mode,
                    memory_budget="64MiB",
                )
            )
            wall = time.perf_counter() - started
            seen = s3_requests.fetch(endpoint, clear=True)
            kinds = s3_requests.count(seen)
            runs = sum(1 for r in seen if "/runs/" in r.key)
            got = cost.Cost.of(**kinds)
            label = "as they are" if mode == "never" else "coalesced"
            lines.append(
                f"| {label} | {wall:.0f} | {got.total:,} | {got.get_class:,} | {got.put_class:,} | {runs:,} "
                f"| {tables[mode].equals(tables['never'])} |"
            )
        return lines
    finally:
        server.terminate()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10TB,100TB")
    parser.add_argument("--task-bytes", default="128MB", help="input bytes per map task")
    parser.add_argument("--budget", default="1GiB", help="memory_budget per task")
    parser.add_argument("--workers", default="100,1000")
    parser.add_argument("--measure", default=None, help="a corpus folder to sort with and without coalescing")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-budget", default="64MB", help="of the measured sort")
    parser.add_argument(
        "--s3-tasks", type=int, default=0, help="also sort N files into N partitions on moto S3"
    )
    parser.add_argument("--scratch", default=str(Path(__file__).resolve().parent / ".out" / "shuffle_cost"))
    args = parser.parse_args(argv)
    if args.measure or args.s3_tasks:
        scratch = Path(args.scratch)
        scratch.mkdir(parents=True, exist_ok=True)
        if args.measure:
            print("\n".join(measure_local(args.measure, args.repeat, args.memory_budget, scratch)) + "\n")
        if args.s3_tasks:
            print("\n".join(measure_s3(args.s3_tasks, scratch)) + "\n")
        return 0
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    task, budget = parse_bytes(args.task_bytes), parse_bytes(args.budget)
    shape = cost.Shape(sizes[0], task, budget, workers[0])
    print(
        f"task {_bytes(task)}, budget {format_bytes(budget)}: {shape.spills} spills per map task, "
        f"chunk {format_bytes(shape.budget.spill_row_group_bytes)}, coalesce window "
        f"{format_bytes(shape.budget.coalesce_window_bytes)}, upload part {format_bytes(shape.budget.upload_part_bytes)}; "
        f"mean part at {_bytes(sizes[0])}: "
        f"{format_bytes(sizes[0] // (shape.runs * shape.num_partitions))} "
        f"(coalesced below {format_bytes(cost.COALESCE_PART_BYTES)})\n"
    )
    print("\n".join(rows(sizes, task, budget, workers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
