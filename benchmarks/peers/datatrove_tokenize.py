"""datatrove 0.10.1 DocumentTokenizer end to end (Parquet → tokenized .ds files), for benchmarks/tokenize_throughput.py.

    benchmarks/.venvs/datatrove/bin/python benchmarks/peers/datatrove_tokenize.py DOCS.parquet TOKENIZER.json OUT_DIR \
        [--batch-size 10000] [--eos "<|endoftext|>"]

Input: one Parquet file with ``id`` (string) and ``text`` columns (the driver's sample) and a local HF
``tokenizer.json``: datatrove's ``load_tokenizer`` calls ``Tokenizer.from_file`` when the name is an existing
file, so nothing is downloaded. Pipeline, run by ``LocalPipelineExecutor(tasks=1)`` in this process:
``ParquetReader`` → ``DocumentTokenizer`` with datatrove's defaults (``shuffle_documents=True``, ``batch_size``
10,000, index + final metadata saved) and ``eos_token`` (default ``<|endoftext|>``, so one EOS follows every
document, as in zephyr's shards; pass ``--eos ''`` for none).

The whole pipeline (reader included) is timed. Output (format version 1), ``OUT_DIR/timings.json``:
``{"version": 1, "datatrove": str, "docs": int, "seconds": float, "tokens": int, "eos_per_doc": bool,
"token_size": int, "peak_rss_bytes": int}``. ``tokens`` is the total ``.ds`` payload divided by the token size
(EOS included when ``eos_per_doc``); ``peak_rss_bytes`` is this process's ``ru_maxrss`` (tasks=1 runs in it).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs", type=Path)
    ap.add_argument("tokenizer", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--batch-size", type=int, default=10_000, help="DocumentTokenizer batch_size (its default)"
    )
    ap.add_argument(
        "--eos", default="<|endoftext|>", help="EOS token text appended per document; '' for none"
    )
    args = ap.parse_args()
    if not args.tokenizer.is_file():
        raise SystemExit(f"{args.tokenizer}: not a file (datatrove would try to download it by name)")

    import datatrove
    import pyarrow.parquet as pq
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    args.out.mkdir(parents=True, exist_ok=True)
    shards = args.out / "shards"
    tokenizer = DocumentTokenizer(
        output_folder=str(shards),
        tokenizer_name_or_path=str(args.tokenizer),
        eos_token=args.eos or None,
        batch_size=args.batch_size,
        seed=0,
    )
    executor = LocalPipelineExecutor(
        pipeline=[
            ParquetReader(str(args.docs.parent), glob_pattern=args.docs.name, text_key="text", id_key="id"),
            tokenizer,
        ],
        tasks=1,
        logging_dir=str(args.out / "logs"),
    )
    t0 = time.perf_counter()
    executor.run()
    seconds = time.perf_counter() - t0
    payload = sum(p.stat().st_size for p in shards.glob("*.ds"))
    summary = {
        "version": 1,
        "datatrove": datatrove.__version__ if hasattr(datatrove, "__version__") else "0.10.1",
        "docs": pq.ParquetFile(args.docs).metadata.num_rows,
        "seconds": seconds,
        "tokens": payload // tokenizer.token_size,
        "eos_per_doc": bool(args.eos),
        "token_size": tokenizer.token_size,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    (args.out / "timings.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
