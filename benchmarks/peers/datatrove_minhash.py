"""datatrove 0.10.1 MinHash (signature → buckets → cluster → filter), 2 tasks / 2 workers → clusters.parquet.

Its defaults: word 5-grams after its text normalization, 14 buckets × 8 hashes, 64-bit hashes.
The filter drops the removed duplicates before later steps see them, so they are written by its
``exclusion_writer`` (with their ``minhash_cluster_id``) and merged back into ``clusters.parquet``.
``--reuse-work`` reruns only the filter step on an earlier run's work folder (for rescoring)."""

import glob
import gzip
import json
import os
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig

in_dir, out = sys.argv[1], sys.argv[2]
reuse = "--reuse-work" in sys.argv[3:]
work = os.path.join(out, "work")
cfg = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8, n_grams=5)


def reader():
    return ParquetReader(in_dir, glob_pattern="part-*.parquet", text_key="text", id_key="id")


def collect(data, rank: int = 0, world_size: int = 1):
    rows = []
    for doc in data:
        rows.append((doc.id, doc.metadata.get("minhash_cluster_id", -1)))
        yield doc
    pq.write_table(
        pa.table({"id": [r[0] for r in rows], "dt_cluster": [int(r[1]) for r in rows]}),
        os.path.join(out, f"rank{rank}.parquet"),
    )


def first_stages() -> None:
    LocalPipelineExecutor(
        pipeline=[reader(), MinhashDedupSignature(output_folder=f"{work}/sigs", config=cfg)],
        tasks=2,
        workers=2,
        logging_dir=f"{work}/logs/s1",
    ).run()
    LocalPipelineExecutor(
        pipeline=[
            MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets", config=cfg)
        ],
        tasks=cfg.num_buckets,
        workers=2,
        logging_dir=f"{work}/logs/s2",
    ).run()
    LocalPipelineExecutor(
        pipeline=[
            MinhashDedupCluster(
                input_folder=f"{work}/buckets",
                output_folder=f"{work}/remove",
                config=cfg,
                save_cluster_id=True,
            )
        ],
        tasks=1,
        logging_dir=f"{work}/logs/s3",
    ).run()


if __name__ == "__main__":
    if reuse:
        shutil.rmtree(f"{work}/logs/s4", ignore_errors=True)
        shutil.rmtree(f"{work}/removed", ignore_errors=True)
    else:
        first_stages()
    LocalPipelineExecutor(
        pipeline=[
            reader(),
            MinhashDedupFilter(
                input_folder=f"{work}/remove",
                load_cluster_ids=True,
                exclusion_writer=JsonlWriter(f"{work}/removed", compression="gzip"),
            ),
            collect,
        ],
        tasks=2,
        workers=2,
        logging_dir=f"{work}/logs/s4",
    ).run()
    t = pa.concat_tables([pq.read_table(os.path.join(out, f"rank{r}.parquet")) for r in range(2)])
    ids = t["id"].to_pylist()
    dt = t["dt_cluster"].to_pylist()
    for path in sorted(glob.glob(f"{work}/removed/*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for line in f:
                rec = json.loads(line)
                ids.append(rec["id"])
                dt.append(int(rec["metadata"].get("minhash_cluster_id", -1)))
    first = {}
    for i, c in zip(ids, dt):
        if c != -1:
            first.setdefault(c, i)
    pq.write_table(
        pa.table({"id": ids, "cluster": [first[c] if c != -1 else i for i, c in zip(ids, dt)]}),
        os.path.join(out, "clusters.parquet"),
    )
