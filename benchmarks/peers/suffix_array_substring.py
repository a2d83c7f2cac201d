"""The suffix-array way of exact substring dedup (Lee et al. 2022, deduplicate-text-datasets), in one process:
one suffix array of the whole corpus in memory (pydivsufsort), LCP by Kasai, then every window of
``--min-bytes`` that shares its prefix group with an earlier position is a repeat. Same definition as
``zephyr dedup substring`` without the UTF-8 snapping; for benchmarks/substring_dedup.py.

    .venv/bin/python benchmarks/peers/suffix_array_substring.py DOCS_DIR --min-bytes 100

Prints one JSON line: ``{"bytes_in": N, "bytes_removed": N}``. Memory is about 40 bytes per corpus byte.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pyarrow.parquet as pq


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("docs")
    ap.add_argument("--min-bytes", type=int, default=100)
    args = ap.parse_args()
    from pydivsufsort import divsufsort, kasai

    L = args.min_bytes
    table = pq.read_table(args.docs, columns=["text"])
    parts = [t.encode() + b"\xff" for t in table["text"].to_pylist() if t]  # 0xFF never occurs in UTF-8
    buf = np.frombuffer(bytearray(b"".join(parts)), dtype=np.uint8)
    del parts, table
    n = len(buf)
    sa = divsufsort(buf)
    lcp = kasai(buf, sa)
    starts = np.flatnonzero(np.concatenate(([True], lcp[:-1] < L)))  # groups sharing >= L bytes
    group = np.cumsum(np.concatenate(([True], lcp[:-1] < L))) - 1
    del lcp
    first = np.minimum.reduceat(sa, starts)[group]
    repeat = sa[sa != first]
    del sa, first, group
    seps = np.concatenate(([0], np.cumsum(buf == 0xFF)))
    valid = repeat[repeat + L <= n]
    valid = valid[seps[valid + L] == seps[valid]]  # the window holds no separator: one document's bytes
    cover = np.zeros(n + 1, dtype=np.int32)
    np.add.at(cover, valid, 1)
    np.add.at(cover, valid + L, -1)
    removed = int((np.cumsum(cover[:-1]) > 0).sum())
    print(json.dumps({"bytes_in": int(n - seps[-1]), "bytes_removed": removed}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
