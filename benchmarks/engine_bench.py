"""Engine benchmark: zephyr vs duckdb, polars and dask.dataframe on group-by + count and a global string sort.

    .venv/bin/python benchmarks/engine_bench.py [--corpus /work/corpus/medium/docs] [--repeat 3]
        [--engines zephyr,zephyr-all-columns,duckdb,polars,dask] [--workloads groupby_key,groupby_source_lang,sort_url]
        [--ooc-budget 64MiB] [--no-ooc] [--no-append]
    .venv/bin/python benchmarks/engine_bench.py profile --workload sort_url [--executor inprocess] [--top 40]

Input. ``prepare`` (run automatically, cached) copies the corpus' ``docs/*.parquet`` into
``<scratch>/prepared/`` with the same files and row groups plus one column ``key`` (int64) =
``xxh64(text) % 1_000_000``, so every engine groups the same precomputed integer column.
``<scratch>/prepared/PREPARED.json`` (``version`` 1) records the source files, rows and Arrow bytes.

Workloads (each engine reads the prepared Parquet from disk and writes its result as zstd Parquet):

* ``groupby_key``: ``group_by(key).count()`` (about one group per row: a high-cardinality shuffle);
* ``groupby_source_lang``: ``group_by(source, lang).count()`` (low cardinality, strings);
* ``sort_url``: global sort of all columns by ``url`` (string), sorted output written in order.

Engines, each in its own subprocess so that its peak memory is its own:

* ``zephyr``: ``read_parquet(files, columns=<the workload's columns>)`` → op → ``write_parquet``, local
  executor, 2 workers, ``memory_budget=1GiB``. zephyr has no projection pushdown, so the columns are named by
  hand, as duckdb/polars/dask infer them;
* ``zephyr-all-columns``: the same without ``columns=`` (what ``read_parquet(...).group_by(...)`` costs as
  written; only differs from ``zephyr`` for the group-bys);
* ``duckdb``: ``COPY (SELECT ... ) TO ... (FORMAT parquet)`` with ``threads=2``;
* ``polars``: ``scan_parquet(...).<op>.collect()`` (in-memory engine) then ``write_parquet``;
* ``dask``: ``dask.dataframe`` on a ``LocalCluster`` of 2 worker processes × 1 thread, ``shuffle_method="p2p"``
  (group-bys with ``split_out`` = input partitions, so they shuffle). The cluster is started before the clock.

Out-of-core: zephyr ``group_by(key).count()`` over all columns and ``sort(url)`` with ``memory_budget`` =
``--ooc-budget`` (the prepared corpus is about 6× a 64 MiB budget in Arrow bytes), with the peak RSS of the
driver and of each worker process, against the target ``1.25 × budget + interpreter baseline`` per worker.

Measurement. Wall time is taken inside the child around the work (read → compute → write), after the
engine's modules are imported (and, for dask, the cluster is up); zephyr's local executor starts its worker
processes inside every job, so that start-up is on zephyr's clock. Memory is
sampled every 20 ms over the child's whole process tree: the peak of the *sum* of RSS over the tree, and per
process its ``VmHWM`` (the kernel's exact peak RSS of that address space; ``getrusage``'s ``ru_maxrss`` is not
used because a forked child inherits its parent's). "Largest process" is the max ``VmHWM`` over the tree; for
zephyr the driver and each worker are listed separately in the out-of-core table. The baseline is the
``VmHWM`` of a bare process that imports what a zephyr worker imports. Each (engine, workload) runs ``--repeat`` times,
interleaved with the others; the best wall time is reported with all runs listed, and the largest RSS of all
runs. Every output is checked (untimed) against a reference: the group-by counts equal polars' on the same
input, the sort output holds every input row (order-independent hash of ``id``) in non-decreasing ``url``
order. The Markdown section printed at the end is appended to benchmarks/RESULTS.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
PREPARED_VERSION = 1
KEY_MODULUS = 1_000_000
ENGINES = ("zephyr", "zephyr-all-columns", "duckdb", "polars", "dask")
WORKLOADS = ("groupby_key", "groupby_source_lang", "sort_url")
WORKLOAD_COLUMNS = {
    "groupby_key": ["key"],
    "groupby_source_lang": ["source", "lang"],
    "sort_url": None,  # all columns
}
GROUP_KEYS = {"groupby_key": ["key"], "groupby_source_lang": ["source", "lang"]}
SAMPLE_SECONDS = 0.02
DASK_SORT_PARTITION_BYTES = 128e6


# -- prepared input ---------------------------------------------------------------------------------------
def prepare(corpus: str, directory: Path) -> dict:
    """Copy ``corpus/*.parquet`` with an added ``key`` column (same files, same row groups); cached."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import xxhash

    sources = sorted(glob.glob(os.path.join(corpus, "*.parquet")))
    if not sources:
        raise SystemExit(
            f"no Parquet files under {corpus}; build the corpus (../shared/corpus/build.py) first"
        )
    directory = directory.resolve()
    manifest_path = directory / "PREPARED.json"
    fingerprint = [[s, os.path.getsize(s)] for s in sources]
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("version") == PREPARED_VERSION and manifest.get("sources") == fingerprint:
            return manifest
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rows = arrow_bytes = text_bytes = 0
    for source in sources:
        reader = pq.ParquetFile(source)
        target = directory / os.path.basename(source)
        writer = None
        for group in range(reader.num_row_groups):
            table = reader.read_row_group(group)
            # No vectorized xxh64 exists in Arrow/polars; this one-off preparation hashes per row (88k docs).
            keys = [
                xxhash.xxh64_intdigest(t.encode()) % KEY_MODULUS for t in table.column("text").to_pylist()
            ]
            table = table.append_column("key", pa.array(keys, type=pa.int64()))
            if writer is None:
                writer = pq.ParquetWriter(target, table.schema, compression="zstd")
            writer.write_table(table, row_group_size=table.num_rows)
            rows += table.num_rows
            arrow_bytes += table.nbytes
            text_bytes += sum(len(t.encode()) for t in table.column("text").to_pylist())
        writer.close()
    manifest = {
        "version": PREPARED_VERSION,
        "sources": fingerprint,
        "files": sorted(str(p) for p in directory.glob("*.parquet")),
        "rows": rows,
        "arrow_bytes": arrow_bytes,
        "text_bytes": text_bytes,
        "parquet_bytes": sum(p.stat().st_size for p in directory.glob("*.parquet")),
        "key": f"xxh64(text) % {KEY_MODULUS}",
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


# -- the engines (run inside the child process) -----------------------------------------------------------
def run_zephyr(
    workload: str,
    files: list[str],
    out: str,
    *,
    columns: list[str] | None,
    budget: str,
    executor: str = "local",
    workers: int = 2,
) -> dict:
    import zephyr

    ds = zephyr.read_parquet(files, columns=columns)
    if workload == "sort_url":
        ds = ds.sort("url")
    else:
        ds = ds.group_by(*GROUP_KEYS[workload]).count()
    result = ds.write_parquet(out, executor=executor, workers=workers, memory_budget=budget, progress=False)
    return {
        "stages": [
            {
                k: s[k]
                for k in (
                    "stage",
                    "tasks",
                    "rows_in",
                    "rows_out",
                    "bytes_out",
                    "task_seconds",
                    "wall_seconds",
                )
            }
            for s in result.stats["stages"]
        ]
    }


def run_duckdb(workload: str, files: list[str], out: str) -> dict:
    import duckdb

    os.makedirs(out, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")
    source = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"
    if workload == "sort_url":
        query = f"SELECT * FROM {source} ORDER BY url"
    else:
        keys = ", ".join(GROUP_KEYS[workload])
        query = f"SELECT {keys}, count(*) AS count FROM {source} GROUP BY {keys}"
    con.execute(f"COPY ({query}) TO '{out}/part-0.parquet' (FORMAT parquet, COMPRESSION zstd)")
    con.close()
    return {}


def run_polars(workload: str, files: list[str], out: str) -> dict:
    import polars as pl

    os.makedirs(out, exist_ok=True)
    frame = pl.scan_parquet(files)
    if workload == "sort_url":
        frame = frame.sort("url")
    else:
        frame = frame.group_by(GROUP_KEYS[workload]).len(name="count")
    frame.collect().write_parquet(f"{out}/part-0.parquet", compression="zstd")
    return {}


def run_dask(workload: str, files: list[str], out: str) -> dict:
    """Runs on the ``distributed`` client made current by ``_start_dask``."""
    import dask.dataframe as dd

    ddf = dd.read_parquet(files, columns=WORKLOAD_COLUMNS[workload])
    if workload == "sort_url":
        result = ddf.sort_values("url", shuffle_method="p2p")
    else:
        sizes = ddf.groupby(GROUP_KEYS[workload]).size(split_out=ddf.npartitions, shuffle_method="p2p")
        result = sizes.to_frame("count").reset_index()
    result.to_parquet(out, write_index=False, compression="zstd")
    return {"input_partitions": ddf.npartitions}


def _start_dask():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    return cluster, Client(cluster)


def _preimport(engine: str) -> None:
    """Import the engine's modules before the clock starts, so no engine is charged for its imports in the
    driver. (zephyr's spawned workers still import zephyr in each job: that is part of every zephyr job.)"""
    import importlib

    modules = {
        "zephyr": [
            "zephyr",
            "zephyr.job",
            "zephyr.tasks",
            "zephyr.executors.local",
            "polars",
            "pyarrow.parquet",
        ],
        "duckdb": ["duckdb"],
        "polars": ["polars"],
        "dask": ["dask.dataframe", "distributed"],
    }[engine.removesuffix("-all-columns")]
    for name in modules:
        importlib.import_module(name)


def child(args: argparse.Namespace) -> None:
    """One measured run: do the work, write a JSON result (wall time, own VmHWM)."""
    files = sorted(glob.glob(os.path.join(args.input, "*.parquet")))
    shutil.rmtree(args.out, ignore_errors=True)
    cluster = client = None
    extra: dict = {}
    _preimport(args.engine)
    if args.engine == "dask":
        cluster, client = _start_dask()
        client.wait_for_workers(2)
    started = time.perf_counter()
    if args.engine in ("zephyr", "zephyr-all-columns"):
        columns = WORKLOAD_COLUMNS[args.workload] if args.engine == "zephyr" else None
        extra = run_zephyr(args.workload, files, args.out, columns=columns, budget=args.budget)
    elif args.engine == "duckdb":
        extra = run_duckdb(args.workload, files, args.out)
    elif args.engine == "polars":
        extra = run_polars(args.workload, files, args.out)
    elif args.engine == "dask":
        extra = run_dask(args.workload, files, args.out)
    else:
        raise SystemExit(f"unknown engine {args.engine}")
    wall = time.perf_counter() - started
    if client is not None:
        client.close()
        cluster.close()
    payload = {
        "wall_s": wall,
        "hwm_self_mib": _hwm_mib("self"),
        **extra,
    }
    Path(args.result).write_text(json.dumps(payload))


def baseline(args: argparse.Namespace) -> None:
    """Peak RSS of a bare zephyr worker: ``cold`` = the interpreter plus what a task imports; ``warm`` = after
    a 100-row group-by and sort in this process (library code pages, polars/Arrow thread pools and allocator
    arenas now resident) — the floor under which no worker that has run a task can go."""
    import zephyr.shuffle.reduce

    import zephyr
    import zephyr.executors.local
    import zephyr.tasks  # noqa: F401

    cold = _hwm_mib("self")
    tiny = zephyr.from_items([{"k": i % 7, "u": f"u{i}"} for i in range(100)])
    tiny.group_by("k").count().to_arrow(executor="inprocess", progress=False)
    tiny.sort("u").to_arrow(executor="inprocess", progress=False)
    Path(args.result).write_text(json.dumps({"cold_mib": cold, "warm_mib": _hwm_mib("self")}))


# -- measuring a child ------------------------------------------------------------------------------------
def measure(cmd: list[str], result_path: Path, log_path: Path) -> dict:
    """Run ``cmd``; sample the RSS of its process tree; merge with the JSON the child wrote."""
    result_path.unlink(missing_ok=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    per_pid: dict[int, tuple[str, float]] = {}
    peak_sum = 0.0
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            total = 0.0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    rss = p.memory_info().rss / 2**20
                    role = "child" if p.pid == proc.pid else _role(p)
                    hwm = max(rss, _hwm_mib(p.pid))
                except (psutil.Error, OSError):
                    continue
                total += rss
                if hwm > per_pid.get(p.pid, ("", 0.0))[1]:
                    per_pid[p.pid] = (role, hwm)
            peak_sum = max(peak_sum, total)
            time.sleep(SAMPLE_SECONDS)
    process_wall = time.perf_counter() - started
    if proc.returncode != 0 or not result_path.exists():
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {proc.returncode}); log {log_path}:\n{tail}")
    payload = json.loads(result_path.read_text())
    workers = sorted((rss for pid, (role, rss) in per_pid.items() if role == "worker"), reverse=True)
    payload.update(
        process_wall_s=process_wall,
        peak_tree_sum_mib=peak_sum,
        peak_driver_mib=max(payload["hwm_self_mib"], per_pid.get(proc.pid, ("", 0.0))[1]),
        peak_workers_mib=workers,
        peak_process_mib=max([payload["hwm_self_mib"], *(hwm for _, hwm in per_pid.values())]),
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )
    return payload


def _hwm_mib(pid: int | str) -> float:
    """``VmHWM`` of a process: the exact peak RSS of its current address space (reset by exec, unlike
    ``getrusage``'s ``ru_maxrss``, which a child inherits from the process that forked it)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _role(p: psutil.Process) -> str:
    """``worker`` for a worker process (zephyr's local executor runs ``zephyr.executors.worker``; dask's nanny
    uses ``multiprocessing`` spawn), ``helper`` for anything else (e.g. multiprocessing's resource tracker)."""
    cmdline = " ".join(p.cmdline())
    if "zephyr.executors.worker" in cmdline:
        return "worker"
    return "worker" if "spawn_main" in cmdline and "resource_tracker" not in cmdline else "helper"


# -- checking outputs (untimed) ---------------------------------------------------------------------------
def _natural(path: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", os.path.basename(path))]


def _output_files(out: str) -> list[str]:
    return sorted(glob.glob(os.path.join(out, "*.parquet")), key=_natural)


def reference(workload: str, files: list[str]):
    import polars as pl

    frame = pl.scan_parquet(files)
    if workload == "sort_url":
        ids = frame.select(pl.col("id").hash(seed=7).sum()).collect().item()
        return {"rows": frame.select(pl.len()).collect().item(), "id_hash": ids}
    keys = GROUP_KEYS[workload]
    return (
        frame.group_by(keys)
        .len(name="count")
        .with_columns(pl.col("count").cast(pl.Int64))
        .sort(keys)
        .collect()
    )


def check(workload: str, out: str, expected) -> str:
    import polars as pl

    files = _output_files(out)
    if not files:
        return "FAIL: no output files"
    if workload == "sort_url":
        frame = pl.concat([pl.read_parquet(f, columns=["id", "url"]) for f in files])
        if frame.height != expected["rows"]:
            return f"FAIL: {frame.height} rows, expected {expected['rows']}"
        if frame.select(pl.col("id").hash(seed=7).sum()).item() != expected["id_hash"]:
            return "FAIL: the set of ids differs from the input"
        urls = frame.get_column("url")
        if urls.null_count() or not (urls.slice(1) >= urls.slice(0, len(urls) - 1)).all():
            return "FAIL: url not in ascending order"
        return f"ok ({frame.height:,} rows sorted)"
    keys = GROUP_KEYS[workload]
    frame = pl.concat([pl.read_parquet(f) for f in files])
    frame = frame.select([*keys, pl.col("count").cast(pl.Int64)]).sort(keys)
    if not frame.equals(expected):
        return f"FAIL: {frame.height} groups differ from the reference's {expected.height}"
    return f"ok ({frame.height:,} groups)"


# -- the report -------------------------------------------------------------------------------------------
def machine() -> str:
    import dask
    import duckdb
    import polars
    import pyarrow

    return (
        f"{platform.node()}: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
        f"Python {platform.python_version()}, pyarrow {pyarrow.__version__}, polars {polars.__version__}, "
        f"duckdb {duckdb.__version__}, dask {dask.__version__}"
    )


def _fmt_runs(runs: list[dict]) -> str:
    return " / ".join(f"{r['wall_s']:.2f}" for r in runs)


def render(args, manifest, results, ooc, base, loads, command) -> str:
    date = datetime.date.today().isoformat()
    lines = [
        f"### Engine: group-by + count and global sort — {date}",
        f"`{command}`  ",
        f"{machine()}. Input: {len(manifest['files'])} Parquet files, {manifest['rows']:,} rows, "
        f"{manifest['text_bytes'] / 1e6:.0f} MB text, {manifest['arrow_bytes'] / 2**20:.0f} MiB Arrow, "
        f"{manifest['parquet_bytes'] / 1e6:.0f} MB zstd Parquet (page cache warm after the first run). "
        f"Best wall of {args.repeat} interleaved runs (all runs listed); RSS is the largest over the runs. "
        f"The machine is shared with other engineers' jobs: load average {min(loads):.1f}–{max(loads):.1f} "
        f"on {os.cpu_count()} cores during the runs, so absolute times are noisy and ratios are the signal. "
        f"Bare zephyr worker: {base['cold_mib']:.0f} MiB RSS after imports, {base['warm_mib']:.0f} MiB after a "
        "100-row job (library code, thread pools and allocator arenas resident).",
        "",
        "| workload | engine | wall s (best) | runs | peak RSS tree sum MiB | largest process MiB | output check |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload in args.workloads:
        for engine in args.engines:
            runs = results.get((engine, workload))
            if not runs:
                continue
            best = min(runs, key=lambda r: r["wall_s"])
            tree = max(r["peak_tree_sum_mib"] for r in runs)
            single = max(r["peak_process_mib"] for r in runs)
            lines.append(
                f"| {workload} | {engine} | {best['wall_s']:.2f} | {_fmt_runs(runs)} | {tree:.0f} | {single:.0f} "
                f"| {runs[0]['check']} |"
            )
    lines += [
        "",
        "Targets (zephyr = the `zephyr` row): wall ≤ 2× duckdb and ≤ ½ dask.",
        "",
        "| workload | zephyr / duckdb | dask / zephyr | met |",
        "|---|---|---|---|",
    ]
    for workload in args.workloads:
        best = {
            e: min(r["wall_s"] for r in results[(e, workload)])
            for e in args.engines
            if (e, workload) in results
        }
        if "zephyr" not in best:
            continue
        z = best["zephyr"]
        vs_duck = z / best["duckdb"] if "duckdb" in best else None
        vs_dask = best["dask"] / z if "dask" in best else None
        met = []
        if vs_duck is not None:
            met.append("duckdb ✓" if vs_duck <= 2 else f"duckdb ✗ ({vs_duck / 2:.1f}× over)")
        if vs_dask is not None:
            met.append("dask ✓" if vs_dask >= 2 else f"dask ✗ (needs {2 / vs_dask:.1f}× faster)")
        lines.append(
            f"| {workload} | {vs_duck:.2f}× | {vs_dask:.2f}× | {', '.join(met)} |"
            if vs_duck is not None and vs_dask is not None
            else f"| {workload} | {vs_duck} | {vs_dask} | {', '.join(met)} |"
        )
    if ooc:
        budget_mib = _mib(args.ooc_budget)
        limit = 1.25 * budget_mib + base["warm_mib"]
        cold_limit = 1.25 * budget_mib + base["cold_mib"]
        lines += [
            "",
            f"Out-of-core (zephyr, local executor, 2 workers, memory_budget={args.ooc_budget}; input "
            f"{manifest['arrow_bytes'] / 2**20:.0f} MiB Arrow = {manifest['arrow_bytes'] / 2**20 / budget_mib:.1f}× "
            f"the budget). Target per worker process: peak RSS ≤ 1.25 × {budget_mib:.0f} MiB + the warm baseline "
            f"{base['warm_mib']:.0f} MiB = {limit:.0f} MiB (with the cold baseline: {cold_limit:.0f} MiB):",
            "",
            "| workload | wall s (best) | runs | driver peak MiB | worker peaks MiB | tree sum MiB "
            "| per-worker target | check |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for workload, runs in ooc.items():
            best = min(runs, key=lambda r: r["wall_s"])
            workers = [
                max(r["peak_workers_mib"][i] if i < len(r["peak_workers_mib"]) else 0 for r in runs)
                for i in range(2)
            ]
            worker_peak = max(workers)
            verdict = "✓" if worker_peak <= limit else f"✗ ({worker_peak / limit:.2f}× the target)"
            lines.append(
                f"| {workload} | {best['wall_s']:.2f} | {_fmt_runs(runs)} | "
                f"{max(r['peak_driver_mib'] for r in runs):.0f} | {' / '.join(f'{w:.0f}' for w in workers)} | "
                f"{max(r['peak_tree_sum_mib'] for r in runs):.0f} | {verdict} | {runs[0]['check']} |"
            )
    return "\n".join(lines) + "\n"


def _mib(size: str) -> float:
    sys.path.insert(0, str(HERE.parent))
    from zephyr.config import parse_bytes

    return parse_bytes(size) / 2**20


# -- orchestration ----------------------------------------------------------------------------------------
def child_cmd(engine: str, workload: str, prepared: str, out: str, budget: str, result: Path) -> list[str]:
    return [
        sys.executable, str(Path(__file__).resolve()), "child", "--engine", engine, "--workload", workload,
        "--input", prepared, "--out", out, "--budget", budget, "--result", str(result),
    ]  # fmt: skip


def bench(args: argparse.Namespace, argv: list[str]) -> None:
    scratch = Path(args.scratch)
    manifest = prepare(args.corpus, scratch / "prepared")
    prepared = str(scratch / "prepared")
    files = manifest["files"]
    logs = scratch / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve())]
    base_path = scratch / "baseline.json"
    subprocess.run([*me, "baseline", "--result", str(base_path)], check=True)
    base = json.loads(base_path.read_text())

    expected = {w: reference(w, files) for w in args.workloads}
    results: dict[tuple[str, str], list[dict]] = {}
    loads: list[float] = [os.getloadavg()[0]]
    jobs = [
        (e, w)
        for w in args.workloads
        for e in args.engines
        if not (e == "zephyr-all-columns" and WORKLOAD_COLUMNS[w] is None)
    ]
    ooc_jobs = [] if args.no_ooc else ["groupby_key", "sort_url"]
    ooc: dict[str, list[dict]] = {}
    for rep in range(args.repeat):
        for engine, workload in jobs:
            out = str(scratch / "out" / f"{engine}-{workload}")
            cmd = child_cmd(engine, workload, prepared, out, args.budget, scratch / "result.json")
            run = measure(cmd, scratch / "result.json", logs / f"{engine}-{workload}-{rep}.log")
            run["check"] = check(workload, out, expected[workload]) if rep == 0 else ""
            results.setdefault((engine, workload), []).append(run)
            loads += [run["load_before"], run["load_after"]]
            print_run(rep, args.repeat, workload, engine, run)
        for workload in ooc_jobs:
            out = str(scratch / "out" / f"ooc-{workload}")
            cmd = child_cmd(
                "zephyr-all-columns", workload, prepared, out, args.ooc_budget, scratch / "result.json"
            )
            run = measure(cmd, scratch / "result.json", logs / f"ooc-{workload}-{rep}.log")
            run["check"] = check(workload, out, expected[workload]) if rep == 0 else ""
            ooc.setdefault(workload, []).append(run)
            loads += [run["load_before"], run["load_after"]]
            print(
                f"[{rep + 1}/{args.repeat}] ooc {workload:16s} zephyr {args.ooc_budget:8s} {run['wall_s']:7.2f} s"
                f"  driver {run['peak_driver_mib']:.0f} workers {[round(w) for w in run['peak_workers_mib']]} MiB"
                f"  {run['check']}",
                flush=True,
            )
    (scratch / "runs.json").write_text(
        json.dumps(
            {"results": {f"{e}|{w}": r for (e, w), r in results.items()}, "ooc": ooc, "baseline_mib": base},
            indent=1,
        )
    )
    command = "python benchmarks/engine_bench.py " + " ".join(argv)
    text = render(args, manifest, results, ooc, base, loads, command.strip())
    print()
    print(text)
    if not args.no_append:
        with open(RESULTS, "a") as f:
            f.write("\n" + text)


def profile(args: argparse.Namespace) -> None:
    """cProfile one zephyr workload in this process (``executor="inprocess"``) and print the top functions."""
    import cProfile
    import pstats

    manifest = prepare(args.corpus, Path(args.scratch) / "prepared")
    out = tempfile.mkdtemp(prefix="zephyr-bench-profile-")
    columns = None if args.all_columns else WORKLOAD_COLUMNS[args.workload]
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    extra = run_zephyr(
        args.workload,
        manifest["files"],
        out,
        columns=columns,
        budget=args.budget,
        executor=args.executor,
        workers=1,
    )
    profiler.disable()
    print(f"{args.workload}: {time.perf_counter() - started:.2f} s under cProfile; stages:")
    for stage in extra["stages"]:
        print(
            f"  {stage['stage']}: {stage['tasks']} tasks, wall {stage['wall_seconds']} s, rows {stage['rows_in']}"
            f" → {stage['rows_out']}, bytes out {stage['bytes_out']:,}"
        )
    stats = pstats.Stats(profiler).strip_dirs()
    if args.dump:
        stats.dump_stats(args.dump)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    shutil.rmtree(out, ignore_errors=True)


def print_run(
    rep: int, repeat: int, workload: str, engine: str, run: dict, *, widths: tuple[int, int] = (20, 18)
):
    """The progress line of one measured run: wall time, peak RSS of the process tree and of its largest
    process, and the output check (``widths``: of the workload and engine columns)."""
    wide_workload, wide_engine = widths
    print(
        f"[{rep + 1}/{repeat}] {workload:{wide_workload}s} {engine:{wide_engine}s} {run['wall_s']:7.2f} s  "
        f"tree {run['peak_tree_sum_mib']:6.0f} MiB  largest {run['peak_process_mib']:6.0f} MiB  "
        f"{run['check']}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    default_scratch = str(HERE / ".out" / "engine")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    for name in ("run", "profile"):
        p = sub.add_parser(name)
        p.add_argument("--corpus", default="/work/corpus/medium/docs")
        p.add_argument("--scratch", default=default_scratch)
        p.add_argument("--budget", default="1GiB", help="zephyr memory_budget for the side-by-side runs")
        if name == "run":
            p.add_argument("--repeat", type=int, default=3)
            p.add_argument("--engines", default=",".join(ENGINES))
            p.add_argument("--workloads", default=",".join(WORKLOADS))
            p.add_argument("--ooc-budget", default="64MiB")
            p.add_argument("--no-ooc", action="store_true")
            p.add_argument("--no-append", action="store_true")
        else:
            p.add_argument("--workload", choices=WORKLOADS, default="sort_url")
            p.add_argument("--executor", default="inprocess")
            p.add_argument("--all-columns", action="store_true")
            p.add_argument("--top", type=int, default=40)
            p.add_argument("--dump", default=None, help="also write the pstats file here")
    c = sub.add_parser("child")
    for flag in ("--engine", "--workload", "--input", "--out", "--budget", "--result"):
        c.add_argument(flag, required=True)
    b = sub.add_parser("baseline")
    b.add_argument("--result", required=True)
    if not argv or argv[0].startswith("-"):
        argv = ["run", *argv]
    args = parser.parse_args(argv)
    if args.command == "child":
        child(args)
    elif args.command == "baseline":
        baseline(args)
    elif args.command == "profile":
        profile(args)
    else:
        args.engines = [e for e in args.engines.split(",") if e]
        args.workloads = [w for w in args.workloads.split(",") if w]
        unknown = sorted(set(args.engines) - set(ENGINES)) + sorted(set(args.workloads) - set(WORKLOADS))
        if unknown:
            raise SystemExit(f"unknown engine/workload {unknown}; engines {ENGINES}, workloads {WORKLOADS}")
        bench(args, argv[1:] if argv[0] == "run" else argv)


if __name__ == "__main__":
    main()
