"""Connected components of an edge Dataset on the engine (external memory), for graphs beyond the driver.

Min-label propagation: each round joins the labels onto both endpoints, hooks both to the smaller label
(group-by min), then jumps pointers once (label ← label of label); rounds run until no label changes.
Labels only decrease and are bounded by the component minimum, so the fixpoint is unique and the result
does not depend on worker count. Each round is materialized (joins + group-bys over the edge files).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from zephyr.errors import ConfigError

if TYPE_CHECKING:
    from zephyr.dataset import Dataset

__all__ = ["connected_components_dataset", "NODE", "LABEL"]

logger = logging.getLogger(__name__)

NODE, LABEL = "__dedup_node", "__dedup_label"


def _hook(table: pa.Table) -> pa.Table:
    """Edge (u, v, label u, label v) → candidate labels min(lu, lv) for both endpoints."""
    m = pc.min_element_wise(table["lu"], table["lv"])
    return pa.table(
        {
            NODE: pa.concat_arrays([_arr(table["u"]), _arr(table["v"])]),
            LABEL: pa.concat_arrays([_arr(m), _arr(m)]),
        }
    )


def _arr(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _jump(table: pa.Table) -> pa.Table:
    """(node, label, label of label) → (node, min of the two)."""
    return pa.table({NODE: table[NODE], LABEL: pc.min_element_wise(table[LABEL], table["ll"])})


def _changed(table: pa.Table) -> pa.Table:
    return table.filter(pc.not_equal(table[LABEL], table["old"]))


def connected_components_dataset(
    edges: Dataset, *, execution: dict[str, Any] | None = None, max_rounds: int = 64
) -> Dataset:
    """(NODE, LABEL = smallest node of its component) for every node in ``edges`` (columns u, v).

    Min-label propagation: each round joins the labels onto both endpoints, hooks both to the smaller
    label (group-by min), then jumps pointers once (label ← label of label); rounds run until no label
    changes. Labels only decrease and are bounded by the component minimum, so the fixpoint is unique.
    """
    kw = dict(execution or {})
    edges = edges.materialize(**kw)
    labels = (
        edges.map_batches(
            lambda t: pa.table(
                {
                    NODE: pa.concat_arrays([_arr(t["u"]), _arr(t["v"])]),
                    LABEL: pa.concat_arrays([_arr(pc.min_element_wise(t["u"], t["v"]))] * 2),
                }
            ),
            name="dedup.cc.init",
        )
        .group_by(NODE)
        .agg(**{LABEL: (LABEL, "min")})
        .materialize(**kw)
    )
    for round_no in range(1, max_rounds + 1):
        lab_u = labels.map_batches(lambda t: t.rename_columns(["u", "lu"]), name="dedup.cc.lu")
        lab_v = labels.map_batches(lambda t: t.rename_columns(["v", "lv"]), name="dedup.cc.lv")
        hooked = (
            edges.join(lab_u, on="u")
            .join(lab_v, on="v")
            .map_batches(_hook, name="dedup.cc.hook")
            .group_by(NODE)
            .agg(**{LABEL: (LABEL, "min")})
        )
        parent = hooked.map_batches(lambda t: t.rename_columns([LABEL, "ll"]), name="dedup.cc.parent")
        new = hooked.join(parent, on=LABEL).map_batches(_jump, name="dedup.cc.jump").materialize(**kw)
        old = labels.map_batches(lambda t: t.rename_columns([NODE, "old"]), name="dedup.cc.old")
        changed = new.join(old, on=NODE).map_batches(_changed, name="dedup.cc.changed").count(**kw)
        logger.info("connected components: round %d, %d labels changed", round_no, changed)
        labels = new
        if changed == 0:
            return labels
    raise ConfigError(f"connected components did not converge in {max_rounds} rounds; raise max_rounds")
