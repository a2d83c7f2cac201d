"""text-dedup 0.4.0 MinHash (HF datasets, num_proc=2): word 5-grams, 14 bands × 8 rows → clusters.parquet.

Clusters come from the union-find it dumps with --debug (uf.pkl, keyed by row index)."""

import os
import pickle
import sys

import pyarrow as pa
import pyarrow.parquet as pq
from text_dedup.minhash import main

files, out = sys.argv[1:-1], sys.argv[-1]
# datasets takes one pattern: the corpus' part files, which sort like the list given here
pattern = os.path.join(os.path.dirname(files[0]), "part-*.parquet") if len(files) > 1 else files[0]
args = [
    "--path",
    "parquet",
    "--data_files",
    pattern,
    "--split",
    "train",
    "--cache_dir",
    os.path.join(out, "cache"),
    "--output",
    os.path.join(out, "dedup"),
    "--column",
    "text",
    "--num_perm",
    "112",
    "--b",
    "14",
    "--r",
    "8",
    "--threshold",
    "0.8",
    "--ngram",
    "5",
    "--num_proc",
    "2",
    "--debug",
    "--hash_func",
    "xxh3",
    "--hash_bits",
    "64",
]
try:
    main(args, standalone_mode=False)
except SystemExit as exc:  # click may still exit on completion; a failure shows up as a missing uf.pkl
    print("text-dedup exited with", exc.code)
with open(os.path.join(out, "dedup", "uf.pkl"), "rb") as f:
    uf = pickle.load(f)
table = pa.concat_tables([pq.read_table(f, columns=["id"]) for f in files])
ids = table["id"].to_pylist()
pq.write_table(
    pa.table({"id": ids, "cluster": [ids[uf.find(i)] for i in range(len(ids))]}),
    os.path.join(out, "clusters.parquet"),
)
