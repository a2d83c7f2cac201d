"""``TokenLoader`` inside torch DataLoader workers: the supported wrapper, and the guard on the plain one.

The trap. ``torch.utils.data.DataLoader(loader, num_workers=K)`` works, but each worker process iterates its
own copy of the loader: the parent's position never moves, so ``loader.state_dict()["consumed"]`` stays where
it was, and a resume from it silently restarts the epoch. With the DataLoader's own ``batch_size=B``, each
batch is B consecutive samples of *one* worker (worker w holds every K-th sample), so the order differs from
the single-process one as well.

The supported path is ``loader.data_loader(num_workers=K)`` (``TokenDataLoader``): ``batch_size=None`` in the
DataLoader (batches come from ``TokenLoader(batch_size=B)``, gathered per worker in the single-process order),
and every item received advances the parent's position, so ``state_dict()`` is exact.

The guard. Each ``TokenLoader`` holds a ``WorkerGuard``: a one-element int64 tensor in shared memory; a
forked worker maps the same pages and a spawned one receives it through torch's shared-memory pickling. A
worker iterating a copy that no ``TokenDataLoader`` started sets it (``mark_plain_worker``); afterwards the
parent's ``state_dict()``, ``mix_counts()`` and ``set_weights()`` raise ``ResumeError`` naming the fix
(``check_position_known``) instead of returning a stale position. ``load_state_dict`` sets the position
again, and clears it. A plain DataLoader with ``num_workers=0`` iterates the parent's own object: its
position stays exact, and nothing is raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch

from zephyr.errors import ConfigError, ResumeError

__all__ = ["TokenDataLoader", "WorkerGuard", "WorkerLoader"]

_OWN_KWARGS = ("batch_size", "batch_sampler", "sampler", "shuffle", "drop_last", "collate_fn")
"""DataLoader arguments ``TokenDataLoader`` sets itself: batches and order come from the ``TokenLoader``."""


class WorkerGuard:
    """One ``TokenLoader``'s guard against plain DataLoader workers (the module docstring's "The guard").

    ``flag`` is a one-element int64 tensor in shared memory (0: no plain worker has iterated a copy); a forked
    worker maps the same pages and a spawned one receives it through torch's shared-memory pickling, so a copy's
    ``mark_plain_worker`` reaches the parent. ``wrapped`` is True while a ``TokenDataLoader`` starts workers
    over the loader: those copies are tracked, and mark nothing.
    """

    def __init__(self) -> None:
        self.flag = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.wrapped = False

    def mark_plain_worker(self) -> None:
        """Called in a DataLoader worker: record it in the parent's flag unless ``TokenDataLoader`` started it."""
        if not self.wrapped:
            self.flag.fill_(1)

    def reset(self) -> None:
        """The position is known again (``load_state_dict`` set it)."""
        self.flag.zero_()

    def check_position_known(self, what: str, consumed: int) -> None:
        """Raise ``ResumeError`` from ``what`` (``state_dict()``...) when plain DataLoader workers consumed samples
        the loader cannot count (its position ``consumed`` is then stale)."""
        if int(self.flag[0]) == 0:
            return
        raise ResumeError(
            f"TokenLoader.{what}: this loader was iterated by the workers of a plain torch DataLoader "
            f"(num_workers > 0), which advance their own copies, so its position (consumed={consumed}) is "
            "stale and resuming from it would restart the epoch; a DataLoader batch_size also groups each "
            "worker's samples and changes the order. Iterate loader.data_loader(num_workers=K) instead (batches: "
            "TokenLoader(batch_size=B)), which keeps the single-process order and an exact state_dict()"
        )


class WorkerLoader(Protocol):
    """What ``TokenDataLoader`` uses of the loader it wraps; ``TokenLoader`` is the implementation.

    A Protocol rather than an import of ``zephyr.tokenize.loader``: that module imports this one (for the guard),
    and even a type-only import back would close an import cycle.
    """

    pin_memory: bool
    seq_len: int
    worker_guard: WorkerGuard

    @property
    def weights_version(self) -> int:
        """Changes whenever the weights or the position are set anew: the workers' copies are then stale."""
        ...

    def count_worker_samples(self, labels: torch.Tensor) -> None:
        """Advance the position past samples DataLoader workers produced from their copies."""
        ...

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]: ...


class TokenDataLoader:
    """Wraps ``torch.utils.data.DataLoader(loader, batch_size=None, num_workers=K)``.

    Workers each produce every K-th item; DataLoader returns them in order, so the sequence equals the
    single-process one. Each item received advances the wrapped loader's position in the main process, so
    ``loader.state_dict()`` is exact (and ``loader.filtered`` counts the rows whose labels the workers'
    instance filter masked). Pinned memory follows ``loader.pin_memory``. After ``set_weights`` or
    ``load_state_dict`` the worker iterator is rebuilt from the new state (workers hold copies).
    """

    def __init__(
        self, loader: WorkerLoader, *, num_workers: int = 0, prefetch_factor: int | None = None, **kwargs: Any
    ):
        given = [name for name in _OWN_KWARGS if name in kwargs]
        if given:
            raise ConfigError(
                f"data_loader({given[0]}=...): batches and order come from the TokenLoader, so workers split "
                "by whole batches in the single-process order; build it with TokenLoader(..., batch_size=B) "
                f"(or use loader.iter_batches(B)) and leave {', '.join(_OWN_KWARGS)} to data_loader"
            )
        if num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
        self.loader = loader
        self.num_workers = num_workers
        self.kwargs = dict(kwargs)
        if num_workers > 0:
            self.kwargs.setdefault("prefetch_factor", prefetch_factor or 4)
            self.kwargs.setdefault("persistent_workers", False)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        loader = self.loader
        while True:
            version = loader.weights_version
            pinned = loader.pin_memory
            loader.pin_memory = False  # workers cannot pin; the DataLoader's pin thread does it
            # the workers' copies (forked or pickled now) are ours: no guard
            loader.worker_guard.wrapped = True
            try:
                data_loader = torch.utils.data.DataLoader(
                    loader, batch_size=None, num_workers=self.num_workers, pin_memory=pinned, **self.kwargs
                )
                iterator = iter(data_loader)
            finally:
                loader.pin_memory = pinned
                loader.worker_guard.wrapped = False
            restarted = False
            try:
                for item in iterator:
                    if self.num_workers > 0:  # workers advanced their own copies; mirror it here
                        loader.count_worker_samples(item["labels"])
                    yield item
                    if self.num_workers > 0 and loader.weights_version != version:
                        restarted = True
                        break
            finally:
                del iterator
            if not restarted:
                return
