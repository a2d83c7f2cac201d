"""``TokenDataLoader``: a torch ``DataLoader`` over a ``TokenLoader`` whose main process keeps the position.

Workers each produce every K-th item of the rank (``zephyr.tokenize.loader``); DataLoader returns them in order,
so the sequence equals the single-process one, and each item received advances the wrapped loader's position in
the main process, so ``loader.state_dict()`` is exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from zephyr.tokenize.loader import TokenLoader

__all__ = ["TokenDataLoader"]


class TokenDataLoader:
    """Wraps ``torch.utils.data.DataLoader(loader, batch_size=None, num_workers=K)``.

    Workers each produce every K-th item; DataLoader returns them in order, so the sequence equals the
    single-process one. Each item received advances the wrapped loader's position in the main process, so
    ``loader.state_dict()`` is exact (and ``loader.filtered`` counts the rows whose labels the workers'
    instance filter masked). Pinned memory follows ``loader.pin_memory``. After ``set_weights`` or
    ``load_state_dict`` the worker iterator is rebuilt from the new state (workers hold copies).
    """

    def __init__(
        self, loader: TokenLoader, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ):
        self.loader = loader
        self.num_workers = num_workers
        self.kwargs = dict(kwargs)
        if num_workers > 0:
            self.kwargs.setdefault("prefetch_factor", prefetch_factor or 4)
            self.kwargs.setdefault("persistent_workers", False)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        loader = self.loader
        while True:
            version = loader._weights_version
            pinned = loader.pin_memory
            loader.pin_memory = False  # workers cannot pin; the DataLoader's pin thread does it
            try:
                data_loader = torch.utils.data.DataLoader(
                    loader, batch_size=None, num_workers=self.num_workers, pin_memory=pinned, **self.kwargs
                )
                iterator = iter(data_loader)
            finally:
                loader.pin_memory = pinned
            restarted = False
            try:
                for item in iterator:
                    if self.num_workers > 0:  # workers advanced their own copies; mirror it here
                        labels = item["labels"].reshape(-1, loader.seq_len)
                        loader._yielded += labels.shape[0]
                        if loader.instance_filter is not None:
                            loader.filtered += int((labels == -100).all(dim=1).sum())
                    yield item
                    if self.num_workers > 0 and loader._weights_version != version:
                        restarted = True
                        break
            finally:
                del iterator
            if not restarted:
                return
