"""Atomic, resumable checkpoints with torch.distributed.checkpoint (DCP).

On-disk layout (format version 2), under ``checkpoint_dir`` on a local or shared POSIX filesystem::

    step-00000100/            one checkpoint (a DCP directory)
        .metadata, __*_*.distcp   model + optimizer tensors, sharded as trained (FSDP2 or not);
                                  the model state includes each router's ``expert_bias``
        trainer.json              {"version": 2, "step": 100, "model_config": {...}, "schedule": {...},
                                   "world_size": W, "loader_state": {...}}
    latest                        the name of the newest complete checkpoint ("step-00000100"), written last

``loader_state`` is rank 0's: the data position is the same on every rank (ranks step in lockstep; the token
loader's state counts global samples, so it resumes on any number of ranks: ``zephyr.tokenize.loader``).

Atomicity: every rank writes into ``step-N.tmp/``; after a barrier rank 0 writes ``trainer.json`` (fsynced),
renames the directory to ``step-N`` and only then replaces ``latest`` (``metrics.replace_synced``: a temporary
name, fsync, ``os.replace``).
A crash at any point leaves ``latest`` naming the previous complete checkpoint; a stale ``*.tmp`` is removed by
the next save. Old checkpoints beyond ``keep`` are deleted after ``latest`` moves.

Loading never unpickles untrusted data: DCP's ``.metadata`` is read with an unpickler that only admits DCP's
own metadata classes (``torch.Size``, dtypes, ...), and non-tensor items (optimizer hyper-parameters) are read
with ``torch.load(weights_only=True)``. Resuming with a different model configuration raises ``ResumeError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from zephyr.trainer.config import ModelConfig, model_config_from_dict
from zephyr.trainer.metrics import replace_synced

from zephyr.config import ConfigProblems
from zephyr.errors import InputError, ResumeError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
LATEST = "latest"
TRAINER_JSON = "trainer.json"


# ---- safe reading ------------------------------------------------------------------------------------------
_SAFE_MODULE_PREFIXES = ("torch.distributed.checkpoint.metadata",)
_SAFE_GLOBALS = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Admits only the classes DCP metadata is made of; anything else is refused (no code execution)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS or module in _SAFE_MODULE_PREFIXES:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}, which is not allowed")


def _read_metadata(directory: Path) -> Any:
    path = directory / ".metadata"
    try:
        with open(path, "rb") as f:
            return _MetadataUnpickler(f).load()
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise InputError(f"unreadable or unsafe checkpoint metadata ({exc})", path=str(path)) from exc


class _SafeReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any):  # noqa: ANN201 - DCP's Metadata
        metadata = _read_metadata(Path(self.path))
        from torch.distributed.checkpoint.metadata import StorageMeta

        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _SafeLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner, but non-tensor items are loaded with ``weights_only=True``."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:  # noqa: ANN001 - DCP's ReadItem
        obj = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._nested_dict import set_element  # DCP's own helper

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def _differences(saved: Any, now: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, saved value, current value) for each leaf where two nested config dicts differ."""
    if isinstance(saved, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(saved) | set(now)):
            out += _differences(saved.get(key), now.get(key), f"{prefix}{key}.")
        return out
    return [] if saved == now else [(prefix.rstrip("."), saved, now)]


def _with_later_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's model config with the keys added since it was written set to their defaults (e.g.
    ``moe.balance``, whose default ``bias`` is what older runs did), so older checkpoints still resume."""
    base = ModelConfig(moe=None) if saved.get("moe", {}) is None else ModelConfig()
    try:
        return dataclasses.asdict(model_config_from_dict(saved, base))
    except ConfigProblems:  # a key this version no longer knows: compare as written, naming it
        return saved


# ---- manager -----------------------------------------------------------------------------------------------
def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    if _distributed():
        dist.barrier()


@contextlib.contextmanager
def _quiet_single_process():  # noqa: ANN202
    """DCP warns that it 'assumes' a single process even when told so with ``no_dist``; we meant it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


class CheckpointManager:
    """Saves and restores model, optimizer, router biases, schedule position and loader state."""

    def __init__(self, directory: str | os.PathLike, *, keep: int = 2) -> None:
        self.dir = Path(directory)
        self.keep = keep

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None when there is none to resume."""
        pointer = self.dir / LATEST
        if not pointer.exists():
            return None
        name = pointer.read_text().strip()
        # never a checkpoint outside this folder (the name is checked before it is looked up)
        if not re.fullmatch(r"step-\d{8}", name) or not (self.dir / name / TRAINER_JSON).exists():
            raise InputError(
                f"'latest' names {name[:80]!r}, not a step-NNNNNNNN checkpoint of this folder (or a missing or "
                f"incomplete one); remove {pointer} to start over or point it at an existing step-* directory",
                path=str(pointer),
            )
        return self.dir / name

    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        loader_state: dict[str, Any],
        model_config: dict[str, Any],
        schedule: dict[str, Any],
    ) -> Path:
        """Write checkpoint ``step`` atomically (collective: every rank calls it)."""
        rank = dist.get_rank() if _distributed() else 0
        world = dist.get_world_size() if _distributed() else 1
        final = self.dir / f"step-{step:08d}"
        tmp = final.with_name(final.name + ".tmp")
        if rank == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
        _barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        with _quiet_single_process():
            dcp.save(
                {"model": model_sd, "optim": optim_sd},
                storage_writer=FileSystemWriter(str(tmp)),
                no_dist=not _distributed(),
            )
        if rank == 0:
            meta = {
                "version": FORMAT_VERSION,
                "step": step,
                "world_size": world,
                "model_config": model_config,
                "schedule": schedule,
                "loader_state": loader_state,
            }
            replace_synced(tmp / TRAINER_JSON, json.dumps(meta, indent=1, sort_keys=True).encode())
            if final.exists():  # a re-save of the same step (e.g. after a resume): replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
            replace_synced(self.dir / LATEST, f"{final.name}\n".encode())
            self._prune(final.name)
            log.info("saved checkpoint %s", final)
        _barrier()
        return final

    def _prune(self, newest: str) -> None:
        if self.keep <= 0:
            return
        done = sorted(p for p in self.dir.glob("step-*") if not p.name.endswith(".tmp") and p.is_dir())
        for old in done[: max(0, len(done) - self.keep)]:
            if old.name != newest:
                shutil.rmtree(old, ignore_errors=True)

    def load(
        self, path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, *, model_config: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """Restore model and optimizer in place from ``path``; return (the optimizer steps already taken, the
        loader state): training continues with that step."""
        meta_path = path / TRAINER_JSON
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"unreadable checkpoint metadata ({exc})", path=str(meta_path)) from exc
        if meta.get("version") != FORMAT_VERSION:
            raise ResumeError(
                f"{meta_path}: checkpoint format version {meta.get('version')}, expected {FORMAT_VERSION}"
            )
        saved_config = _with_later_defaults(meta["model_config"])
        if saved_config != model_config:
            diff = "; ".join(
                f"model.{key}: checkpoint {saved!r}, this run {now!r}"
                for key, saved, now in _differences(saved_config, model_config)
            )
            raise ResumeError(
                f"{path} was written for a different model ({diff}); use another --checkpoint-dir "
                "or the checkpoint's model settings"
            )
        _read_metadata(path)  # fail with a clear error (DCP would wrap it) before touching the model
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        with _quiet_single_process():
            dcp.load(
                state,
                storage_reader=_SafeReader(str(path)),
                planner=_SafeLoadPlanner(),
                no_dist=not _distributed(),
            )
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return int(meta["step"]), meta["loader_state"]
