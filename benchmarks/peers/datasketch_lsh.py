"""datasketch MinHashLSH (one process: datasketch has no parallel mode) → clusters.parquet.

Shingles: word 5-grams of text.lower().split(); 112 permutations as 14 bands × 8 rows; union-find over the
query results (no verification, as datasketch users typically do)."""

import sys

import pyarrow as pa
import pyarrow.parquet as pq
from datasketch import MinHash, MinHashLSH

files, out = sys.argv[1:-1], sys.argv[-1]
table = pa.concat_tables([pq.read_table(f, columns=["id", "text"]) for f in files])
ids = table["id"].to_pylist()
lsh = MinHashLSH(threshold=0.8, num_perm=112, params=(14, 8))
sigs = []
for i, text in enumerate(table["text"].to_pylist()):
    words = (text or "").lower().split()
    grams = {" ".join(words[j : j + 5]) for j in range(max(1, len(words) - 4))}
    m = MinHash(num_perm=112)
    m.update_batch([g.encode() for g in grams])
    lsh.insert(i, m)
    sigs.append(m)
parent = list(range(len(ids)))


def find(x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


for i, m in enumerate(sigs):
    for j in lsh.query(m):
        a, b = find(i), find(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
pq.write_table(
    pa.table({"id": ids, "cluster": [ids[find(i)] for i in range(len(ids))]}), f"{out}/clusters.parquet"
)
