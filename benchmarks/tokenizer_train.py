"""Peak RSS and time of training a byte-level BPE: ``zephyr tokenizer train`` vs the in-memory way.

    .venv/bin/python benchmarks/tokenizer_train.py                         # 8, 32, 96 MB samples, appends
    .venv/bin/python benchmarks/tokenizer_train.py --mb 8,32 --vocab-size 32768 --no-append
    .venv/bin/python benchmarks/tokenizer_train.py --mb '' --budgets 512MiB,1GiB   # the cap on real data

Each run is its own process, its RSS (whole process tree) sampled every 0.1 s from outside
(``benchmarks/_measure.py``), on the benchmark corpus (``/work/corpus/medium/docs``: web pages, code, man pages
and documentation in many languages — many distinct words per byte, the hard case for the trainer):

- ``zephyr``: ``zephyr tokenizer train DOCS --sample-bytes N --memory-budget none`` — streams the sample (an
  equal share of the first bytes of every file) into HF ``tokenizers``' trainer;
- ``in-memory`` (the peer; what the quickstart's tokenize stage did before): the same text read into a Python
  list first, then ``Tokenizer.train_from_iterator(list)`` with the same model, pre-tokenizer and trainer.

Both see the same N bytes (the peer takes the zephyr run's documents: the same sampler, materialized), so the
tokenizers must be identical; the script checks it. The row reports peak RSS, its growth over the process's
size before training (imports done), that growth per sample byte — the ratio ``sample_bound`` divides the
memory budget by (``tokenize/train_tokenizer.py``) — and wall time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import machine, publish, run_measured  # noqa: E402

from zephyr.config import parse_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / ".out" / "tokenizer_train"

_BEFORE = (
    "import resource, pathlib, tokenizers, pyarrow.parquet, zephyr.tokenize.train_tokenizer\n"
    "pathlib.Path({before!r}).write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
)

ZEPHYR = (
    _BEFORE
    + """
from zephyr.cli import main
raise SystemExit(main(["tokenizer", "train", {docs!r}, "--vocab-size", "{vocab}", "--output", {out!r},
                       "--sample-bytes", "{nbytes}", "--memory-budget", "{budget}"]))
"""
)

IN_MEMORY = (
    """
from zephyr.tokenize.train_tokenizer import iter_sample
texts = list(iter_sample({docs!r}, {nbytes}))   # the same sample, held whole
import gc; gc.collect()
"""
    + _BEFORE
    + """
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size={vocab}, min_frequency=2, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
pathlib.Path({out!r}).write_bytes(tok.to_str().encode("utf-8"))
"""
)


def _run(name: str, template: str, docs: str, nbytes: int, vocab: int, budget: str) -> dict:
    out = OUT / f"{name}-{nbytes}.json"
    before = OUT / f"{name}-{nbytes}.before"
    code = template.format(
        docs=docs, nbytes=nbytes, vocab=vocab, out=str(out), before=str(before), budget=budget
    )
    result = run_measured([sys.executable, "-c", code], log_path=str(OUT / f"{name}-{nbytes}.log"))
    if result["rc"] != 0:
        raise SystemExit(f"{name} failed; see {OUT / f'{name}-{nbytes}.log'}")
    before_mb = int(before.read_text()) * 1024 / 1e6
    growth = result["peak_rss_mb"] - before_mb
    return {
        **result,
        "before_mb": before_mb,
        "growth_mb": growth,
        "per_byte": growth * 1e6 / nbytes,
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="/work/corpus/medium/docs")
    parser.add_argument("--mb", default="8,32,96", help="sample sizes in MB, comma-separated")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument(
        "--budgets",
        default="",
        help="also run zephyr with these --memory-budget values (default sample 256MB)",
    )
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    rows = []
    for mb in (float(x) for x in filter(None, args.mb.split(","))):
        nbytes = int(mb * 1e6)
        ours = _run("zephyr", ZEPHYR, args.docs, nbytes, args.vocab_size, "1TiB")
        peer = _run("in-memory", IN_MEMORY, args.docs, nbytes, args.vocab_size, "")
        same = ours["sha256"] == peer["sha256"]
        for name, r in (
            ("zephyr tokenizer train (streamed)", ours),
            ("in-memory list + train_from_iterator", peer),
        ):
            rows.append(
                f"| {mb:g} | {name} | {r['peak_rss_mb']:.0f} | {r['before_mb']:.0f} | {r['growth_mb']:.0f} "
                f"| {r['per_byte']:.2f} | {r['wall_s']:.1f} | {'yes' if same else 'NO'} |"
            )
        print(json.dumps({"mb": mb, "zephyr": ours, "in_memory": peer}), file=sys.stderr)
    for budget in filter(None, args.budgets.split(",")):
        r = _run(f"budget-{budget}", ZEPHYR, args.docs, 256_000_000, args.vocab_size, budget)
        summary = json.loads((OUT / f"budget-{budget}-256000000.log").read_text().splitlines()[-1])
        within = "yes" if r["peak_rss_mb"] * 1e6 < parse_bytes(budget) else "NO"
        r["per_byte"] = r["growth_mb"] * 1e6 / summary["sample_bytes"]  # the bound, not the 256 MB asked for
        rows.append(
            f"| {summary['sample_bytes'] / 1e6:.0f} (bound of --memory-budget {budget}) | zephyr tokenizer "
            f"train | {r['peak_rss_mb']:.0f} | {r['before_mb']:.0f} | {r['growth_mb']:.0f} | "
            f"{r['per_byte']:.2f} | {r['wall_s']:.1f} | peak within budget: {within} |"
        )
    cmd = "python benchmarks/tokenizer_train.py " + " ".join(sys.argv[1:])
    text = (
        f"\n### Tokenizer training memory — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {machine()}\n\n"
        f"`{cmd.strip()}` — byte-level BPE, vocab {args.vocab_size:,}, on `{args.docs}`; 1-min load average "
        f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end. RSS: whole process, sampled every 0.1 s; "
        "'before' = ru_maxrss once imports are done.\n\n"
        "| sample MB | system | peak RSS MB | before MB | growth MB | growth per sample byte | wall s | same file |\n"
        "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    publish(text, append=not args.no_append)


if __name__ == "__main__":
    main()
