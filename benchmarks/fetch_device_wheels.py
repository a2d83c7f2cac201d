"""Fetch wheels for the GPU machine into benchmarks/wheels/ (git-ignored), here, where a registry is reachable.

    python benchmarks/fetch_device_wheels.py                  # the default group: tests
    python benchmarks/fetch_device_wheels.py --groups tests,cli --force

The GPU machine (Python 3.12, x86-64; torch 2.11, pyarrow, numba, fsspec, tokenizers, xxhash, cloudpickle,
psutil, pyyaml, tqdm, pytest) reaches no registry, and only the working tree travels to it, git-ignored folders
included when named, 64 MiB in all. ``benchmarks/device_check.py`` needs none of these wheels: every phase runs
with that machine's packages. What they add:

- ``tests`` (~37 MB): hypothesis and datasketch (with scipy), so ``pytest -m gpu`` also collects
  tests/dedup/test_kernels.py (its CUDA signature test); without them that file is left out, named.
- ``cli`` (~61 MB): polars and zstandard (+ orjson), which the ``zephyr`` command needs to build its parser
  (every command module is imported at start). Without them the check phase calls ``zephyr train check``'s
  own parser and handler. polars' runtime alone is 54 MB, so with the 6 MB tree this group is over the
  64 MiB limit today and the script refuses it (as any selection over the limit); it is here for a larger
  limit.

Wheels are downloaded for CPython 3.12 manylinux x86-64 (``pip download --only-binary=:all: --no-deps``): one
wheel per named distribution, never torch or its CUDA stack (the machine's own are used). The device check
unpacks a wheel only when its distribution is missing there. Carry the folder with the run (the device tool's
``carry: ["benchmarks/wheels"]``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WHEELS = HERE / "wheels"
GROUPS = {
    "tests": ["hypothesis", "attrs", "sortedcontainers", "datasketch", "scipy"],
    "cli": ["polars", "polars-runtime-32", "zstandard", "orjson"],
}
CARRY_LIMIT_BYTES = 64 * 2**20
"""The working tree plus every carried folder; the fetch stops short of it by ``MARGIN_BYTES``."""
MARGIN_BYTES = 4 * 2**20
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default="tests", help=f"comma-separated, among {', '.join(GROUPS)} (tests)")
    ap.add_argument("--force", action="store_true", help="empty benchmarks/wheels/ first")
    args = ap.parse_args(argv)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise SystemExit(f"--groups: unknown {', '.join(unknown)}; choose among {', '.join(GROUPS)}")
    WHEELS.mkdir(exist_ok=True)
    if args.force:
        for old in WHEELS.glob("*.whl"):
            old.unlink()
    names = [name for g in groups for name in GROUPS[g]]
    cmd = [sys.executable, "-m", "pip", "download", "--dest", str(WHEELS), "--python-version", "3.12"]
    cmd += [f"--platform={p}" for p in PLATFORMS] + ["--only-binary=:all:", "--no-deps", *names]
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    tree = _tree_bytes()
    wheels = sum(w.stat().st_size for w in WHEELS.glob("*.whl"))
    for wheel in sorted(WHEELS.glob("*.whl")):
        print(f"  {wheel.stat().st_size / 2**20:7.1f} MiB  {wheel.name}")
    total = tree + wheels
    print(
        f"tree {tree / 2**20:.1f} MiB + wheels {wheels / 2**20:.1f} MiB = {total / 2**20:.1f} MiB of 64 MiB"
    )
    if total > CARRY_LIMIT_BYTES - MARGIN_BYTES:
        print(
            f"too big to travel: {total / 2**20:.1f} MiB is over {(CARRY_LIMIT_BYTES - MARGIN_BYTES) / 2**20:.0f} "
            "MiB (64 MiB less a margin); fetch fewer groups (--force --groups tests)",
            file=sys.stderr,
        )
        return 1
    return 0


def _tree_bytes() -> int:
    """Bytes of what travels without being named: git's tracked and untracked-but-not-ignored files."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    paths = (REPO / p.decode() for p in listed.split(b"\0") if p)
    return sum(p.stat().st_size for p in paths if p.is_file())


if __name__ == "__main__":
    sys.exit(main())
