"""Connected components of an edge list in memory: min-label propagation with pointer jumping (numpy).

Every node ends with the smallest node index of its component as its label, so the result does not
depend on edge order. Each round hooks both endpoints (and their current labels) to the smaller label,
then jumps pointers ``label = label[label]`` until stable; rounds repeat until no label changes. The
number of rounds grows with the logarithm of the component diameter in practice.

The engine version of the same algorithm (external memory, joins and group-bys) is in ``stages.py``.

>>> connected_components(5, np.array([[1, 0], [4, 3], [3, 1]])).tolist()
[0, 0, 2, 0, 0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["connected_components", "component_sizes"]


def connected_components(num_nodes: int, edges: np.ndarray) -> np.ndarray:
    """int64 label per node: the minimum node index of its component."""
    labels = np.arange(num_nodes, dtype=np.int64)
    if len(edges) == 0:
        return labels
    u = edges[:, 0].astype(np.int64)
    v = edges[:, 1].astype(np.int64)
    while True:
        lu = labels[u]
        lv = labels[v]
        m = np.minimum(lu, lv)
        new = labels.copy()
        np.minimum.at(new, u, m)
        np.minimum.at(new, v, m)
        np.minimum.at(new, lu, m)
        np.minimum.at(new, lv, m)
        while True:
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, labels):
            return labels
        labels = new


def component_sizes(labels: np.ndarray) -> np.ndarray:
    """Size of each node's component."""
    return np.bincount(labels, minlength=len(labels))[labels]
