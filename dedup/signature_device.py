"""Where MinHash signatures are computed: ``--signature-device auto|cpu|cuda|xpu|torch-cpu``.

``cpu`` runs the compiled kernels (``minhash.signatures``); the others run ``minhash_torch.signatures_torch``
on a torch device. Every device gives the same integers, so the choice never changes which rows are kept
(and is left out of the signature fingerprint).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os

import numpy as np
from zephyr.dedup.config import SIGNATURE_DEVICES
from zephyr.dedup.minhash import Permutations, signatures
from zephyr.dedup.shingles import Shingles

from zephyr.errors import ConfigError

__all__ = ["SIGNATURE_DEVICES", "resolve_signature_device", "signatures_on"]


def signatures_on(shingles: Shingles, perms: Permutations, device: str = "auto") -> np.ndarray:
    """``signatures`` on ``device`` (see ``resolve_signature_device``); the same integers everywhere."""
    target = resolve_signature_device(device)
    if target == "cpu":
        return signatures(shingles, perms)
    from zephyr.dedup.minhash_torch import signatures_torch

    return signatures_torch(shingles, perms, device="cpu" if target == "torch-cpu" else target)


@functools.cache
def resolve_signature_device(device: str) -> str:
    """``auto``: CUDA or XPU when torch sees one, else ``cpu`` (the numba kernels, numpy without numba);
    ``cuda``/``xpu``: torch on that device, refused by name when there is none; ``torch-cpu``: the torch
    path on CPU (what accelerators run, checkable anywhere).

    ``auto`` imports torch only where an accelerator's device files exist: importing it costs ~1.5 s and
    ~300 MB in every worker, for nothing on a CPU-only machine.
    """
    if device not in SIGNATURE_DEVICES:
        raise ConfigError(f"signature device must be one of {', '.join(SIGNATURE_DEVICES)}, got {device!r}")
    if device in ("cpu", "torch-cpu"):
        return device
    if device == "auto":
        if importlib.util.find_spec("torch") is None or not _accelerator_files():
            return "cpu"
        import torch

        for kind in ("cuda", "xpu"):
            backend = getattr(torch, kind, None)
            if backend is not None and backend.is_available():
                return kind
        return "cpu"
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(f"signature device {device!r} needs torch (pip install torch)") from exc
    backend = getattr(torch, device, None)
    if backend is None or not backend.is_available():
        raise ConfigError(
            f"signature device {device!r}: torch {torch.__version__} sees no {device} device here"
        )
    return device


def _accelerator_files() -> bool:
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")) or bool(
        glob.glob("/dev/dri/renderD*")
    )
