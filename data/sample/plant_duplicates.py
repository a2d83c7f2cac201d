"""Plant near-duplicates and messy web copies in the embedded sample, reproducibly (seeded), in place.

    .venv/bin/python data/sample/plant_duplicates.py            # rewrites data/sample/sample.parquet
    .venv/bin/python data/sample/plant_duplicates.py --check    # exit 1 if the file is not what it builds

Why: the sample's own duplicates are byte-identical Milton files only (exact dedup removes them); its two
Shakespeare editions differ in spelling and in where the parts are cut (best word-5-gram Jaccard between a
Folio part and a modern part: 0.23), so fuzzy dedup had nothing to find and normalization nothing to fix.
Every quickstart stage should visibly change something, so this script adds rows whose fate is known:

- *near duplicates* (id ``<seed id>~<edit>``): a copy of a document with one realistic edit — ``typos``
  (letters swapped or dropped in 1.5% of the words), ``modernized`` (archaic spellings such as thee/thou/
  hath/doth replaced, at most 2% of the words), ``excerpt`` (the last ~10% of the lines cut), ``reposted``
  (a site header and a licence footer added) or ``verse_dropped`` (one line from the middle removed). Each
  one differs from its seed after exact dedup's normalization and reaches word-5-gram Jaccard >= 0.85 with
  it after the quickstart's normalize and heuristic stages, so fuzzy dedup removes it and keeps the seed
  (the smaller id);
- *web copies* (id ``<seed id>~web``): the seed with CRLF line endings, a byte-order mark, non-breaking
  spaces and trailing spaces, as a page scraped from the web arrives. Normalization rewrites them back to the
  seed's text, so exact dedup removes them.

Seeds are taken from every source in a seeded order and kept only if the quickstart's language ID and
heuristics keep them and their copies (checked here with the same functions), so the outcome does not depend
on luck. Rebuilding
drops the planted rows first (ids with ``~``), so the script is idempotent; the same seed gives the same bytes.
"""

from __future__ import annotations

import argparse
import io
import random
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SAMPLE = Path(__file__).resolve().with_name("sample.parquet")
MARK = "~"
NEAR_PER_SOURCE = {"kjv": 8, "milton": 4, "shakespeare": 6}
WEB_PER_SOURCE = {"kjv": 4, "milton": 2, "shakespeare": 2}
EDITS = ("typos", "modernized", "excerpt", "reposted", "verse_dropped")
MIN_JACCARD = 0.85  # margin over the quickstart's fuzzy threshold (0.8)
ARCHAIC = {
    "thee": "you",
    "thou": "you",
    "thy": "your",
    "thine": "yours",
    "hath": "has",
    "doth": "does",
    "saith": "says",
    "unto": "to",
    "ye": "you",
    "shalt": "shall",
    "art": "are",
    "hast": "have",
}
WORD = re.compile(r"[A-Za-z]{4,}")


def _typos(text: str, rng: random.Random) -> str:
    words = list(WORD.finditer(text))
    picked = sorted(rng.sample(range(len(words)), max(1, int(len(words) * 0.015))))
    out, last = [], 0
    for i in picked:
        m = words[i]
        w = m.group()
        j = rng.randrange(1, len(w) - 1)
        w = w[:j] + w[j + 1] + w[j] + w[j + 2 :] if rng.random() < 0.5 else w[:j] + w[j + 1 :]
        out += [text[last : m.start()], w]
        last = m.end()
    return "".join(out) + text[last:]


def _modernized(text: str, rng: random.Random) -> str:
    budget = max(1, int(len(text.split()) * 0.02))

    def swap(m: re.Match[str]) -> str:
        nonlocal budget
        word = m.group()
        new = ARCHAIC.get(word.lower())
        if new is None or budget <= 0:
            return word
        budget -= 1
        return new.capitalize() if word[0].isupper() else new

    out = re.sub(r"\b[A-Za-z]+\b", swap, text)
    return out if out != text else _typos(text, rng)


def _excerpt(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    return "\n".join(lines[: max(1, round(len(lines) * rng.uniform(0.88, 0.93)))])


def _reposted(text: str, rng: random.Random) -> str:
    site = rng.choice(["Old Books Online", "The Reading Room", "Classic Texts Daily", "Library Corner"])
    year = rng.randrange(2009, 2024)
    header = f"Posted by the editors of {site} in {year}. Read the full text below."
    footer = f"This text is in the public domain. Shared by {site}, {year}."
    return f"{header}\n\n{text}\n\n{footer}"


def _verse_dropped(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    long = [i for i, line in enumerate(lines) if len(line.split()) >= 8][1:-1]
    if not long:
        return _excerpt(text, rng)
    del lines[rng.choice(long)]
    return "\n".join(lines)


def _web_copy(text: str, rng: random.Random) -> str:
    lines = []
    for line in text.split("\n"):
        if line and rng.random() < 0.3:
            line = line.replace(" ", "\u00a0", 1)
        if rng.random() < 0.2:
            line += "  "
        lines.append(line)
    return "\ufeff" + "\r\n".join(lines)


EDIT_FUNCTIONS = {
    "typos": _typos,
    "modernized": _modernized,
    "excerpt": _excerpt,
    "reposted": _reposted,
    "verse_dropped": _verse_dropped,
}


def _as_quickstart_sees(texts: list[str]) -> tuple[list[str], list[bool]]:
    """The texts after the quickstart's normalize, langid (English, score >= 0.5) and heuristic_filter
    stages, and whether they are kept (needs the language-ID model that scripts/setup installs)."""
    from zephyr.pipelines.quality.filters import FilterAnnotator
    from zephyr.pipelines.quality.langid import LanguageIdentifier
    from zephyr.pipelines.quality.normalize import normalize_array

    normalized = normalize_array(pa.array(texts, pa.large_string()))
    table = LanguageIdentifier()(pa.table({"text": normalized}))
    english = pc.and_(pc.equal(table["lang"], "en"), pc.greater_equal(table["lang_score"], 0.5)).to_pylist()
    table = FilterAnnotator("gopher,c4,fineweb")(table)
    kept = [e and r is None for e, r in zip(english, table["drop_reason"].to_pylist())]
    return table["text"].to_pylist(), kept


def _judge(seed: str, copies: list[str]) -> list[tuple[bool, float, bool]]:
    """Per copy: (the copy and its seed pass the heuristics, word-5-gram Jaccard to the seed as fuzzy dedup
    measures it, the copy equals the seed after exact dedup's default normalization)."""
    import numpy as np
    from zephyr.dedup._graph import jaccard
    from zephyr.dedup._hashing import unique_sets
    from zephyr.dedup._minhash import compute_signatures
    from zephyr.dedup.config import FuzzyDedupConfig
    from zephyr.dedup.exact import document_hashes

    texts, kept = _as_quickstart_sees([seed, *copies])
    arr = pa.array(texts, pa.large_string())
    shingles, _ = compute_signatures(arr, FuzzyDedupConfig(threshold=0.8, shingle="word", ngram=5))
    edges = np.array([[0, i] for i in range(1, len(texts))], dtype=np.int64).reshape(-1, 2)
    sims = jaccard(unique_sets(shingles), edges)
    hashes = document_hashes(arr, "default")
    return [
        (kept[0] and kept[i], float(sims[i - 1]), bool((hashes[i] == hashes[0]).all()))
        for i in range(1, len(texts))
    ]


def build(base: pa.Table, seed: int = 15) -> pa.Table:
    """``base`` (without planted rows) plus the planted rows, sorted by id like the original sample."""
    from zephyr.dedup.exact import document_hashes

    rng = random.Random(seed)
    rows = base.to_pylist()
    hashes = [bytes(h) for h in document_hashes(base["text"], "default")]
    # exact dedup keeps the smallest id of a cluster: only that one can be a seed
    kept_id: dict[bytes, str] = {}
    for row, h in zip(rows, hashes):
        kept_id[h] = min(kept_id.get(h, row["id"]), row["id"])
    planted = []
    for source in sorted(NEAR_PER_SOURCE):
        candidates = [
            r
            for r, h in zip(rows, hashes)
            if r["source"] == source and kept_id[h] == r["id"] and len(r["text"].split()) >= 200
        ]
        rng.shuffle(candidates)
        near_left, web_left = NEAR_PER_SOURCE[source], WEB_PER_SOURCE[source]
        for row in candidates:
            if near_left == 0 and web_left == 0:
                break
            kind = (
                "web"
                if web_left and (near_left == 0 or rng.random() < 0.4)
                else EDITS[near_left % len(EDITS)]
            )
            edit = _web_copy if kind == "web" else EDIT_FUNCTIONS[kind]
            text = edit(row["text"], rng)
            passes, sim, same = _judge(row["text"], [text])[0]
            if not passes or (kind == "web") != same or (kind != "web" and sim < MIN_JACCARD):
                continue
            planted.append(
                {
                    **row,
                    "id": f"{row['id']}{MARK}{kind}",
                    "text": text,
                    "url": f"planted:{kind}-copy-of:{row['id']}",
                }
            )
            if kind == "web":
                web_left -= 1
            else:
                near_left -= 1
        if near_left or web_left:
            raise SystemExit(
                f"{source}: not enough seeds for the planted copies ({near_left} near, {web_left} web)"
            )
    table = pa.concat_tables([base, pa.Table.from_pylist(planted, schema=base.schema)])
    order = sorted(range(table.num_rows), key=lambda i: _id_key(table["id"][i].as_py()))
    return table.take(pa.array(order))


def _id_key(row_id: str) -> tuple[str, int, str]:
    """``kjv/5`` < ``kjv/5~typos`` < ``kjv/10``: the original order, each copy right after its seed."""
    head, _, tail = row_id.partition(MARK)
    source, _, number = head.partition("/")
    return source, int(number) if number.isdigit() else -1, tail


def _write(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", compression_level=19)
    return sink.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if sample.parquet differs from a rebuild"
    )
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args(argv)
    current = pq.read_table(SAMPLE)
    base = current.filter(pc.invert(pc.match_substring(current["id"], MARK)))
    data = _write(build(base, args.seed))
    if args.check:
        same = SAMPLE.read_bytes() == data
        print("sample.parquet is up to date" if same else "sample.parquet differs from a rebuild")
        return 0 if same else 1
    tmp = SAMPLE.with_suffix(".parquet.tmp")
    tmp.write_bytes(data)
    tmp.replace(SAMPLE)
    n = pq.read_metadata(SAMPLE).num_rows
    print(f"wrote {SAMPLE} ({n} rows, {n - base.num_rows} planted, {len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
