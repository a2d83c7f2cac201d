"""How big are zephyr's Parquet outputs, and what do their settings cost to write and to read?

The rows of the medium docs corpus (``../shared/corpus``, cached under ``~/.cache/zephyr/corpus/medium/docs``)
are written once per setting through the writer zephyr's sinks use (``zephyr.io.sinks.ParquetWriter``
options, ``WRITER_OPTIONS``), beside peers writing the same table with their defaults (polars
``write_parquet``; duckdb ``COPY ... (FORMAT parquet)``) and the input files as they are. Each setting is
timed best of ``--repeat`` (interleaved): the write, a full read with pyarrow (``pq.read_table``), and a
full read with polars (``pl.read_parquet``). Sizes are bytes on disk.

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/parquet_output.py [--repeat 3]

Appends nothing: the table is printed as Markdown, for the month's notebook (benchmarks/history/<YYYY-MM>.md)
and the compression rows of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CORPUS = Path.home() / ".cache" / "zephyr" / "corpus" / "medium" / "docs"

SETTINGS: dict[str, dict] = {
    "zstd 1, dictionary (before)": {"compression": "zstd", "use_dictionary": True},
    "zstd 3, dictionary": {"compression": "zstd", "compression_level": 3, "use_dictionary": True},
    "zstd 6, dictionary": {"compression": "zstd", "compression_level": 6, "use_dictionary": True},
    "zstd 9, dictionary": {"compression": "zstd", "compression_level": 9, "use_dictionary": True},
}


def _zephyr_now() -> dict:
    from zephyr.io.sinks import WRITER_OPTIONS

    return dict(WRITER_OPTIONS)


def _write_pyarrow(table: pa.Table, path: str, options: dict, row_group_rows: int) -> None:
    with pq.ParquetWriter(path, table.schema, write_statistics=True, **options) as writer:
        for start in range(0, table.num_rows, row_group_rows):
            writer.write_table(table.slice(start, row_group_rows), row_group_size=row_group_rows)


def _write_polars(table: pa.Table, path: str) -> None:
    import polars as pl

    pl.from_arrow(table).write_parquet(path)


def _write_duckdb(table: pa.Table, path: str) -> None:
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    con.close()


def _read_times(path: str) -> tuple[float, float]:
    import polars as pl

    started = time.perf_counter()
    pq.read_table(path)
    arrow_s = time.perf_counter() - started
    started = time.perf_counter()
    pl.read_parquet(path)
    return arrow_s, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--row-group-bytes", type=int, default=64 << 20, help="row group size (Arrow bytes)")
    args = parser.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.corpus, "*.parquet")))
    if not files:
        raise SystemExit(f"no Parquet under {args.corpus}: build the corpus (../shared/corpus/build.py)")
    table = pa.concat_tables(pq.read_table(f) for f in files).combine_chunks()
    input_bytes = sum(os.path.getsize(f) for f in files)
    rows_per_group = max(1, int(table.num_rows * args.row_group_bytes / max(table.nbytes, 1)))
    writers = {
        name: (lambda t, p, o=o: _write_pyarrow(t, p, o, rows_per_group)) for name, o in SETTINGS.items()
    }
    writers["zephyr now (WRITER_OPTIONS)"] = lambda t, p: _write_pyarrow(t, p, _zephyr_now(), rows_per_group)
    writers["polars default"] = _write_polars
    writers["duckdb default"] = _write_duckdb
    best: dict[str, list[float]] = {name: [float("inf")] * 3 for name in writers}
    sizes: dict[str, int] = {}
    scratch = tempfile.mkdtemp(prefix="parquet-output-")
    try:
        for _ in range(args.repeat):
            for name, write in writers.items():
                path = os.path.join(scratch, "out.parquet")
                started = time.perf_counter()
                write(table, path)
                write_s = time.perf_counter() - started
                sizes[name] = os.path.getsize(path)
                arrow_s, polars_s = _read_times(path)
                best[name] = [min(a, b) for a, b in zip(best[name], [write_s, arrow_s, polars_s])]
                os.remove(path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"{table.num_rows:,} rows, {table.nbytes / 1e6:.1f} MB in Arrow, input {input_bytes / 1e6:.1f} MB "
        f"({len(files)} files); row groups of {rows_per_group:,} rows; best of {args.repeat}, load "
        f"{os.getloadavg()[0]:.1f}\n"
    )
    print("| writer | MB on disk | × input | write s | read s (pyarrow) | read s (polars) |")
    print("|---|--:|--:|--:|--:|--:|")
    print(f"| the input files | {input_bytes / 1e6:.1f} | 1.00 | | | |")
    for name in writers:
        write_s, arrow_s, polars_s = best[name]
        print(
            f"| {name} | {sizes[name] / 1e6:.1f} | {sizes[name] / input_bytes:.2f} | {write_s:.2f} | "
            f"{arrow_s:.2f} | {polars_s:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
