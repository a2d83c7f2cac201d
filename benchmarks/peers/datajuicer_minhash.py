"""data-juicer DocumentMinhashDeduplicator (space tokenization, window 5, 14 bands × 8 rows, num_proc=2)
→ clusters.parquet. Clusters are read from the op's union-find (captured by subclassing)."""

import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

files, out = sys.argv[1:-1], sys.argv[-1]
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(out, "cache"))

import data_juicer.ops.deduplicator.document_minhash_deduplicator as mod  # noqa: E402
from data_juicer.core.data import NestedDataset  # noqa: E402

CAPTURED = []


class CapturingUnionFind(mod.UnionFind):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        CAPTURED.append(self)


mod.UnionFind = CapturingUnionFind
table = pa.concat_tables([pq.read_table(f, columns=["id", "text"]) for f in files])
ids = table["id"].to_pylist()
ds = NestedDataset.from_dict({"text": table["text"].to_pylist()})
op = mod.DocumentMinhashDeduplicator(
    tokenization="space",
    window_size=5,
    lowercase=True,
    num_permutations=112,
    jaccard_threshold=0.8,
    num_bands=14,
    num_rows_per_band=8,
)
ds = ds.map(op.compute_hash, num_proc=2)
op.process(ds)
uf = CAPTURED[-1]
pq.write_table(
    pa.table({"id": ids, "cluster": [ids[uf.find(i)] for i in range(len(ids))]}),
    os.path.join(out, "clusters.parquet"),
)
