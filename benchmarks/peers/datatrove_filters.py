"""datatrove 0.10.1 quality filters, each timed alone in one process, for benchmarks/quality_filters.py.

    benchmarks/.venvs/datatrove/bin/python benchmarks/peers/datatrove_filters.py DOCS.parquet OUT_DIR \
        [--lid-model PATH]

Input: a Parquet file with ``id`` (string) and ``text`` columns (the driver's sample). Every filter is run with
its datatrove defaults through ``BaseFilter.run`` (the path a datatrove pipeline takes, stats included) over
freshly built ``Document`` objects (C4QualityFilter rewrites ``doc.text``, so documents are never reused).
Building the documents is not timed; consuming the filter's generator is.

Output (format version 1), in OUT_DIR:

- ``timings.json``: ``{"version": 1, "datatrove": "0.10.1", "docs": N, "mb": float, "filters": {name:
  {"seconds": float, "kept": int, "dropped": int, "drop_reasons": {reason: rows}}}, "skipped": {name: why}}``;
- ``keep.parquet``: ``id`` plus one bool column per filter name (True = datatrove kept the document).

Filter names match the driver's: gopher_quality, gopher_repetition, c4, fineweb, langid_en.
``langid_en`` is ``LanguageFilter(languages=["en"])`` (keep when the English score > 0.65) with the local
``lid.176.ftz`` placed in datatrove's asset cache (``HF_ASSETS_CACHE`` → a temp dir) so nothing is downloaded;
datatrove's default model is ``lid.176.bin``, the uncompressed version of the same classifier.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _stage_lid_model(model: Path) -> str:
    """Point datatrove's asset cache at a temp dir holding ``model`` under the name its FT176LID expects.

    Must run before ``huggingface_hub`` is imported (it reads ``HF_ASSETS_CACHE`` at import time)."""
    assets = tempfile.mkdtemp(prefix="zephyr-dt-assets-")
    atexit.register(shutil.rmtree, assets, ignore_errors=True)  # holds only a symlink and a marker file
    os.environ["HF_ASSETS_CACHE"] = assets
    return assets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--lid-model", type=Path, default=None, help="local lid.176 .ftz/.bin; omit to skip LID")
    args = ap.parse_args()
    assets = _stage_lid_model(args.lid_model) if args.lid_model else None

    import pyarrow as pa
    import pyarrow.parquet as pq
    from datatrove.data import Document
    from datatrove.io import strip_protocol
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
    )
    from datatrove.utils.lid import FT176LID

    table = pq.read_table(args.docs, columns=["id", "text"])
    ids = table["id"].to_pylist()
    texts = table["text"].to_pylist()
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6

    filters = {
        "gopher_quality": GopherQualityFilter,
        "gopher_repetition": GopherRepetitionFilter,
        "c4": C4QualityFilter,
        "fineweb": FineWebQualityFilter,
    }
    skipped: dict[str, str] = {}
    if assets is not None:
        if not args.lid_model.is_file():
            sys.exit(
                f"--lid-model {args.lid_model} does not exist; pass the local lid.176.ftz or omit the flag"
            )
        folder = Path(assets) / "datatrove" / "lid" / FT176LID.MODEL_SUBFOLDER
        folder.mkdir(parents=True)
        name = strip_protocol(FT176LID.MODEL_URL).replace("/", "_")
        (folder / name).symlink_to(args.lid_model.resolve())
        (folder / f"{name}.completed").touch()  # datatrove's "already downloaded" marker
        filters["langid_en"] = lambda: LanguageFilter(languages=["en"])
    else:
        skipped["langid_en"] = "no --lid-model given (datatrove would download lid.176.bin)"

    results: dict[str, dict] = {}
    keep_cols: dict[str, list[bool]] = {}
    for name, make in filters.items():
        filt = make()
        # warm up outside the timed loop (lazy spaCy tokenizer / fastText model load), as zephyr's cached
        # loaders are warm after their first batch
        filt.filter(Document(text="Warm up the tokenizer and models. It is a short text.", id="warmup"))
        docs = [Document(text=t, id=i) for i, t in zip(ids, texts)]
        t0 = time.perf_counter()
        kept = {d.id for d in filt.run(iter(docs), rank=0, world_size=1)}
        dt = time.perf_counter() - t0
        keep_cols[name] = [i in kept for i in ids]
        reasons = {
            k[len("dropped_") :]: int(v.total)
            for k, v in filt.stats.stats.items()
            if k.startswith("dropped_")
        }
        results[name] = {
            "seconds": dt,
            "kept": len(kept),
            "dropped": len(ids) - len(kept),
            "drop_reasons": reasons,
        }
        print(
            f"datatrove {name}: {len(ids) / dt:,.0f} docs/s, kept {len(kept)}/{len(ids)}",
            file=sys.stderr,
            flush=True,
        )

    args.out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": ids, **keep_cols}), args.out / "keep.parquet")
    summary = {
        "version": 1,
        "datatrove": "0.10.1",
        "docs": len(ids),
        "mb": mb,
        "filters": results,
        "skipped": skipped,
    }
    (args.out / "timings.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
