"""zephyr on dask: the engine's group-by and global sort on a LocalCluster vs the local executor vs dask.dataframe.

    .venv/bin/python benchmarks/dask_bench.py [--corpus /work/corpus/medium/docs] [--repeat 2]
        [--engines zephyr-local,zephyr-dask,dask-dataframe] [--workloads groupby_key,sort_url]
        [--budget 1GiB] [--no-append]

Input and workloads are engine_bench.py's (imported from it, so both benchmarks measure the same thing): the
corpus' ``docs/*.parquet`` copied once with an added ``key = xxh64(text) % 1_000_000`` column (cached under
``benchmarks/.out/engine/prepared``);

* ``groupby_key``: ``group_by(key).count()`` — about one group per row, a high-cardinality hash shuffle;
* ``sort_url``: global sort of all columns by ``url`` (string), written in order.

Engines, each run in its own subprocess (so its peak memory is its own), 2 workers × 1 thread everywhere:

* ``zephyr-local``: the local executor, 2 spawned workers (their start-up is on the clock, as in every job);
* ``zephyr-dask``: the same plan with ``executor=Client`` on a LocalCluster from
  ``zephyr.executors.dask.start_local_cluster(2)``, started before the clock;
* ``dask-dataframe``: ``dask.dataframe`` on the same kind of cluster, ``shuffle_method="p2p"``
  (engine_bench.run_dask).

All zephyr runs use the same ``memory_budget``, so zephyr-local and zephyr-dask must write byte-identical
files; the report says whether they did. Every output is checked against polars (engine_bench.check). Wall time
is the best of ``--repeat`` interleaved runs (all listed); peak RSS is the largest over the runs of the sum over
the child's process tree (driver + workers), sampled every 20 ms, and of the largest single process.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import engine_bench as eb  # noqa: E402

ENGINES = ("zephyr-local", "zephyr-dask", "dask-dataframe")
WORKLOADS = ("groupby_key", "sort_url")
RESULTS = HERE / "RESULTS.md"


def _digest(out: str) -> str:
    """sha256 over the output files (names and bytes), for the local-vs-dask identity check."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(out, "*.parquet"))):
        h.update(os.path.basename(path).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def child(args: argparse.Namespace) -> None:
    """One measured run: start what the engine needs, time the work, write a JSON result."""
    import pyarrow.parquet  # noqa: F401 - imports before the clock, as for every engine
    from distributed import Client

    import zephyr.job  # noqa: F401
    from zephyr.executors.dask import start_local_cluster

    files = sorted(glob.glob(os.path.join(args.input, "*.parquet")))
    shutil.rmtree(args.out, ignore_errors=True)
    cluster = client = None
    if args.engine != "zephyr-local":
        import dask.dataframe  # noqa: F401

        cluster = start_local_cluster(2)
        # dask.dataframe finds its client as the default one; zephyr gets it passed explicitly
        client = Client(cluster.scheduler_address, set_as_default=args.engine == "dask-dataframe")
        cluster.wait(client)
    columns = eb.WORKLOAD_COLUMNS[args.workload]
    started = time.perf_counter()
    if args.engine == "zephyr-local":
        extra = eb.run_zephyr(args.workload, files, args.out, columns=columns, budget=args.budget)
    elif args.engine == "zephyr-dask":
        extra = eb.run_zephyr(
            args.workload, files, args.out, columns=columns, budget=args.budget, executor=client
        )
    else:
        extra = eb.run_dask(args.workload, files, args.out)
    wall = time.perf_counter() - started
    if client is not None:
        client.close()
        cluster.close()
    Path(args.result).write_text(json.dumps({"wall_s": wall, "hwm_self_mib": eb._hwm_mib("self"), **extra}))


def bench(args: argparse.Namespace, argv: list[str]) -> str:
    scratch = Path(args.scratch)
    manifest = eb.prepare(args.corpus, Path(args.prepared))
    files = manifest["files"]
    logs = scratch / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    expected = {w: eb.reference(w, files) for w in args.workloads}
    results: dict[tuple[str, str], list[dict]] = {}
    loads = [os.getloadavg()[0]]
    for rep in range(args.repeat):
        for workload in args.workloads:
            for engine in args.engines:
                out = str(scratch / "out" / f"{engine}-{workload}")
                cmd = [
                    sys.executable, str(Path(__file__).resolve()), "child", "--engine", engine, "--workload",
                    workload, "--input", str(Path(args.prepared)), "--out", out, "--budget", args.budget,
                    "--result", str(scratch / "result.json"),
                ]  # fmt: skip
                run = eb.measure(cmd, scratch / "result.json", logs / f"{engine}-{workload}-{rep}.log")
                run["check"] = eb.check(workload, out, expected[workload])
                run["digest"] = _digest(out) if engine.startswith("zephyr") else ""
                results.setdefault((engine, workload), []).append(run)
                loads += [run["load_before"], run["load_after"]]
                eb.print_run(rep, args.repeat, workload, engine, run, widths=(12, 15))
    (scratch / "runs.json").write_text(json.dumps({f"{e}|{w}": r for (e, w), r in results.items()}, indent=1))
    return render(args, manifest, results, loads, "python benchmarks/dask_bench.py " + " ".join(argv))


def render(args, manifest, results, loads, command: str) -> str:
    lines = [
        f"### zephyr on dask: group-by + count and global sort — {datetime.date.today().isoformat()}",
        f"`{command.strip()}`  ",
        f"{eb.machine()}. Input: {len(manifest['files'])} Parquet files, {manifest['rows']:,} rows, "
        f"{manifest['text_bytes'] / 1e6:.0f} MB text, {manifest['arrow_bytes'] / 2**20:.0f} MiB Arrow "
        f"(engine_bench.py's prepared copy, key = {manifest['key']}). 2 workers × 1 thread for every engine, "
        f"zephyr memory_budget={args.budget}. Best wall of {args.repeat} interleaved runs (all listed); RSS is the "
        f"largest over the runs. The machine is shared with other engineers' jobs (load average "
        f"{min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores), so times are noisy; ratios are the signal. "
        "zephyr-local starts its 2 worker processes on the clock; the dask LocalCluster is started before it.",
        "",
        "| workload | engine | wall s (best) | runs | peak RSS tree sum MiB | largest process MiB | output check "
        "| bytes = zephyr-local |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload in args.workloads:
        local = results.get(("zephyr-local", workload), [{}])[0].get("digest")
        for engine in args.engines:
            runs = results.get((engine, workload))
            if not runs:
                continue
            best = min(r["wall_s"] for r in runs)
            same = "—"
            if engine == "zephyr-dask" and local:
                same = "yes" if all(r["digest"] == local for r in runs) else "NO"
            walls = " / ".join(f"{r['wall_s']:.2f}" for r in runs)
            lines.append(
                f"| {workload} | {engine} | {best:.2f} | {walls} | "
                f"{max(r['peak_tree_sum_mib'] for r in runs):.0f} | {max(r['peak_process_mib'] for r in runs):.0f} "
                f"| {runs[0]['check']} | {same} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run")
    run.add_argument("--corpus", default="/work/corpus/medium/docs")
    run.add_argument("--scratch", default=str(HERE / ".out" / "dask"))
    run.add_argument(
        "--prepared", default=str(HERE / ".out" / "engine" / "prepared"), help="shared with engine_bench"
    )
    run.add_argument("--budget", default="1GiB", help="zephyr memory_budget per worker")
    run.add_argument("--repeat", type=int, default=2)
    run.add_argument("--engines", default=",".join(ENGINES))
    run.add_argument("--workloads", default=",".join(WORKLOADS))
    run.add_argument("--no-append", action="store_true")
    c = sub.add_parser("child")
    for flag in ("--engine", "--workload", "--input", "--out", "--budget", "--result"):
        c.add_argument(flag, required=True)
    if not argv or argv[0].startswith("-"):
        argv = ["run", *argv]
    args = parser.parse_args(argv)
    if args.command == "child":
        child(args)
        return
    args.engines = [e for e in args.engines.split(",") if e]
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(args.engines) - set(ENGINES)) + sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown engine/workload {unknown}; engines {ENGINES}, workloads {WORKLOADS}")
    text = bench(args, argv[1:] if argv[0] == "run" else argv)
    print()
    print(text)
    if not args.no_append:
        with open(RESULTS, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
