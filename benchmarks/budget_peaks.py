"""Does each op stay within ``--memory-budget``? Peak RSS per worker process against its baseline.

For every budget (default 64 MiB and 512 MiB) a synthetic web corpus of ``--data-ratio`` × the budget in
Arrow bytes (default 6×; ``id``, ``url``, ``domain``, ``key``, ``text`` of ~3 KB Zipf-distributed words, 5%
exact duplicates, zstd Parquet, row groups of ``--row-group-bytes``) is generated, with a ``labels`` table
for the join. Every op then runs on ``--executor local --workers 2``:

- ``sort``: ``zephyr sort IN --by url``;
- ``group_by_count``: ``group_by("key").agg(n=("text", "count"))`` (map-side combine) and ``group_by_list``:
  ``group_by("key").agg(ids=("id", "list"), texts=("text", "list"))`` (raw rows through the shuffle), Dataset API;
- ``join``: the corpus ``join(labels, on="id")``, Dataset API;
- ``dedup_exact``, ``dedup_fuzzy``: ``zephyr dedup exact|fuzzy IN --mode remove``;
- ``filter``: ``zephyr filter IN`` (Gopher, C4, FineWeb rules);
- ``tokenize``: ``zephyr tokenize IN --tokenizer T`` (a byte-level BPE trained here on the corpus);
- ``read_one_row_group``: ``zephyr convert F`` where F holds the same documents (at most 1.5 GiB of them)
  in a single row group: a row group larger than the budget is read in batches, never whole.

Every process of the run is sampled every 50 ms (``_measure.run_sampled``: driver, workers). The *baseline*
is the largest worker's peak when the same op runs on a tiny input (2,000 rows, ``--small-job-bytes 0`` so
workers still run it): interpreter, pyarrow, polars and the op's kernels. The goal, per worker process:

    peak ≤ baseline + 1.25 × budget

    flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/budget_peaks.py [--budgets 64MiB,512MiB]
        [--ops sort,join,...] [--executor local|threads] [--data-ratio 6] [--no-append]

An op that runs its tasks in the driver although workers were asked for (tokenize with at most 2 local
workers and a budget of 512 MiB or more) is measured as a driver: its peak against the driver's on the tiny
input (run in the driver too), goal baseline + 1.25 × budget. On ``--executor threads`` the driver runs
``workers`` tasks itself, so its goal is baseline + 1.25 × workers × budget. When the tasks run in worker
processes, the driver has a goal of its own: peak ≤ its baseline (its peak on the tiny input) + budget, for what
it holds itself (plans, markers, dedup's candidate pairs, verified graph and endpoint sets). Each run's CLI log (``-v``: stage lines with times), its RSS timeline and the summary go
to ``--logs`` (``benchmarks/.out/budget_peaks/``); ``--keep-data`` keeps the generated corpora there too.
Appends a Markdown table to the month's notebook, benchmarks/history/<YYYY-MM>.md, unless ``--no-append``. tests/zephyr/test_budget_peaks.py
runs the same measurement as slow tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import budget_mib, duckdb_copy, machine, publish, run_sampled, stage_peaks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
ZEPHYR = str(ROOT / ".venv" / "bin" / "zephyr")
MIB = 2**20
GOAL = 1.25
DRIVER_GOAL = 1.0
"""The driver, when its tasks run in worker processes: peak ≤ its baseline + this × budget."""
ONE_ROW_GROUP_CAP = 1536 * MIB
"""The single-row-group file holds the corpus' size in one row group, at most this (Arrow bytes)."""
TINY_ROWS = 2000
OPS = (
    "sort",
    "group_by_count",
    "group_by_list",
    "join",
    "dedup_exact",
    "dedup_fuzzy",
    "filter",
    "tokenize",
    "read_one_row_group",
)
PEER_OPS = ("sort", "group_by_count", "join")
"""Ops also run on the peer (``--peers duckdb``): duckdb with the same total memory limit and threads."""
_STOP_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
]


# -- the corpus ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    docs: Path
    """Directory of ``part-NNNNN.parquet``."""
    labels: Path
    arrow_bytes: int
    parquet_bytes: int
    rows: int
    one_row_group: Path | None = None
    """One file holding a single row group larger than the budget (``read_one_row_group``)."""


def _vocabulary(rng: np.random.Generator) -> tuple[pa.Array, np.ndarray]:
    """Words with a trailing space (every 16th-ish token ends a line) and a Zipf lookup table of 2**16 slots."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    made = ["".join(rng.choice(letters, int(n))) for n in rng.integers(2, 10, 6000)]
    words = [w + " " for w in _STOP_WORDS + made] + [w + ".\n" for w in made[:300]]
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    weights[-300:] = weights[:-300].sum() / 15 / 300  # line ends: about one token in 16
    cdf = np.cumsum(weights) / weights.sum()
    table = np.searchsorted(cdf, (np.arange(1 << 16) + 0.5) / (1 << 16)).astype(np.int32)
    return pa.array(words, pa.string()), table


def _texts(rng: np.random.Generator, vocab: pa.Array, zipf: np.ndarray, n: int) -> pa.Array:
    """``n`` documents of ~450 words (lognormal lengths), built without a Python loop: the words' data
    buffer is already the concatenated text, so documents are a new offsets array over it."""
    lengths = np.maximum(20, rng.lognormal(np.log(450), 0.5, n)).astype(np.int64)
    picks = zipf[rng.integers(0, 1 << 16, int(lengths.sum()), dtype=np.int32)]
    words = vocab.take(pa.array(picks))
    offsets = np.frombuffer(words.buffers()[1], dtype=np.int32)[: len(words) + 1]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    doc_offsets = np.ascontiguousarray(offsets[bounds])
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(doc_offsets), words.buffers()[2]])


def _docs_table(
    rng: np.random.Generator, vocab: pa.Array, zipf: np.ndarray, first_id: int, n: int, keys: int
):
    texts = _texts(rng, vocab, zipf, n)
    dupes = np.arange(n)
    planted = rng.random(n) < 0.05
    dupes[planted] = rng.integers(0, n, int(planted.sum()))
    texts = texts.take(pa.array(dupes))
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    paths = rng.integers(0, 2**63, n, dtype=np.int64)
    domains = np.minimum(rng.zipf(1.3, n), 2000)
    return pa.table(
        {
            "id": ids,
            "url": pa.array([f"https://site{d}.example/{p:x}" for d, p in zip(domains, paths)]),
            "domain": pa.array([f"site{d}.example" for d in domains]),
            "key": pa.array([f"g{k:08d}" for k in rng.integers(0, keys, n)]),
            "text": texts,
        }
    )


def generate_corpus(directory: Path, arrow_bytes: int, *, row_group_bytes: int, seed: int = 0) -> Corpus:
    """Write about ``arrow_bytes`` of documents (Arrow bytes) in 4+ files, and a labels table for the join."""
    rng = np.random.default_rng(seed)
    vocab, zipf = _vocabulary(rng)
    docs = directory / "docs"
    labels = directory / "labels"
    docs.mkdir(parents=True)
    labels.mkdir(parents=True)
    probe = _docs_table(rng, vocab, zipf, 0, 500, 1)
    row_bytes = probe.nbytes / probe.num_rows
    rows = max(1, int(arrow_bytes / row_bytes))
    keys = max(1, rows // 4)  # groups of ~4 rows
    files = max(4, -(-arrow_bytes // (256 * MIB)))
    group_rows = max(1, int(row_group_bytes / row_bytes))
    written = 0
    total_arrow = 0
    for index in range(files):
        file_rows = rows // files + (1 if index < rows % files else 0)
        with pq.ParquetWriter(docs / f"part-{index:05d}.parquet", probe.schema, compression="zstd") as writer:
            for start in range(0, file_rows, group_rows):
                table = _docs_table(rng, vocab, zipf, written, min(group_rows, file_rows - start), keys)
                writer.write_table(table, row_group_size=table.num_rows)
                written += table.num_rows
                total_arrow += table.nbytes
    chosen = np.sort(rng.permutation(rows)[: rows // 2]).astype(np.int64)
    pq.write_table(
        pa.table(
            {
                "id": chosen,
                "label": pa.array([f"label-{i % 97}" for i in chosen]),
                "score": rng.random(len(chosen)),
            }
        ),
        labels / "part-00000.parquet",
        compression="zstd",
    )
    parquet = sum(p.stat().st_size for p in docs.glob("*.parquet"))
    one = directory / "one-row-group" / "part-00000.parquet"
    one.parent.mkdir()
    one_rows = int(min(arrow_bytes, ONE_ROW_GROUP_CAP) / row_bytes)
    chunks = [
        _docs_table(rng, vocab, zipf, i, min(group_rows, one_rows - i), keys)
        for i in range(0, one_rows, group_rows)
    ]
    pq.write_table(pa.concat_tables(chunks), one, row_group_size=one_rows, compression="zstd")
    return Corpus(docs, labels, total_arrow, parquet, written, one)


def train_tokenizer(path: Path, corpus: Corpus, vocab_size: int = 2000) -> Path:
    """A GPT-2-style byte-level BPE trained on the corpus' first row group (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    first = sorted(corpus.docs.glob("*.parquet"))[0]
    sample = pq.ParquetFile(first).read_row_group(0, columns=["text"]).column("text").to_pylist()[:2000]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sample, trainer=trainer)
    tok.save(str(path))
    return path


# -- one op ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """How every op runs: the execution flags and the inputs beside the corpus."""

    executor: str = "local"
    workers: int = 2
    tokenizer: Path | None = None


def command(
    op: str, corpus: Corpus, out: Path, budget: str, setup: Setup, *, small_job_bytes: str
) -> list[str]:
    """The command line that runs ``op`` on ``corpus`` (the CLI where one exists, else the ``api`` mode)."""
    execution = [
        "--executor",
        setup.executor,
        "--workers",
        str(setup.workers),
        "--memory-budget",
        budget,
        "--small-job-bytes",
        small_job_bytes,
        "-v",
    ]
    docs, output = str(corpus.docs), str(out)
    if op == "sort":
        return [ZEPHYR, "sort", docs, "--by", "url", "--output", output, *execution]
    if op in ("dedup_exact", "dedup_fuzzy"):
        kind = op.split("_")[1]
        return [ZEPHYR, "dedup", kind, docs, "--output", output, "--mode", "remove", *execution]
    if op == "filter":
        return [ZEPHYR, "filter", docs, "--output", output, *execution]
    if op == "read_one_row_group":
        if corpus.one_row_group is None:  # the tiny corpus: its one file is one row group
            return [ZEPHYR, "convert", docs, "--output", output, *execution]
        return [ZEPHYR, "convert", str(corpus.one_row_group), "--output", output, *execution]
    if op == "tokenize":
        return [ZEPHYR, "tokenize", docs, "--tokenizer", str(setup.tokenizer), "--output", output, *execution]
    if op in ("group_by_count", "group_by_list", "join"):
        return [PYTHON, __file__, "api", op, docs, output, "--labels", str(corpus.labels), *execution]
    if op.startswith("duckdb:"):
        peer = [PYTHON, __file__, "duckdb", op.split(":", 1)[1], docs, output, "--labels", str(corpus.labels)]
        return [
            *peer,
            "--memory-limit-mib",
            str(setup.workers * budget_mib(budget)),
            "--threads",
            str(setup.workers),
        ]
    raise ValueError(f"unknown op {op!r}; one of {OPS}")


def run_api(argv: list[str]) -> int:
    """``budget_peaks.py api OP DOCS OUT ...``: the ops that have no CLI command, on the Dataset API."""
    ap = argparse.ArgumentParser(prog="budget_peaks.py api")
    ap.add_argument("op", choices=("group_by_count", "group_by_list", "join"))
    ap.add_argument("docs")
    ap.add_argument("out")
    ap.add_argument("--labels", required=True)
    ap.add_argument("--executor", default="local")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-budget", required=True)
    ap.add_argument("--small-job-bytes", default="4MiB")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    args = ap.parse_args(argv)
    import logging

    import zephyr

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    docs = zephyr.read_parquet(args.docs)
    if args.op == "group_by_count":
        plan = docs.group_by("key").agg(n=("text", "count"))
    elif args.op == "group_by_list":
        plan = docs.group_by("key").agg(ids=("id", "list"), texts=("text", "list"))
    else:
        plan = docs.join(zephyr.read_parquet(args.labels), on="id")
    result = plan.write_parquet(
        args.out,
        executor=args.executor,
        workers=args.workers,
        memory_budget=args.memory_budget,
        small_job_bytes=args.small_job_bytes,
    )
    print(json.dumps({"files": len(result.files), "rows": result.stats["stages"][-1]["rows_out"]}))
    return 0


def run_duckdb(argv: list[str]) -> int:
    """``budget_peaks.py duckdb OP DOCS OUT ...``: the peer, one process with ``memory_limit`` = the zephyr
    workers' budgets together and as many threads, spilling to OUT.tmp."""
    ap = argparse.ArgumentParser(prog="budget_peaks.py duckdb")
    ap.add_argument("op", choices=PEER_OPS)
    ap.add_argument("docs")
    ap.add_argument("out")
    ap.add_argument("--labels", required=True)
    ap.add_argument("--memory-limit-mib", type=float, required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    docs = f"read_parquet('{args.docs}/*.parquet')"
    query = {
        "sort": f"SELECT * FROM {docs} ORDER BY url",
        "group_by_count": f"SELECT key, count(text) AS n FROM {docs} GROUP BY key",
        "join": f"SELECT * FROM {docs} AS d JOIN read_parquet('{args.labels}/*.parquet') AS l USING (id)",
    }[args.op]
    memory_limit = f"{int(args.memory_limit_mib)}MiB"
    duckdb_copy(query, args.out, memory_limit=memory_limit, threads=args.threads)
    return 0


def _role(op: str, setup: Setup) -> tuple[str, int]:
    """(the process role whose peak is the op's, and how many tasks' budgets that process may hold)."""
    if op.startswith("duckdb:"):
        return "driver", setup.workers
    if setup.executor in ("threads", "inprocess"):
        return "driver", setup.workers if setup.executor == "threads" else 1
    return "worker", 1


def measure(
    op: str,
    corpus: Corpus,
    budget: str,
    setup: Setup,
    *,
    work: Path,
    logs: Path,
    tag: str,
    small_job_bytes: str = "4MiB",
    timeout_s: float = 3600,
    role: str | None = None,
) -> dict:
    """Run one op once, sampled; the log and the RSS timeline stay in ``logs``. ``role``: whose peaks the stages
    report (default: ``_role``'s)."""
    out = work / f"out-{op}-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    log_path = logs / f"{op}-{tag}.log"
    started = time.time()
    res = run_sampled(
        command(op, corpus, out, budget, setup, small_job_bytes=small_job_bytes),
        log_path=log_path,
        timeout_s=timeout_s,
    )
    timeline = res.pop("timeline")
    (logs / f"{op}-{tag}-rss.json").write_text(json.dumps({"started_unix": started, "timeline": timeline}))
    res["stages"] = stage_peaks(log_path.read_text(), timeline, started, role or _role(op, setup)[0])
    shutil.rmtree(out, ignore_errors=True)
    if res["rc"] != 0 or res["timed_out"]:
        res["error"] = (
            f"timeout after {timeout_s:.0f} s"
            if res["timed_out"]
            else f"exit {res['rc']}: {log_path.read_text()[-1500:]}"
        )
    return res


def _stages(op: str, tag: str, logs: Path, role: str) -> list[dict]:
    """The stage peaks of a measured run (its log and RSS timeline in ``logs``) for the processes of ``role``."""
    rss = json.loads((logs / f"{op}-{tag}-rss.json").read_text())
    return stage_peaks((logs / f"{op}-{tag}.log").read_text(), rss["timeline"], rss["started_unix"], role)


def measure_op(
    op: str,
    budget: str,
    corpus: Corpus,
    tiny: Corpus,
    setup: Setup,
    *,
    work: Path,
    logs: Path,
    timeout_s: float = 3600,
) -> dict:
    """Baseline (tiny input, workers forced) and the full run of one op at one budget, with the goal's check."""
    tag = budget.lower()

    def baseline(prefix: str, **kw) -> dict:
        """The op on the tiny input, twice: the first run fills the caches a later run finds warm (compiled numba
        kernels, the page cache)."""
        for attempt in ("warmup", "baseline"):
            run = measure(
                op,
                tiny,
                budget,
                setup,
                work=work,
                logs=logs,
                tag=f"{tag}-{prefix}{attempt}",
                timeout_s=timeout_s,
                **kw,
            )
        return run

    base = baseline("", small_job_bytes="0")
    full = measure(op, corpus, budget, setup, work=work, logs=logs, tag=tag, timeout_s=timeout_s)
    role, tasks = _role(op, setup)
    if role == "worker" and full["peak_mib"].get("worker") is None and full["peak_mib"].get("driver"):
        # the op ran its tasks in the driver (tokenize with at most 2 local workers and a budget of 512 MiB or
        # more): its goal is the driver's, against a driver baseline of the same op on the tiny input
        role, tasks = "driver", 1
        base = baseline("driver-", role=role)
        full["stages"] = _stages(op, tag, logs, role)
    b = budget_mib(budget)
    row = {
        "op": op,
        "budget": budget,
        "budget_mib": b,
        "role": role,
        "baseline_mib": base["peak_mib"].get(role),
        "peak_mib": full["peak_mib"].get(role),
        "driver_peak_mib": full["peak_mib"].get("driver"),
        "driver_baseline_mib": base["peak_mib"].get("driver"),
        "wall_s": full["wall_s"],
        "baseline_wall_s": base["wall_s"],
        "allowed_mib": GOAL * tasks * b,
        "error": base.get("error") or full.get("error"),
        "stages": full["stages"],
    }
    measured = [s for s in full["stages"] if s["peak_mib"] is not None]
    row["peak_stage"] = max(measured, key=lambda s: s["peak_mib"])["stage"] if measured else None
    if row["baseline_mib"] is not None and row["peak_mib"] is not None:
        row["above_mib"] = row["peak_mib"] - row["baseline_mib"]
        row["ratio"] = row["above_mib"] / (tasks * b)
        row["ok"] = row["error"] is None and row["above_mib"] <= row["allowed_mib"]
        row["worker_ok"] = row["ok"]
    else:
        row["ok"] = False
        row["error"] = row["error"] or f"no {role} process was sampled"
    if role == "worker" and row["driver_peak_mib"] is not None and row["driver_baseline_mib"] is not None:
        # the driver's own contract: its state (plans, markers, dedup's pairs, graph and sets) within one budget
        row["driver_above_mib"] = row["driver_peak_mib"] - row["driver_baseline_mib"]
        row["driver_ratio"] = row["driver_above_mib"] / b
        row["driver_ok"] = row["driver_above_mib"] <= DRIVER_GOAL * b
        row["ok"] = row["ok"] and row["driver_ok"]
    return row


# -- the report ------------------------------------------------------------------------------------------------


def _fmt(x, spec: str = ".0f") -> str:
    return "–" if x is None else format(x, spec)


def _driver_mark(row: dict) -> str:
    """The driver's ÷ budget with its verdict; – where the row's goal already is the driver's."""
    if "driver_ratio" not in row:
        return "–"
    return f"{row['driver_ratio']:.2f} {'✓' if row['driver_ok'] else '✗'}"


def render(rows: list[dict], corpora: dict[str, Corpus], args: argparse.Namespace) -> str:
    load = os.getloadavg()
    lines = [
        f"\n### Peak RSS per worker against the memory budget — {datetime.date.today()}, {machine()}, load {load[0]:.1f}\n",
        "Command: `flock /tmp/zephyr-bench.lock .venv/bin/python benchmarks/budget_peaks.py "
        + " ".join(shlex.quote(a) for a in sys.argv[1:])
        + f"` (`--executor {args.executor} --workers {args.workers}`). Inputs: "
        + "; ".join(
            f"{b}: {c.rows:,} docs, {c.arrow_bytes / MIB:.0f} MiB Arrow ({c.arrow_bytes / MIB / budget_mib(b):.1f}× the budget), "
            f"{c.parquet_bytes / MIB:.0f} MiB zstd Parquet"
            for b, c in corpora.items()
        )
        + f". Baseline: the same op on {TINY_ROWS:,} rows with workers forced. Goal: peak − baseline ≤ {GOAL} × budget"
        + " (`duckdb:` rows: the peer in one process with `memory_limit` = workers × budget and as many threads;"
        + " its ÷ budget is over that limit)"
        + (" × workers (threads: one process runs every task)" if args.executor == "threads" else "")
        + ". An op marked *(driver)* ran its tasks in the driver: its driver peak against the driver's on the"
        + f" tiny input, run there too. Otherwise the driver has its own goal: peak − its baseline ≤ {DRIVER_GOAL} ×"
        + " budget (the driver's peak on the tiny input is its baseline). ✓/✗ in the goal column is the"
        + " worker's; the row passes when both hold.\n",
        f"| op | budget | baseline MiB | {'driver' if args.executor == 'threads' else 'worker (or driver)'} peak MiB | peak − baseline MiB | ÷ budget | goal ≤ {GOAL} | driver peak MiB | driver baseline MiB | driver ÷ budget (≤ {DRIVER_GOAL}) | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "✓" if r.get("worker_ok", r["ok"]) else "✗"
        if r.get("error") and "above_mib" not in r:
            mark = "error: " + r["error"].splitlines()[0][:80]
        lines.append(
            f"| {r['op']}{' *(driver)*' if r['role'] == 'driver' and args.executor != 'threads' else ''} | {r['budget']} | {_fmt(r['baseline_mib'])} | {_fmt(r['peak_mib'])} | {_fmt(r.get('above_mib'))} "
            f"| {_fmt(r.get('ratio'), '.2f')} | {mark} | {_fmt(r['driver_peak_mib'])} | {_fmt(r['driver_baseline_mib'])} "
            f"| {_driver_mark(r)} | {r['wall_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def prepare(budget: str, work: Path, args: argparse.Namespace) -> Corpus:
    target = int(args.data_ratio * budget_mib(budget) * MIB)
    return generate_corpus(
        work / f"data-{budget.lower()}",
        target,
        row_group_bytes=int(budget_mib(args.row_group_bytes) * MIB),
        seed=args.seed,
    )


def prepare_tiny(work: Path, seed: int = 0) -> Corpus:
    directory = work / "data-tiny"
    rng = np.random.default_rng(seed)
    vocab, zipf = _vocabulary(rng)
    table = _docs_table(rng, vocab, zipf, 0, TINY_ROWS, TINY_ROWS // 4)
    (directory / "docs").mkdir(parents=True)
    (directory / "labels").mkdir(parents=True)
    pq.write_table(table, directory / "docs" / "part-00000.parquet", compression="zstd")
    pq.write_table(
        pa.table(
            {"id": table.column("id"), "label": pa.array(["x"] * TINY_ROWS), "score": np.zeros(TINY_ROWS)}
        ),
        directory / "labels" / "part-00000.parquet",
    )
    return Corpus(directory / "docs", directory / "labels", table.nbytes, 0, TINY_ROWS)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "api":
        return run_api(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "duckdb":
        return run_duckdb(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="64MiB,512MiB")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--executor", default="local", choices=("local", "threads"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data-ratio", type=float, default=6.0, help="input Arrow bytes ÷ budget")
    ap.add_argument("--row-group-bytes", default="32MiB", help="Arrow bytes per input row group")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    ap.add_argument("--logs", default=str(ROOT / "benchmarks" / ".out" / "budget_peaks"))
    ap.add_argument("--keep-data", action="store_true", help="generate into --logs and keep the corpora")
    ap.add_argument("--no-append", action="store_true")
    ap.add_argument(
        "--peers", choices=("none", "duckdb"), default="duckdb", help="side-by-side runs of the peer"
    )
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    unknown = sorted(set(ops) - set(OPS) - {f"duckdb:{p}" for p in PEER_OPS})
    if unknown:
        ap.error(f"unknown ops {unknown}; choose from {list(OPS)}")
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    corpora: dict[str, Corpus] = {}
    with tempfile.TemporaryDirectory(prefix="zephyr-budget-", dir=logs if args.keep_data else None) as tmp:
        work = Path(tmp)
        tiny = prepare_tiny(work, args.seed)
        setup = Setup(args.executor, args.workers, None)
        for budget in [b for b in args.budgets.split(",") if b]:
            t0 = time.perf_counter()
            corpus = corpora[budget] = prepare(budget, work, args)
            print(
                f"generated {corpus.rows:,} docs, {corpus.arrow_bytes / MIB:.0f} MiB Arrow in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            if "tokenize" in ops and setup.tokenizer is None:
                setup = Setup(args.executor, args.workers, train_tokenizer(work / "tokenizer.json", corpus))
            peers = [f"duckdb:{o}" for o in ops if o in PEER_OPS and args.peers == "duckdb"]
            for op in ops + peers:
                row = measure_op(
                    op, budget, corpus, tiny, setup, work=work, logs=logs, timeout_s=args.timeout
                )
                print(json.dumps(row), flush=True)
                rows.append(row)
            if not args.keep_data:
                shutil.rmtree(corpus.docs.parent, ignore_errors=True)
    text = render(rows, corpora, args)
    (logs / "summary.json").write_text(json.dumps(rows, indent=1))
    publish(text, append=not args.no_append)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
