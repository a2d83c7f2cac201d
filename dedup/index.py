"""On-disk signature index for incremental fuzzy dedup, read through the engine (never whole into RAM).

Dedup corpus A once and keep its signatures; later corpora B, C, … are deduped against them (and within
themselves), and their signatures are appended. Indexed documents are never changed by a later run: a row
of B is removed when its true Jaccard to a kept indexed document (or to a kept row of B) reaches the
threshold. The index also records the rows each run *removed*, tied to the row kept for them, because one
dedup of the union links through them: a row of B near a removed row of A is checked against the row of A
that was kept for it (the anchored rule's refinement), which LSH alone may miss. So "A, then B against the
index" keeps exactly the rows "A ∪ B at once" keeps whenever A's rows come before B's in keep order (ids
that grow with time, or no id column); rows that come later are never un-removed.

Layout of an index directory (any fsspec URL)::

    _index.json                    {"format": "zephyr.dedup.index", "version": 1, "settings": {shingle, ngram,
                                    normalize, num_perm_resolved, seed, scheme, bands, rows}, "config",
                                    "generations": [{"name", "docs", "kept", "run"}, ...]}
    gen-00000/docs/part-*.parquet  key int64, anchor int64, id, bands fixed_size_list<int64>,
                                   shingles large_list<uint64> (sorted set)
    gen-00000/bands/part-*.parquet __dedup_row int64 (= key), band int32, bhash int64: one row per band
    gen-00001/...                  one generation per run that wrote or updated the index

``key`` is negative, unique across generations and ascending in the order documents were added
(``(generation << 46 | shard << 30 | position) - 2**62``), so in a new run every indexed document comes
before every new row (row numbers are ≥ 0): in LSH buckets a new row is paired with indexed documents
first, and in keep order indexed documents rank first. The band rows have the schema of the new rows' band
rows, so one Parquet read of both feeds the bucket shuffle. A generation is written under a temporary name
and renamed; ``_index.json`` is replaced last, so a run that dies leaves the index as it was. A generation
may carry the fingerprint of the run that wrote it (``run``): that run, resumed, ignores and replaces it.

An index built with other shingling, permutations or banding is refused, naming the differing settings.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zephyr.dedup._rows import KEEPER, ROW
from zephyr.dedup.config import COLUMNS, DedupColumns, FuzzyDedupConfig

from zephyr import counters, job_stats
from zephyr.errors import ConfigError, InputError
from zephyr.io.parquet import parquet_rows
from zephyr.io.paths import write_json_atomic

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

INDEX_FORMAT = "zephyr.dedup.index"
INDEX_VERSION = 1
KEY = "key"
_CHECKED = ("shingle", "ngram", "normalize", "num_perm_resolved", "seed", "scheme", "bands", "rows")
_GEN_BITS, _SHARD_BITS = 46, 30
_KEY_BASE = 1 << 62
_ROW_SHIFT = 40  # Dataset.with_row_index: shard << 40 | position


@dataclass(frozen=True)
class IndexInfo:
    """An opened index: where it is and the generations this run reads."""

    path: str
    meta: dict[str, Any]
    generations: tuple[dict[str, Any], ...]

    @property
    def docs(self) -> int:
        return sum(g["docs"] for g in self.generations)

    def files(self, part: str) -> list[str]:
        """The Parquet parts of ``docs`` (key, anchor, id, bands, shingles: one row per indexed document) or
        of ``bands`` (__dedup_row = key, band, bhash: one row per indexed document and band)."""
        fs, root = fsspec.core.url_to_fs(self.path)
        out: list[str] = []
        for gen in self.generations:
            if gen["docs"]:
                out += sorted(fs.glob(f"{root}/{gen['name']}/{part}/part-*.parquet"))
        return [fs.unstrip_protocol(f) for f in out] if "://" in self.path else out

    def node_sets(self, keys: pa.Array, execution: dict[str, Any]) -> pa.Table:
        """(key, anchor, id, shingles) of the indexed documents whose key is in ``keys``: one filtered pass."""
        import zephyr

        if not self.docs or len(keys) == 0:
            return pa.table({KEY: pa.array([], pa.int64())})
        return (
            zephyr.read_parquet(self.files("docs"), columns=[KEY, "anchor", "id", "shingles"])
            .map_batches(lambda t: t.filter(pc.is_in(t[KEY], value_set=keys)), name="dedup.index.node_sets")
            .to_arrow(**execution)
        )


def _settings(config: FuzzyDedupConfig) -> dict[str, Any]:
    bands, rows = config.bands_rows()
    return {**{k: getattr(config, k) for k in _CHECKED[:-2]}, "bands": bands, "rows": rows}


def open_index(
    path: str, config: FuzzyDedupConfig, *, missing_ok: bool = False, run: str | None = None
) -> IndexInfo | None:
    """The index at ``path`` if its signatures match ``config``'s (else a ConfigError naming each
    difference); None when there is none and ``missing_ok``. Generations written by ``run`` are left out."""
    fs, root = fsspec.core.url_to_fs(path)
    try:
        meta = json.loads(fs.cat_file(f"{root}/_index.json"))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise InputError(
            f"no signature index at {path} (no _index.json); create one with --write-index {path}", path=path
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"signature index metadata is not JSON: {exc}", path=f"{path}/_index.json") from exc
    got = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else (type(meta).__name__, None)
    if got != (INDEX_FORMAT, INDEX_VERSION):
        raise InputError(
            f"not a zephyr signature index (format {got[0]!r} version {got[1]!r}; "
            f"expected {INDEX_FORMAT!r} version {INDEX_VERSION})",
            path=f"{path}/_index.json",
        )
    built, wanted = meta["settings"], _settings(config)
    differ = [
        f"{k} {built.get(k)!r} (this run: {wanted[k]!r})" for k in _CHECKED if built.get(k) != wanted[k]
    ]
    if differ:
        raise ConfigError(
            f"the signature index at {path} was built with other MinHash settings: {', '.join(differ)}; "
            "run with the index's settings, or start a new index"
        )
    gens = tuple(g for g in meta["generations"] if run is None or g.get("run") != run)
    return IndexInfo(path, meta, gens)


class _IndexRows:
    """(key, anchor, id, bands, shingles) of one generation's rows. From a dedup output with row numbers
    (``fuzzy_dedup_dataset(row_numbers=True)``) every row is recorded, the removed ones with the key of the
    row kept for them: later runs link through them as one dedup of the union would. Any other dataset is
    recorded as all kept. Rows without text or shingles are left out (no band hash: nothing can match them).
    """

    def __init__(self, config: FuzzyDedupConfig, columns: DedupColumns, generation: int):
        self.config, self.columns, self.generation = config, columns, generation

    def __call__(self, table: pa.Table) -> pa.Table:
        from zephyr.dedup._hashing import unique_sets
        from zephyr.dedup._minhash import compute_signatures

        text, id_column = self.columns.text_column, self.columns.id_column
        if text not in table.column_names:  # an empty output file without columns: no row, int64 ids
            ids = {} if id_column is None else {id_column: pa.array([], pa.int64())}
            table = pa.table(
                {text: pa.array([], pa.large_string()), "__index_row": pa.array([], pa.int64()), **ids}
            )
        table = table.filter(pc.is_valid(table[text]))
        shingles, bands = compute_signatures(table[text], self.config)
        numbers = (ROW, KEEPER) if ROW in table.column_names else ("__index_row", "__index_row")  # all kept
        key, anchor = (self._keys(np.asarray(table[c], dtype=np.int64)) for c in numbers)
        # without an id column an indexed document is named by its key (unique, stable across runs)
        ids = table[id_column] if id_column is not None else pa.array(key)
        sets = unique_sets(shingles)
        lists = pa.LargeListArray.from_arrays(pa.array(sets.offsets), pa.array(sets.hashes, pa.uint64()))
        flat = pa.array(np.ascontiguousarray(bands).reshape(-1).view(np.int64))
        out = pa.table(
            {
                KEY: pa.array(key, pa.int64()),
                "anchor": pa.array(anchor, pa.int64()),
                "id": ids,
                "bands": pa.FixedSizeListArray.from_arrays(flat, bands.shape[1]),
                "shingles": lists,
            }
        )
        out = out.filter(pa.array(shingles.counts > 0))
        counters.increment("dedup/index_kept", pc.sum(pc.equal(out[KEY], out["anchor"])).as_py() or 0)
        return out

    def _keys(self, rows: np.ndarray) -> np.ndarray:
        """Index keys of row numbers (``shard << 40 | position``); negative numbers are keys already."""
        new = rows >= 0
        shard, position = rows[new] >> _ROW_SHIFT, rows[new] & ((1 << _ROW_SHIFT) - 1)
        if new.any() and (
            shard.max() >= 1 << (_GEN_BITS - _SHARD_BITS) or position.max() >= 1 << _SHARD_BITS
        ):
            raise ConfigError(
                "an index generation holds at most 2^16 shards of 2^30 rows; index the output in parts"
            )
        keys = rows.copy()
        keys[new] = ((self.generation << _GEN_BITS) | (shard << _SHARD_BITS) | position) - _KEY_BASE
        return keys


def _explode_bands(table: pa.Table) -> pa.Table:
    """(key, bands) → one (__dedup_row, band, bhash) row per document and band (``_minhash.band_rows``)."""
    from zephyr.dedup._minhash import band_rows

    bands = np.asarray(table["bands"].combine_chunks().flatten(), dtype=np.int64)
    return band_rows(table[KEY], bands.reshape(table.num_rows, table.schema.field("bands").type.list_size))


def checked_target(path: str, config: FuzzyDedupConfig, create: bool) -> IndexInfo | None:
    """The index at ``path`` a run adds a generation to: ``create``, none may be there yet; else one must."""
    info = open_index(path, config, missing_ok=True)
    if create and info is not None:
        raise ConfigError(
            f"a signature index already exists at {path}; add to it with --index {path} --update-index"
        )
    if not create and info is None:
        raise ConfigError(f"no signature index at {path} to update; create one with --write-index {path}")
    return info


def write_generation(
    path: str,
    kept: Dataset,
    config: FuzzyDedupConfig,
    columns: DedupColumns = COLUMNS,
    *,
    create: bool,
    run: str | None = None,
    execution: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Append the signatures of ``kept`` (rows whose ``dup_keep`` is false are skipped) to the index at
    ``path`` as a new generation; ``create`` starts the index (refused if one exists there; an index
    never grows by accident), else it must exist. ``run`` tags the generation: a generation with the same
    tag (left by this run before it was interrupted) is replaced. Returns the generation's entry."""
    import zephyr

    fs, root = fsspec.core.url_to_fs(path)
    info = checked_target(path, config, create)
    meta = info.meta if info is not None else {"format": INDEX_FORMAT, "version": INDEX_VERSION}
    if info is None:
        meta.update(settings=_settings(config), config=asdict(config), generations=[])
    earlier = [g for g in meta["generations"] if run is None or g.get("run") != run]
    generation = 1 + max((int(g["name"].split("-")[1]) for g in meta["generations"]), default=-1)
    name = f"gen-{generation:05d}"
    scratch = f"{root}/{name}.tmp-{uuid.uuid4().hex[:8]}"
    url = (lambda p: fs.unstrip_protocol(p)) if "://" in path else (lambda p: p)
    execution = dict(execution or {})
    docs = (
        kept.with_row_index("__index_row")
        .map_batches(_IndexRows(config, columns, generation), name="dedup.index.docs")
        .write_parquet(url(f"{scratch}/docs"), **execution)
    )
    count = parquet_rows(docs.files)
    kept = job_stats.counter_totals(docs.stats.get("stages", [])).get("dedup/index_kept", 0)
    if docs.files:
        zephyr.read_parquet(docs.files, columns=[KEY, "bands"]).map_batches(
            _explode_bands, name="dedup.index.bands"
        ).write_parquet(url(f"{scratch}/bands"), **execution)
    final = f"{root}/{name}"
    if fs.exists(final):  # left by a run that died before it updated _index.json
        fs.rm(final, recursive=True)
    if fs.exists(scratch):
        fs.mv(scratch, final, recursive=True)
    entry = {"name": name, "docs": count, "kept": kept, **({"run": run} if run is not None else {})}
    meta = {**meta, "generations": [*earlier, entry]}
    fs.makedirs(root, exist_ok=True)
    write_json_atomic(url(f"{root}/_index.json"), meta)
    return entry
