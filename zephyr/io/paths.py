"""Resolve user path arguments into an ordered list of files, and name formats and codecs by extension.

Contract:

- Every path is an fsspec URL (``memory://``, ``file://``, ``s3://`` ...) or a plain local path; all file access
  goes through ``fsspec.core.url_to_fs``. Local files come back as plain absolute paths, other filesystems as
  full URLs (``memory:///data/a.parquet``), so a returned path can be handed to any worker as it is.
- ``expand_paths`` accepts a glob, a directory (every file below it, recursively, whose name ends in a known
  extension) or a file. Directory listings and glob matches skip names starting with ``.`` or ``_``, our
  own unfinished ``.tmp-`` files and outputs' sidecar folders (``*.zephyr``); a file named explicitly is
  always kept. The
  result is sorted and de-duplicated, so the same arguments give the same list on every machine.
- Nothing matching a pattern is an ``InputError`` naming the pattern; an empty argument list is a ``ConfigError``.
  On local filesystems, what cannot be read is named for what it is (``errors.read_error``): a file or folder
  without read permission ("cannot read PATH: permission denied"), a symbolic link loop ("symlink loop at
  LINK"), a link to nothing; a folder below an input folder that cannot be listed is refused, not skipped
  (fsspec's listing skips it, which would drop its files without a word).
- ``check_output_dir`` fails before any work on a local output directory that cannot be written (an ``OutputError``
  naming it); ``naming_path`` gives an ``OSError`` raised mid-write without a file name (a full disk) the path.
- ``write_bytes_atomic`` writes a small whole file (a tokenizer, a config) so that readers see the old file or
  the complete new one, never a torn one.
- ``file_stat`` is the one place that says whether an input changed since a run: its size and a version stamp
  (mtime in ns for local files; ETag, generation, version id or modification time from ``fsspec`` ``info()``
  on other filesystems), from one ``stat``/``info()`` call. Every resume fingerprint (engine sources, ``zephyr
  run``'s read stage) hashes it, so a same-size edit in place is never mistaken for the old file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import uuid
from collections.abc import Iterator, Sequence
from typing import IO, Literal, NamedTuple

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from zephyr.errors import READ_ERRNOS, ConfigError, InputError, OutputError, describe_os_error, read_error

log = logging.getLogger(__name__)

Format = Literal["parquet", "jsonl", "vortex", "warc"]
Compression = Literal["gzip", "zstd"]

#: Extensions (without codec suffix) that name each format; writers use the first.
FORMAT_EXTENSIONS: dict[str, tuple[str, ...]] = {
    "parquet": (".parquet", ".pq"),
    "jsonl": (".jsonl", ".ndjson", ".json"),
    "vortex": (".vortex", ".vtx"),
    "warc": (".warc", ".arc"),
}
CODEC_FORMATS = {"jsonl": ("gzip", "zstd"), "warc": ("gzip",)}
"""Formats that may be compressed as a whole file, and with which codecs (``.warc.gz``: per-record gzip); the
one rule for readers (``zephyr.io.sources``) and writers (``zephyr.io.sinks``)."""
CODEC_EXTENSIONS: dict[str, Compression] = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
"""Extensions that name each codec; writers use the first of each."""
_GLOB_CHARS = ("*", "?", "[")


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """``url_to_fs`` with the error a user can act on when the protocol is unknown or its package missing."""
    try:
        return url_to_fs(path)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"cannot open {path!r}: {exc}") from exc


def open_input(path: str) -> IO[bytes]:
    """Open the listed input file ``path`` for binary reading; a file gone since it was listed, or one that
    cannot be read, is an ``InputError`` naming it (not a bare ``OSError`` from deep inside a reader)."""
    fs, stripped = filesystem(path)
    try:
        return fs.open(stripped, "rb")
    except FileNotFoundError as exc:
        raise InputError("file not found (was it deleted after listing?)", path=path) from exc
    except OSError as exc:
        if exc.errno in READ_ERRNOS:
            raise read_error(exc, path) from exc
        raise InputError(f"cannot open: {describe_os_error(exc)}", path=path) from exc


def check_output_dir(url: str) -> None:
    """Create the output directory ``url`` and write (then remove) an empty probe file in it, so a read-only
    location, a file in the way or a path through a file fails now, naming the path, instead of in every task.

    Only local filesystems are probed: on an object store the probe would be a request of its own, and the
    first write's error names the path anyway.
    """
    fs, path = filesystem(url)
    if not is_local(fs):
        return
    probe = posixpath.join(path, f".zephyr-write-check-{uuid.uuid4().hex[:12]}")
    try:
        fs.makedirs(path, exist_ok=True)
        with fs.open(probe, "wb"):
            pass
        fs.rm(probe)
    except OSError as exc:
        raise OutputError(
            f"cannot write the output directory: {describe_os_error(exc, exc.filename or path)}"
        ) from exc


@contextlib.contextmanager
def naming_path(path: str) -> Iterator[None]:
    """Re-raise an ``OSError`` that has an errno but no file name with ``path`` as its file name.

    ``write(2)`` on a full disk raises ``OSError(ENOSPC)`` without a name; the user needs to know which disk.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror or str(exc), path) from exc
        raise


@contextlib.contextmanager
def atomic_write(url: str | os.PathLike, mode: Literal["wb", "w"] = "wb") -> Iterator:
    """An open file (text mode writes UTF-8) whose contents appear at ``url`` only once the block ends without
    an error; when it raises, the file is removed. Readers never see a partial file at ``url``.

    The one temporary-name scheme of the project, ``<name>.tmp-<8 hex>`` in the same directory (so the rename
    stays on one filesystem), which ``expand_paths`` never lists. The parent directory is created. ``fs.mv``
    renames: ``rename(2)`` locally (atomic on POSIX); a copy on object stores (no atomic rename there: the object
    appears whole, under its final name, once the copy completes)."""
    fs, path = url_to_fs(os.fspath(url))
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
    try:
        with fs.open(tmp, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
            yield handle
        fs.mv(tmp, path)  # a rename on a local disk
    except BaseException:
        with contextlib.suppress(OSError):
            if fs.exists(tmp):
                fs.rm(tmp, recursive=True)
        raise


def write_json_atomic(url: str, payload: dict) -> None:
    """``payload`` as indented JSON with sorted keys at ``url``, whole or not at all (``atomic_write``): task
    markers, index metadata, example files."""
    import json

    with atomic_write(url, "w") as handle:
        json.dump(payload, handle, indent=1, sort_keys=True)


def write_bytes_atomic(url: str, data: bytes) -> None:
    """Write ``data`` to the file ``url`` (a path or fsspec URL) atomically, creating its folder
    (``atomic_write``); an ``OSError`` becomes an ``OutputError`` naming ``url`` and the fix.

    >>> write_bytes_atomic("memory:///atomic/out.json", b"{}")
    >>> fsspec.filesystem("memory").cat_file("/atomic/out.json")
    b'{}'
    """
    try:
        with naming_path(url), atomic_write(url) as handle:
            handle.write(data)
    except OSError as exc:
        raise OutputError(f"cannot write {url}: {describe_os_error(exc, exc.filename or url)}") from exc


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def path_key(url: str) -> tuple[str, str]:
    """(protocol, absolute path) of ``url``, symlinks resolved for local paths: two spellings of one folder
    compare equal."""
    fs, path = filesystem(str(url))
    if is_local(fs):
        return "file", os.path.realpath(path)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol, "/" + path.strip("/")


def absolute(url: str) -> str:
    """``url`` with a local path made absolute against this process's working directory; URLs of other
    filesystems as they are. The driver resolves every path it hands to tasks: a worker (a dask worker
    started elsewhere) has a working directory of its own.

    >>> absolute("s3://bucket/out")
    's3://bucket/out'
    >>> absolute("/data/out/")
    '/data/out'
    """
    text = os.fspath(url)
    if "://" in text and not text.startswith("file://"):
        return text
    return os.path.abspath(text.removeprefix("file://"))


def public_path(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The form of ``path`` handed back to callers: plain for local files, a full URL otherwise."""
    return path if is_local(fs) else fs.unstrip_protocol(path)


class FileStat(NamedTuple):
    """What a resume fingerprint records of an input file."""

    size_bytes: int
    version: str | None
    """Changes whenever the content is rewritten: ``mtime_ns=...`` for local files, else the first of
    ``_VERSION_KEYS`` that ``info()`` reports (``ETag=...``); None when the filesystem reports none of them."""


# Content hashes and object generations first: they change exactly when the bytes do, while a modification time
# also changes on a rewrite with equal bytes (a needless recompute, never a stale one). One key, never a mix: an
# object store's listing and its HEAD answer may carry different sets (s3fs: VersionId only from HEAD).
_VERSION_KEYS = (
    "ETag",
    "etag",
    "generation",
    "md5Hash",
    "VersionId",
    "version_id",
    "LastModified",
    "last_modified",
    "mtime",
    "updated",
    "modified",
    "created",
)
_UNVERSIONED: set[str] = set()  # protocols already warned about


def file_stat(path: str) -> FileStat:
    """Size and version stamp of one file (one ``os.stat`` or one ``info()`` call, which an object store
    answers from the listing ``expand_paths`` just made).

    >>> import fsspec
    >>> fsspec.filesystem("memory").pipe("/doc-stat/a.jsonl", b"{}\\n")
    >>> stat = file_stat("memory:///doc-stat/a.jsonl")
    >>> stat.size_bytes, stat.version.startswith("created=")
    (3, True)
    """
    fs, stripped = filesystem(path)
    try:
        if is_local(fs):
            st = os.stat(stripped)
            return FileStat(st.st_size, f"mtime_ns={st.st_mtime_ns}")
        info = fs.info(stripped)
    except OSError as exc:
        if exc.errno in READ_ERRNOS:
            raise read_error(exc, path) from exc
        raise InputError(
            f"cannot stat input {path!r} ({exc}); was it moved or deleted while the job started?"
        ) from exc
    size = int(info.get("size") or 0)
    for key in _VERSION_KEYS:
        value = info.get(key)
        if value not in (None, ""):
            return FileStat(size, f"{key}={value}")
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol not in _UNVERSIONED:
        _UNVERSIONED.add(protocol)
        log.warning(
            "%s: info() reports no ETag or modification time; resume tells changed inputs apart by size only",
            protocol,
        )
    return FileStat(size, None)


def infer_compression(path: str) -> Compression | None:
    """The codec named by the last extension of ``path`` (``.gz``/``.gzip`` → gzip, ``.zst``/``.zstd`` → zstd)."""
    return CODEC_EXTENSIONS.get(posixpath.splitext(path.lower())[1])


def infer_format(path: str) -> Format | None:
    """The format named by the extension of ``path`` (codec suffix ignored), or None when it names none."""
    codec = infer_compression(path)
    name = posixpath.splitext(path.lower())[0] if codec else path.lower()
    for fmt, extensions in FORMAT_EXTENSIONS.items():
        if name.endswith(extensions):  # a compressed Parquet/Vortex file is not something we can read
            readable = codec is None or codec in CODEC_FORMATS.get(fmt, ())
            return fmt if readable else None  # type: ignore[return-value]
    return None


def _hidden(name: str) -> bool:
    """Hidden, bookkeeping (``_SUCCESS``, ``_metadata``), one of our unfinished ``.tmp-`` files, or an output's
    sidecar folder (``OUT.zephyr``, ``zephyr.io.layout``: its manifest, stats, dropped and quarantined rows are
    not the data of a folder that holds ``OUT``)."""
    base = posixpath.basename(name.rstrip("/"))
    return base.startswith((".", "_")) or ".tmp-" in base or base.endswith(".zephyr")


def _wanted(name: str, formats: Sequence[str], root: str = "") -> bool:
    """A data file of a directory listing: a known format, and neither it nor a folder between ``root`` and it
    hidden. The folders matter: reading a folder that holds outputs must not read their sidecars (``OUT.zephyr``:
    dropped and quarantined rows, stats) as data."""
    below = name[len(root) :] if root and name.startswith(root) else posixpath.basename(name)
    return not any(_hidden(part) for part in below.split("/") if part) and infer_format(name) in formats


def expand_paths(paths: str | Sequence[str], *, formats: Sequence[str] | None = None) -> list[str]:
    """Expand globs and directories into a sorted, de-duplicated list of files.

    ``formats`` limits which extensions a *directory* listing keeps (default: every known format); files named
    explicitly or matched by a glob are kept whatever their extension, since the user asked for them.

    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> for name in ("b.jsonl", "a.parquet", "sub/c.jsonl.gz", "_SUCCESS", "out.zephyr/dropped/part-00000.parquet"):
    ...     fs.pipe(f"/doc-paths/{name}", b"")
    >>> expand_paths("memory://doc-paths")
    ['memory:///doc-paths/a.parquet', 'memory:///doc-paths/b.jsonl', 'memory:///doc-paths/sub/c.jsonl.gz']
    >>> expand_paths("memory://doc-paths/*.jsonl")
    ['memory:///doc-paths/b.jsonl']
    """
    if isinstance(paths, str):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ConfigError("no input paths given")
    wanted_formats = tuple(formats) if formats is not None else tuple(FORMAT_EXTENSIONS)
    found: set[str] = set()
    for pattern in paths:
        if not isinstance(pattern, str):
            raise ConfigError(f"input paths must be strings, got {type(pattern).__name__}: {pattern!r}")
        fs, stripped = filesystem(pattern)
        matches = _expand_one(fs, stripped, pattern, wanted_formats)
        found.update(public_path(fs, m) for m in matches)
    return sorted(found)


def input_files(
    paths: str | Sequence[str], format: Format | Literal["auto"] | None = "auto"
) -> tuple[list[str], Format]:
    """The files ``paths`` name (globs and directories expanded) and the one format to read them as.

    The one place inputs get their format: with ``"auto"`` (or None) it comes from the files' extensions (a
    folder of ``.jsonl.zst`` files is JSON lines, whatever the first path looks like), and for a file named
    explicitly without a known extension, from its first bytes (``_sniff_format``); files of two formats are
    refused naming one of each. With a format given, directory listings keep only that format's files, and a
    file named explicitly whose extension names another format is refused.

    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> for name in ("b.jsonl.zst", "a.jsonl", "_SUCCESS"):
    ...     fs.pipe(f"/input-files/{name}", b"")
    >>> input_files("memory://input-files")
    (['memory:///input-files/a.jsonl', 'memory:///input-files/b.jsonl.zst'], 'jsonl')
    """
    given = None if format == "auto" else format
    if given is not None and given not in FORMAT_EXTENSIONS:
        raise ConfigError(f"unknown format {given!r}; use one of {list(FORMAT_EXTENSIONS)} (or 'auto')")
    files = expand_paths(paths, formats=[given] if given else None)
    seen: dict[str, str] = {}
    for f in files:
        fmt, codec = infer_format(f), infer_compression(f)
        if given is not None and fmt not in (None, given):
            raise ConfigError(f"{f!r} has a {fmt} extension but format={given!r} was asked for")
        if given is not None and codec is not None and codec not in CODEC_FORMATS.get(given, ()):
            raise ConfigError(f"{f!r}: compressed {given} files are not readable; only JSONL may be .gz/.zst")
        seen.setdefault(fmt or given or _sniff_format(f), f)
    if len(seen) > 1:
        (fa, a), (fb, b) = list(seen.items())[:2]
        raise ConfigError(
            f"the inputs mix formats: {a!r} is {fa} and {b!r} is {fb}; read one format per command (convert the "
            "others first, or pass --format to read only one of them from a folder)"
        )
    return files, next(iter(seen), given or "parquet")  # type: ignore[return-value]


_MAGIC_CODECS = {b"\x1f\x8b": ("gzip", ".gz"), b"\x28\xb5\x2f\xfd": ("zstd", ".zst")}


def check_not_compressed(head: bytes, path: str) -> None:
    """Refuse a file whose first bytes are a gzip or zstd stream but whose name has no codec extension: readers
    decompress by extension, so it would be read as garbage."""
    for magic, (codec, suffix) in _MAGIC_CODECS.items():
        if head.startswith(magic):
            raise InputError(
                f"looks {codec}-compressed but its name has no {suffix} extension; rename it to end in {suffix} "
                f"(e.g. .jsonl{suffix}) so that it is decompressed",
                path=path,
            )


def _sniff_format(path: str) -> Format:
    """The format of a file whose name does not say it, from its first bytes: ``PAR1`` is Parquet, a JSON
    object (after an optional UTF-8 BOM and whitespace) is JSON lines. A compressed file must say its codec in
    its name (readers decompress by extension), and anything else is refused naming the file.

    >>> import fsspec
    >>> fsspec.filesystem("memory").pipe("/sniff/rows", b'{"text": "a"}\\n')
    >>> _sniff_format("memory://sniff/rows")
    'jsonl'
    """
    with open_input(path) as f:
        head = f.read(64)
    if head.startswith(b"PAR1"):
        return "parquet"
    check_not_compressed(head, path)
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"{") or not text:
        return "jsonl"
    from zephyr.io.text_encoding import wide_text

    what = wide_text(head)
    if what is not None:
        raise InputError(what, path=path)
    raise InputError(
        f"{path}: cannot tell its format from its name or its first bytes (neither Parquet nor JSON lines); name "
        "it .parquet, .jsonl(.gz/.zst) or .vortex, or pass --format"
    )


def _expand_one(
    fs: fsspec.AbstractFileSystem, stripped: str, pattern: str, formats: tuple[str, ...]
) -> list[str]:
    # Object-store filesystems (s3fs, gcsfs) cache listings in an instance shared by the whole process; a
    # long-lived driver would otherwise miss files added since its last listing and silently drop their rows.
    fs.invalidate_cache()
    try:
        if any(ch in stripped for ch in _GLOB_CHARS) and not fs.exists(stripped):
            out: list[str] = []
            for match in fs.glob(stripped):
                if fs.isdir(match):
                    out.extend(p for p in fs.find(match) if _wanted(p, formats, match.rstrip("/")))
                elif not _hidden(match):
                    out.append(match)
            if not out:
                if is_local(fs):
                    _check_readable(_glob_base(stripped))  # a folder it cannot list matches nothing too
                raise InputError(f"no files match the pattern {pattern!r}")
            return out
        if fs.isdir(stripped):
            if is_local(fs):
                _check_readable_tree(stripped)
            out = [p for p in fs.find(stripped) if _wanted(p, formats, stripped.rstrip("/"))]
            if not out:
                exts = ", ".join(e for f in formats for e in FORMAT_EXTENSIONS[f])
                raise InputError(f"directory {pattern!r} holds no files with a known extension ({exts})")
            return out
        if fs.exists(stripped):
            return [stripped]
        if is_local(fs):
            # a loop, or a folder on the way that cannot be entered, is not "missing"
            _check_readable(stripped)
            if os.path.islink(stripped):
                raise InputError(
                    f"{pattern!r} is a symbolic link to {os.readlink(stripped)!r}, which does not exist"
                )
    except InputError:
        raise
    except OSError as exc:
        if exc.errno in READ_ERRNOS:
            raise read_error(exc, pattern) from exc
        raise InputError(f"cannot list {pattern!r}: {exc}") from exc
    raise InputError(f"no such file or directory: {pattern!r}")


def _check_readable(path: str) -> None:
    """Raise ``read_error`` when the local ``path`` exists but cannot be reached or read (a permission, a symbolic
    link loop); nothing when it is readable or simply missing."""
    try:
        if os.path.isdir(path):
            os.scandir(path).close()
        else:
            os.stat(path)
    except OSError as exc:
        if exc.errno in READ_ERRNOS:
            raise read_error(exc, path) from exc


def _check_readable_tree(root: str) -> None:
    """Raise ``read_error`` naming the first folder below the local ``root`` (itself included) that cannot be
    listed: fsspec's ``find`` skips such a folder, and its files would be left out without a word."""

    def refuse(exc: OSError) -> None:
        if exc.errno in READ_ERRNOS:
            raise read_error(exc, exc.filename or root) from exc

    for _ in os.walk(root, onerror=refuse):
        pass


def _glob_base(pattern: str) -> str:
    """The folder a glob pattern lists first: its path up to the first part with a wildcard."""
    parts = pattern.split("/")
    fixed = next((i for i, part in enumerate(parts) if any(ch in part for ch in _GLOB_CHARS)), len(parts))
    return "/".join(parts[:fixed]) or "/"


def quietly(action, what: str) -> None:
    """Run ``action`` while throwing ``what`` away: an error then is logged, never raised over the real one."""
    try:
        action()
    except Exception:  # noqa: BLE001 - used only while throwing a file away
        log.debug("ignoring error while discarding %s", what, exc_info=True)
