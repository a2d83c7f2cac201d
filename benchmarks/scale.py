"""Does zephyr scale on one machine? K renamed copies of the medium docs, every op, inside a 3 GiB memory cap.

The input: K copies of the medium corpus' ``docs`` (``~/.cache/zephyr/corpus/medium/docs``, built by
``/work/shared/corpus/build.py --scale medium``) whose words are renamed per copy, so that copies share no
shingle and the work grows with K instead of collapsing into duplicates. The renaming of copy ``c`` under seed
``s`` is a bijection on the words dedup's default normalization splits on (``text.lower().split()``): every
ASCII letter goes through a seeded permutation of the alphabet (the same one for both cases, so it commutes with
lower-casing), and every whitespace-separated token gets a two-letter tag of the copy appended (distinct tags of
equal length: tokens of two copies always differ in their last two letters). Whitespace is untouched, so a copy
has the same words, shingles and Jaccard similarities as the original up to Unicode case-mapping corner cases
(the ``normalize.py`` caveat); the tag makes the text about 30% longer. ``id`` and ``url`` get a ``kNNN/``
prefix, so ids are unique across copies and ``group_by(url)`` has K times the groups. A ``labels`` table per
copy (every other id, a label and a score) is the join's right side. Copies are built once per seed and kept
under ``--data``; a K-input is a folder of hard links to the first K copies.

Ops, each a fresh command with the user's defaults (``--workers 2``, the default memory budget and each
command's default executor):

- ``dedup_fuzzy``, ``dedup_exact``: ``zephyr dedup fuzzy|exact DOCS --mode remove``;
- ``sort``: ``zephyr sort DOCS --by id``;
- ``group_by``: ``group_by("url").agg(n=("id", "count"), chars=("text", "count"))`` and ``join``:
  ``docs.join(labels, on="id")`` on the Dataset API (``scale.py api``);
- ``tokenize``: ``zephyr tokenize DOCS --tokenizer models/gpt2/tokenizer.json``;
- the peer, duckdb (``scale.py duckdb``), for the ops it has (sort, group_by, join): one process, 2 threads,
  ``memory_limit`` ``--duckdb-memory`` (default 2GB) and a temp directory, under the same cap;
- ``--dask-k`` (default 8): the same zephyr ops on ``--executor dask`` (``dask scheduler`` + 2 ``dask worker
  --nthreads 1 --no-nanny`` processes on loopback, all in the cap), whose output files must be byte-identical
  to the local run's at the same K (sha256 over names and bytes).

The cap: every run's processes (and the dask cluster) go into a memory cgroup limited to ``--cap`` (3GiB), so
an op that outgrows it is OOM-killed, which the table reports. How, in order of preference: ``systemd-run
--user --scope -p MemoryMax=`` when a user manager answers; else a cgroup v2 folder created below this
process' own cgroup (``memory.max``); else a cgroup v1 folder below its own ``memory`` cgroup
(``memory.limit_in_bytes``, and ``memory.memsw.limit_in_bytes`` where writable; OOM kills counted from
``memory.oom_control``). On the benchmark VM (root, no user bus, cgroup v1 with ``memory`` mounted) the third
is what works. RLIMIT_AS is not used: it caps address space, not RSS (mmap'd files and arenas break it).

What it reports, per op, K and engine: wall time, throughput in MB/s of input text (UTF-8 bytes of the
``text`` column), the ratio of that to K = 1's, the peak RSS of the driver and of the largest worker process
(``_measure.run_sampled``; for dask, the scheduler and each worker, sampled the same way), the cap's own peak
(which counts the page cache), OOM kills, spill bytes (what the run's processes sent to storage, from
``/proc/PID/io``, less the output's own bytes: shuffle runs, intermediate outputs, duckdb's temp files; not for
dask, whose workers are not the command's children) and the per-stage split (the ``-v`` log's
stage lines). Dedup is checked for identity: a copy keeps the same ids alone and among K (copy 0: the K = 1
run; the last copy: one extra run on that copy alone). ``--seed`` gives another renaming; an earlier result of
the same seed and op (``results.json`` under ``--data``) supplies K = 1 when a run does not include it.

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/scale.py --ks 1,8 [--seed 1] [--ops ...]
        [--dask-k 8] [--cap 3GiB] [--no-duckdb] [--no-append]

The machine has 2 cores shared with other jobs: the load average at the start and the end goes with the table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import budget_mib, duckdb_copy, machine, publish, run_sampled  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")
DASK = [PYTHON, "-m", "dask"]
CORPUS = Path.home() / ".cache" / "zephyr" / "corpus" / "medium"
MIB = 2**20
OPS = ("dedup_fuzzy", "dedup_exact", "sort", "group_by", "join", "tokenize")
DUCKDB_OPS = ("sort", "group_by", "join")
DEDUP_OPS = ("dedup_fuzzy", "dedup_exact")
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
# Python's str.split() whitespace (dedup/normalize.py's class), as RE2 spells it
_WS = r"\t\n\x{0b}\x{0c}\r\x{1c}-\x{1f} \x{85}\p{Z}"
_TOKEN_END = rf"([^{_WS}])([{_WS}]|$)"
_STAGE = re.compile(r"INFO zephyr\.job: stage (.+?): (\d+) tasks .*?, ([0-9.]+)s$")


# -- the copies ------------------------------------------------------------------------------------------------


def letter_table(seed: int, copy: int) -> np.ndarray:
    """A byte lookup table: ASCII letters through one seeded permutation of the alphabet (both cases alike),
    every other byte unchanged. ASCII bytes never occur inside a multi-byte UTF-8 sequence, so mapping the
    data buffer byte by byte keeps it valid UTF-8."""
    perm = LETTERS[np.random.default_rng([seed, copy]).permutation(26)]
    table = np.arange(256, dtype=np.uint8)
    table[LETTERS] = perm
    table[LETTERS - 32] = perm - 32
    return table


def copy_tags(seed: int, copies: int) -> list[str]:
    """``copies`` distinct two-letter tags, a seeded choice (at most 676 copies)."""
    if copies > 676:
        raise SystemExit(f"at most 676 copies have distinct two-letter tags, asked for {copies}")
    codes = np.random.default_rng([seed, 1 << 20]).permutation(676)[:copies]
    return [chr(97 + c // 26) + chr(97 + c % 26) for c in codes]


def rename_text(values: pa.Array, table: np.ndarray, tag: str) -> pa.Array:
    """Every ASCII letter through ``table``, then ``tag`` after the last character of every token."""
    values = values.cast(pa.large_string()) if values.type != pa.large_string() else values
    validity, offsets, data = values.buffers()
    mapped = pa.py_buffer(table[np.frombuffer(data, dtype=np.uint8)]) if data is not None else None
    mapped_values = pa.Array.from_buffers(
        values.type, len(values), [validity, offsets, mapped], values.null_count, values.offset
    )
    return pc.replace_substring_regex(mapped_values, _TOKEN_END, rf"\1{tag}\2")


def word_bijection_errors(before: list[str], after: list[str]) -> int:
    """How many normalized words of ``before`` do not map one to one onto those of ``after`` (0: a bijection on
    these documents). Words are ``text.lower().split()``, dedup's Jaccard definition."""
    pairs = set()
    for old, new in zip(before, after):
        a, b = old.lower().split(), new.lower().split()
        if len(a) != len(b):
            return max(len(a), len(b))
        pairs.update(zip(a, b))
    return 2 * len(pairs) - len({a for a, _ in pairs}) - len({b for _, b in pairs})


def rename_table(table: pa.Table, seed: int, copy: int, tag: str) -> pa.Table:
    prefix = pa.scalar(f"k{copy:03d}/")
    letters = letter_table(seed, copy)
    text = rename_text(table.column("text").combine_chunks(), letters, tag)
    sample = [
        (a, b) for a, b in zip(table["text"].to_pylist()[:500], text.to_pylist()[:500]) if a is not None
    ]
    if errors := word_bijection_errors([a for a, _ in sample], [b for _, b in sample]):
        raise SystemExit(f"the renaming of copy {copy} is not a bijection on words: {errors} words collide")
    return (
        table.set_column(
            table.schema.get_field_index("text"), "text", text.cast(table.schema.field("text").type)
        )
        .set_column(
            table.schema.get_field_index("id"), "id", pc.binary_join_element_wise(prefix, table["id"], "")
        )
        .set_column(
            table.schema.get_field_index("url"), "url", pc.binary_join_element_wise(prefix, table["url"], "")
        )
    )


def build_copies(data: Path, seed: int, copies: int) -> Path:
    """Copies 0..``copies``-1 under ``data/seed{seed}/copies`` (kept: only missing copies are built)."""
    folder = data / f"seed{seed}" / "copies"
    folder.mkdir(parents=True, exist_ok=True)
    sources = sorted((Path(CORPUS) / "docs").glob("*.parquet"))
    if not sources:
        raise SystemExit(f"no corpus at {CORPUS}/docs: build it with /work/shared/corpus/build.py")
    tags = copy_tags(seed, copies)
    for copy in range(copies):
        done = folder / f"c{copy:03d}.done"
        if done.exists():
            continue
        t0 = time.perf_counter()
        text_bytes = 0
        for index, source in enumerate(sources):
            meta = pq.ParquetFile(source).metadata
            group_rows = max(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
            renamed = rename_table(pq.read_table(source), seed, copy, tags[copy])
            text_bytes += pc.sum(pc.binary_length(renamed["text"])).as_py() or 0
            pq.write_table(
                renamed,
                folder / f"c{copy:03d}-part-{index:05d}.parquet",
                row_group_size=group_rows,
                compression="zstd",
            )
            if index == 0:
                ids = renamed["id"].combine_chunks()
                keep = pc.equal(pc.bit_wise_and(pa.array(np.arange(len(ids))), 1), 0)
                chosen = ids.filter(keep)
                pq.write_table(
                    pa.table(
                        {
                            "id": chosen,
                            "label": pa.array([f"label-{i % 97}" for i in range(len(chosen))]),
                            "score": np.random.default_rng([seed, copy]).random(len(chosen)),
                        }
                    ),
                    folder / f"c{copy:03d}-labels.parquet",
                    compression="zstd",
                )
        done.write_text(json.dumps({"tag": tags[copy], "text_bytes": text_bytes}))
        print(f"built copy {copy} (tag {tags[copy]}) in {time.perf_counter() - t0:.0f} s", flush=True)
    return folder


def k_input(data: Path, seed: int, k: int, first: int = 0) -> tuple[Path, Path, int]:
    """(docs folder, labels folder, text bytes) of copies ``first``..``first+k-1``: hard links to the copies."""
    copies = build_copies(data, seed, first + k)
    base = data / f"seed{seed}" / (f"k{k}" if first == 0 else f"c{first}-k{k}")
    docs, labels = base / "docs", base / "labels"
    text_bytes = 0
    for folder in (docs, labels):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for copy in range(first, first + k):
        for path in copies.glob(f"c{copy:03d}-part-*.parquet"):
            os.link(path, docs / path.name)
        os.link(copies / f"c{copy:03d}-labels.parquet", labels / f"c{copy:03d}.parquet")
        text_bytes += json.loads((copies / f"c{copy:03d}.done").read_text())["text_bytes"]
    return docs, labels, text_bytes


# -- the memory cap --------------------------------------------------------------------------------------------


class MemoryCap:
    """A memory cgroup of ``limit`` bytes that commands are started in (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.folder: Path | None = None
        self.how = ""
        self.prefix: list[str] = []
        probe = ["systemd-run", "--user", "--scope", "--quiet", "-p", f"MemoryMax={limit}", "true"]
        with contextlib.suppress(OSError):
            if subprocess.run(probe, capture_output=True).returncode == 0:
                self.prefix = probe[:-1] + ["--"]
                self.how = f"systemd-run --user --scope -p MemoryMax={limit}"
                return
        own = {
            line.split(":", 2)[1]: line.split(":", 2)[2].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
        }
        v2 = Path("/sys/fs/cgroup")
        name = f"zephyr-scale-{os.getpid()}"
        if (v2 / "cgroup.controllers").exists() and "memory" in (v2 / "cgroup.controllers").read_text():
            self.folder = v2 / own.get("", "/").lstrip("/") / name
            self.folder.mkdir()
            (self.folder / "memory.max").write_text(str(limit))
            self.how = f"cgroup v2 folder {self.folder} (memory.max = {limit})"
        elif "memory" in own and (v1 := Path("/sys/fs/cgroup/memory")).exists():
            self.folder = v1 / own["memory"].lstrip("/") / name
            self.folder.mkdir()
            (self.folder / "memory.limit_in_bytes").write_text(str(limit))
            with contextlib.suppress(OSError):
                (self.folder / "memory.memsw.limit_in_bytes").write_text(str(limit))
            self.how = f"cgroup v1 folder {self.folder} (memory.limit_in_bytes = {limit})"
        else:
            raise SystemExit(
                "no way to cap memory here: no systemd user manager and no writable memory cgroup"
            )
        self.prefix = ["sh", "-c", f'echo $$ > {self.folder}/cgroup.procs && exec "$@"', "sh"]

    def wrap(self, cmd: list[str]) -> list[str]:
        return [*self.prefix, *cmd]

    def oom_kills(self) -> int | None:
        if self.folder is None:
            return None
        for name in ("memory.events", "memory.oom_control"):
            path = self.folder / name
            if path.exists():
                for line in path.read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        return None

    def reset_peak(self) -> None:
        if self.folder is not None and (self.folder / "memory.max_usage_in_bytes").exists():
            with contextlib.suppress(OSError):
                (self.folder / "memory.max_usage_in_bytes").write_text("0")

    def peak_mib(self) -> float | None:
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            if self.folder is not None and (self.folder / name).exists():
                return int((self.folder / name).read_text()) / MIB
        return None

    def close(self) -> None:
        if self.folder is not None:
            with contextlib.suppress(OSError):
                self.folder.rmdir()


# -- dask -------------------------------------------------------------------------------------------------------


class DaskCluster:
    """``dask scheduler`` + ``workers`` × ``dask worker --nthreads 1 --no-nanny`` on loopback, in the cap;
    a thread samples each process' RSS (``peaks``: role → MiB)."""

    def __init__(self, folder: Path, cap: MemoryCap, workers: int = 2) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"tcp://127.0.0.1:{port}"
        loopback = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.procs["scheduler"] = subprocess.Popen(
            cap.wrap([*DASK, "scheduler", "--port", str(port), *loopback]),
            env=env,
            stdout=open(folder / "scheduler.log", "wb"),  # noqa: SIM115 - the process owns it
            stderr=subprocess.STDOUT,
        )
        time.sleep(3)
        for i in range(workers):
            self.procs[f"worker{i}"] = subprocess.Popen(
                cap.wrap(
                    [
                        *[*DASK, "worker", self.address, "--nthreads", "1", "--no-nanny"],
                        *["--name", f"w{i}", "--local-directory", str(folder / f"w{i}"), *loopback],
                    ]
                ),
                env=env,
                stdout=open(folder / f"worker-{i}.log", "wb"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
            )
        import distributed

        with distributed.Client(self.address, set_as_default=False, timeout=120) as client:
            client.wait_for_workers(workers, timeout=120)
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for role, proc in self.procs.items():
                with contextlib.suppress(psutil.Error):
                    rss = psutil.Process(proc.pid).memory_info().rss / MIB
                    self.peaks[role] = max(self.peaks.get(role, 0.0), rss)

    def reset(self) -> None:
        self.peaks = {}

    def stop(self) -> None:
        self._stop.set()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- one op -----------------------------------------------------------------------------------------------------


def command(op: str, docs: Path, labels: Path, out: Path, args, *, cluster: str | None) -> list[str]:
    execution = ["--workers", str(args.workers), "-v"]
    if cluster:
        execution += ["--executor", "dask", "--cluster", cluster]
    if op in DEDUP_OPS:
        kind = op.split("_")[1]
        return [ZEPHYR, "dedup", kind, str(docs), "--output", str(out), "--mode", "remove", *execution]
    if op == "sort":
        return [ZEPHYR, "sort", str(docs), "--by", "id", "--output", str(out), *execution]
    if op == "tokenize":
        tok = Path(args.corpus) / "models" / "gpt2" / "tokenizer.json"
        return [ZEPHYR, "tokenize", str(docs), "--tokenizer", str(tok), "--output", str(out), *execution]
    if op in ("group_by", "join"):
        return [PYTHON, __file__, "api", op, str(docs), str(labels), str(out), *execution]
    if op.startswith("duckdb:"):
        return [
            *[PYTHON, __file__, "duckdb", op.split(":", 1)[1], str(docs), str(labels), str(out)],
            *["--memory-limit", args.duckdb_memory, "--threads", str(args.workers)],
        ]
    raise ValueError(op)


def run_api(argv: list[str]) -> int:
    """``scale.py api OP DOCS LABELS OUT``: group_by and join on the Dataset API, with the CLI's flags."""
    import logging

    import zephyr

    ap = argparse.ArgumentParser(prog="scale.py api")
    ap.add_argument("op", choices=("group_by", "join"))
    ap.add_argument("docs")
    ap.add_argument("labels")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--executor", default="local")
    ap.add_argument("--cluster")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    docs = zephyr.read_parquet(args.docs)
    if args.op == "group_by":
        plan = docs.group_by("url").agg(n=("id", "count"), texts=("text", "count"))
    else:
        plan = docs.join(zephyr.read_parquet(args.labels), on="id")
    executor = args.executor
    if args.cluster:
        import distributed

        executor = distributed.Client(args.cluster)
    plan.write_parquet(args.out, executor=executor, workers=args.workers)
    return 0


def run_duckdb(argv: list[str]) -> int:
    """``scale.py duckdb OP DOCS LABELS OUT``: the peer, one process, spilling to OUT.tmp."""
    ap = argparse.ArgumentParser(prog="scale.py duckdb")
    ap.add_argument("op", choices=DUCKDB_OPS)
    ap.add_argument("docs")
    ap.add_argument("labels")
    ap.add_argument("out")
    ap.add_argument("--memory-limit", default="2GB")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    docs = f"read_parquet('{args.docs}/*.parquet')"
    query = {
        "sort": f"SELECT * FROM {docs} ORDER BY id",
        "group_by": f"SELECT url, count(id) AS n, count(text) AS texts FROM {docs} GROUP BY url",
        "join": f"SELECT * FROM {docs} AS d JOIN read_parquet('{args.labels}/*.parquet') AS l USING (id)",
    }[args.op]
    duckdb_copy(query, args.out, memory_limit=args.memory_limit, threads=args.threads)
    return 0


def digest(out: Path) -> str:
    """sha256 over the output's files (relative names and bytes), for the local-vs-dask identity check."""
    h = hashlib.sha256()
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(out)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def kept_ids(out: Path) -> dict[str, set[str]]:
    """The dedup output's ids by copy prefix (``kNNN``), without the prefix."""
    ids = pq.read_table(out, columns=["id"]).column("id").to_pylist()
    by_copy: dict[str, set[str]] = {}
    for i in ids:
        copy, _, rest = i.partition("/")
        by_copy.setdefault(copy, set()).add(rest)
    return by_copy


def tree_bytes(*folders: Path) -> int:
    return sum(
        p.stat().st_size for folder in folders if folder.exists() for p in folder.rglob("*") if p.is_file()
    )


def error_line(log_text: str) -> str:
    """The last line of a failed run's log that names an error (else its last line), shortened."""
    lines = [ln for ln in log_text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if "Error" in ln or "Exception" in ln] or lines
    return lines[-1].strip()[:160] if lines else ""


def stage_split(log_text: str) -> str:
    """``name seconds`` per stage line of a ``-v`` log, a fused stage named by its last operator."""
    parts = []
    for match in filter(None, map(_STAGE.search, log_text.splitlines())):
        name = re.sub(r"^map_batches\((.*)\)$", r"\1", match.group(1).split(" → ")[-1])
        parts.append(f"{name} {float(match.group(3)):.0f}")
    return ", ".join(parts)


def measure(
    op: str, k: int, docs: Path, labels: Path, text_bytes: int, args, cap: MemoryCap, *, dask=None, tag=""
) -> dict:
    engine = "duckdb" if op.startswith("duckdb:") else ("zephyr-dask" if dask else "zephyr")
    out = Path(args.data) / "out" / f"{op.replace(':', '-')}-k{k}{tag}{'-dask' if dask else ''}"
    for path in (out, Path(f"{out}.zephyr"), Path(f"{out}.tmp")):
        shutil.rmtree(path, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.parent / f"{out.name}.log"
    before = cap.oom_kills() or 0
    cap.reset_peak()
    if dask:
        dask.reset()
    res = run_sampled(
        cap.wrap(command(op, docs, labels, out, args, cluster=dask.address if dask else None)),
        log_path=log_path,
        timeout_s=args.timeout,
    )
    res.pop("timeline")
    log_text = log_path.read_text(errors="replace")
    row = {
        "op": op.split(":", 1)[-1],
        "engine": engine,
        "k": k,
        "seed": args.seed,
        "tag": tag,
        "text_mb": text_bytes / 1e6,
        "wall_s": res["wall_s"],
        "rc": res["rc"],
        "timed_out": res["timed_out"],
        "driver_mib": res["peak_mib"].get("driver"),
        "worker_mib": res["peak_mib"].get("worker"),
        "workers": res["processes"].get("worker", 0),
        "cap_peak_mib": cap.peak_mib(),
        "oom_kills": (cap.oom_kills() or 0) - before,
        "spill_mb": max(0, res["write_bytes"] - tree_bytes(out, Path(f"{out}.zephyr"))) / 1e6
        if not dask
        else None,
        "stages": stage_split(log_text),
        "load": os.getloadavg()[0],
        "when": datetime.datetime.now(datetime.UTC).strftime("%H:%M"),
        "log": str(log_path),
        "cap": cap.how,
    }
    if dask:
        row["dask_mib"] = dict(dask.peaks)
        row["worker_mib"] = max((v for r, v in dask.peaks.items() if r.startswith("worker")), default=None)
    if res["rc"] != 0 or res["timed_out"]:
        row["error"] = "timeout" if res["timed_out"] else f"exit {res['rc']}: {error_line(log_text)}"
    else:
        row["mb_s"] = row["text_mb"] / row["wall_s"]
        if engine != "duckdb":
            row["digest"] = digest(out)
        if op in DEDUP_OPS:
            row["kept"] = {c: sorted(v) for c, v in kept_ids(out).items()}
    return row


# -- the run ----------------------------------------------------------------------------------------------------


def load_results(path: Path) -> list[dict]:
    return json.loads(path.read_text()) if path.exists() else []


def ids_checks(rows: list[dict]) -> list[str]:
    """Per dedup op and K > 1: copy 0 against the K = 1 run, the last copy against its run alone."""
    lines = []
    for row in rows:
        if row["engine"] != "zephyr" or "kept" not in row or row["k"] == 1 or row["tag"]:
            continue
        k, op = row["k"], row["op"]
        for copy, ref_tag in ((0, ""), (k - 1, f"-alone{k - 1}")):
            ref = next(
                (
                    r
                    for r in rows
                    if r["op"] == op and r["engine"] == "zephyr" and r["k"] == 1 and r["tag"] == ref_tag
                ),
                None,
            )
            if ref is None or "kept" not in ref:
                continue
            alone = set(next(iter(ref["kept"].values()), []))
            among = set(row["kept"].get(f"k{copy:03d}", []))
            verdict = "same" if alone == among else f"DIFFER ({len(alone ^ among)} ids)"
            lines.append(
                f"- seed {row['seed']}, {op}, copy {copy}: {len(alone):,} ids kept alone, {len(among):,} among "
                f"K = {k}: **{verdict}**"
            )
    return lines


def _f(x, spec=".0f") -> str:
    return "–" if x is None else format(x, spec)


def render(rows: list[dict], args, cap_how: str, load_start: tuple | None, command_line: str) -> str:
    base = {
        (r["op"], r["engine"], r["seed"]): r for r in rows if r["k"] == 1 and not r["tag"] and "mb_s" in r
    }
    local = {(r["op"], r["k"], r["seed"]): r for r in rows if r["engine"] == "zephyr" and not r["tag"]}
    load_end = os.getloadavg()
    lines = [
        f"\n### Scale: K renamed copies of the medium docs in a {args.cap} cap — {datetime.date.today()}, {machine()}\n",
        f"Command: `{command_line}`. Cap: {cap_how}. "
        + (
            f"Load average (1/5/15 min) {load_start[0]:.1f}/{load_start[1]:.1f}/{load_start[2]:.1f} at the start, "
            f"{load_end[0]:.1f}/{load_end[1]:.1f}/{load_end[2]:.1f} at the end "
            if load_start
            else ""
        )
        + "(2 cores shared with other jobs); each row's load is the 1-minute average when it ended. MB/s: input text "
        "(UTF-8 bytes of `text`) per second of wall time; ÷ K=1: that throughput over the same op's at K = 1. "
        "Peaks: RSS of the driver and of the largest worker process (dask: the largest `dask worker`); cap: the "
        "cgroup's own peak, page cache included. Spill: bytes the run's processes wrote to storage (`/proc/PID/io`) less the output's. duckdb: "
        f"`memory_limit` {args.duckdb_memory}, {args.workers} threads, a temp directory.\n",
        "| op | K | engine | text MB | wall s | MB/s | ÷ K=1 | driver MiB | worker MiB | cap MiB | OOM kills | spill MB | load | same bytes as local |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    shown = sorted(
        (r for r in rows if not r["tag"]),
        key=lambda r: (r["seed"], OPS.index(r["op"]) if r["op"] in OPS else 99, r["k"], r["engine"]),
    )
    for r in shown:
        ref = base.get((r["op"], r["engine"] if r["engine"] != "zephyr-dask" else "zephyr", r["seed"]))
        ratio = r["mb_s"] / ref["mb_s"] if ref and "mb_s" in r else None
        same = "–"
        if r["engine"] == "zephyr-dask":
            mine = local.get((r["op"], r["k"], r["seed"]))
            same = (
                "yes" if mine and mine.get("digest") and mine.get("digest") == r.get("digest") else "**no**"
            )
        status = r.get("error")
        if status and r.get("log") and Path(r["log"]).exists():
            status = f"exit {r['rc']}: {error_line(Path(r['log']).read_text(errors='replace'))}"
        lines.append(
            f"| {r['op']}{' (seed ' + str(r['seed']) + ')' if r['seed'] != 1 else ''} | {r['k']} | {r['engine']} | "
            f"{r['text_mb']:,.0f} | {r['wall_s']:.1f} | {_f(r.get('mb_s'), '.1f') if not status else 'failed: ' + status[:120].replace('|', '/')} "
            f"| {_f(ratio, '.2f')} | {_f(r['driver_mib'])} | {_f(r['worker_mib'])} | {_f(r['cap_peak_mib'])} | {r['oom_kills']} "
            f"| {_f(r['spill_mb'])} | {r['load']:.1f} | {same} |"
        )
    lines.append(
        "\nPer-stage split (seconds; zephyr on the local executor, stage lines of the `-v` log, in order):\n"
    )
    for r in shown:
        if r["engine"] == "zephyr" and r["stages"]:
            lines.append(
                f"- {r['op']} K = {r['k']}{' seed ' + str(r['seed']) if r['seed'] != 1 else ''}: {r['stages']}"
            )
    checks = ids_checks(rows)
    if checks:
        lines.append("\nA copy keeps the same ids alone and among K (dedup, `--mode remove`):\n")
        lines += checks
    return "\n".join(lines) + "\n"


def main() -> int:
    global CORPUS
    if len(sys.argv) > 1 and sys.argv[1] == "api":
        return run_api(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "duckdb":
        return run_duckdb(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="1,8", help="copies per run, comma-separated (K = 1 is the ratio's base)")
    ap.add_argument("--seed", type=int, default=1, help="the renaming")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--dask-k", type=int, default=8, help="K of the dask runs (0: none)")
    ap.add_argument("--dask-ops", default=",".join(OPS))
    ap.add_argument("--cap", default="3GiB")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--duckdb-memory", default="2GB")
    ap.add_argument("--no-duckdb", action="store_true")
    ap.add_argument("--no-alone", action="store_true", help="skip the last copy's run alone (dedup)")
    ap.add_argument(
        "--dask-only", action="store_true", help="only the dask runs (the local ones are in results.json)"
    )
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--data", default=str(ROOT / "benchmarks" / ".out" / "scale"))
    ap.add_argument("--corpus", default=str(CORPUS), help="a corpus folder with docs/ and models/gpt2/")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument(
        "--render-only", action="store_true", help="print the table of --ks/--ops/--seed from results.json"
    )
    ap.add_argument("--no-append", action="store_true")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",") if k]
    ops = [o for o in args.ops.split(",") if o]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        ap.error(f"unknown ops {unknown}; choose from {list(OPS)}")
    CORPUS = Path(args.corpus)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    command_line = "flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/scale.py " + " ".join(
        sys.argv[1:]
    )
    if args.render_only:
        rows = [r for r in load_results(data / "results.json") if r["seed"] == args.seed and r["op"] in ops]
        rows = [r for r in rows if r["k"] in ks or r["tag"]]
        for r in rows:  # rows from before the log path was kept
            r.setdefault(
                "log",
                str(
                    data
                    / "out"
                    / f"{'duckdb-' if r['engine'] == 'duckdb' else ''}{r['op']}-k{r['k']}{r['tag']}{'-dask' if r['engine'] == 'zephyr-dask' else ''}.log"
                ),
            )
        how = next((r["cap"] for r in rows if r.get("cap")), "a cgroup v1 folder (memory.limit_in_bytes)")
        publish(render(rows, args, how, None, command_line), append=not args.no_append)
        return 0
    build_copies(data, args.seed, max(ks))
    if args.build_only:
        return 0
    load_start = os.getloadavg()
    results_path = data / "results.json"
    rows = load_results(results_path)
    cap = MemoryCap(int(budget_mib(args.cap) * MIB))
    print(f"memory cap: {cap.how}", flush=True)

    def record(row: dict) -> None:
        rows[:] = [
            r
            for r in rows
            if (r["op"], r["engine"], r["k"], r["seed"], r["tag"])
            != (row["op"], row["engine"], row["k"], row["seed"], row["tag"])
        ]
        rows.append(row)
        results_path.write_text(json.dumps(rows))
        print(json.dumps({k: v for k, v in row.items() if k not in ("kept", "digest")}), flush=True)

    fresh: list[dict] = []
    try:
        for k in ks:
            docs, labels, text_bytes = k_input(data, args.seed, k)
            for op in ops if not args.dask_only else ():
                fresh.append(measure(op, k, docs, labels, text_bytes, args, cap))
                record(fresh[-1])
                if op in DUCKDB_OPS and not args.no_duckdb:
                    fresh.append(measure(f"duckdb:{op}", k, docs, labels, text_bytes, args, cap))
                    record(fresh[-1])
                if op in DEDUP_OPS and k > 1 and not args.no_alone:
                    alone_docs, alone_labels, alone_bytes = k_input(data, args.seed, 1, first=k - 1)
                    row = measure(
                        op, 1, alone_docs, alone_labels, alone_bytes, args, cap, tag=f"-alone{k - 1}"
                    )
                    row["kept"] = {f"k{k - 1:03d}": v for v in row.get("kept", {}).values()}
                    fresh.append(row)
                    record(row)
            if k == args.dask_k:
                cluster = DaskCluster(data / "dask", cap, args.workers)
                try:
                    for op in [o for o in args.dask_ops.split(",") if o in ops]:
                        fresh.append(measure(op, k, docs, labels, text_bytes, args, cap, dask=cluster))
                        record(fresh[-1])
                finally:
                    cluster.stop()
    finally:
        cap.close()
    shown_keys = {(r["seed"], r["op"], r["k"]) for r in fresh}
    shown = [
        r
        for r in rows
        if (r["seed"], r["op"], r["k"]) in shown_keys
        or (r["seed"], r["op"]) in {(s, o) for s, o, _ in shown_keys}
        and r["k"] == 1
    ]
    command_line = "flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/scale.py " + " ".join(
        sys.argv[1:]
    )
    publish(render(shown, args, cap.how, load_start, command_line), append=not args.no_append)
    return 0 if all("error" not in r for r in fresh) else 1


if __name__ == "__main__":
    sys.exit(main())
