"""datatrove 0.10.1: WarcReader + Trafilatura + JsonlWriter over a folder of WARCs, for benchmarks/web_extract.py.

    benchmarks/.venvs/datatrove_web/bin/python benchmarks/peers/datatrove_warc.py WARC_DIR OUT_DIR --workers 2

One task per WARC file on datatrove's LocalPipelineExecutor with ``--workers`` processes; Trafilatura with its
defaults as datatrove's FineWeb example uses them (``favour_precision=True``). Prints one JSON line:
``{"documents": N}`` (documents written).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("warcs")
    ap.add_argument("out")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers import JsonlWriter

    files = sorted(p for p in os.listdir(args.warcs) if p.endswith(".warc.gz"))
    LocalPipelineExecutor(
        pipeline=[
            WarcReader(args.warcs, glob_pattern="*.warc.gz"),
            Trafilatura(favour_precision=True, timeout=60.0),
            JsonlWriter(f"{args.out}/docs"),
        ],
        tasks=len(files),
        workers=args.workers,
        logging_dir=f"{args.out}/logs",
    ).run()
    documents = 0
    for path in Path(f"{args.out}/docs").glob("*.jsonl.gz"):
        with gzip.open(path, "rt") as f:
            documents += sum(1 for _ in f)
    print(json.dumps({"documents": documents}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
