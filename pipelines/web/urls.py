"""URL normalization, registered domains and the ``url`` filter rule family.

``normalize_url`` lower-cases scheme and host, drops a default port (``:80`` for http, ``:443`` for https), the
fragment, user info and tracking parameters (``TRACKING_PARAMS``: ``utm_*``, ``gclid``, ``fbclid`` …) and
gives an empty path as ``/``; the remaining query keeps its order (``?b=1&a=2`` and ``?a=2&b=1`` can be
different pages). A URL without an http(s)/ftp scheme or host, or with a bad port, normalizes to ``None``.

Registered domains come from tldextract with its bundled Public Suffix List snapshot and ``suffix_list_urls=()``
(never a network fetch, never a cache write): ``forums.news.cnn.co.uk`` → ``cnn.co.uk``.

``UrlRules`` is a rule family for ``zephyr.pipelines.quality.filters`` (``zephyr filter --rules url``). It reads
the table's url column (``columns``) rather than the text, and drops, in order: ``url_invalid`` (null or not
normalizable), ``url_blocked_domain`` (its registered domain is in the blocklist) and ``url_blocked_subdomain``
(a listed host that is not a registered domain matches the host or one of its parents).

>>> normalize_url("HTTP://News.Example.COM:80/a/b?utm_source=x&id=7#top")
'http://news.example.com/a/b?id=7'
>>> registered_domain("forums.news.cnn.co.uk")
'cnn.co.uk'
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa

from zephyr.errors import InputError, SchemaError, require

if TYPE_CHECKING:
    from zephyr.pipelines.quality.rules import Verdict


TRACKING_PARAMS = frozenset(
    {
        "gclid",
        "dclid",
        "fbclid",
        "msclkid",
        "yclid",
        "mc_cid",
        "mc_eid",
        "igshid",
        "_ga",
        "_gl",
        "_hsenc",
        "_hsmi",
        "mkt_tok",
        "oly_anon_id",
        "oly_enc_id",
        "vero_id",
        "wickedid",
        "ref_src",
        "spm",
    }
)
"""Query keys dropped by ``normalize_url``, besides every key starting with ``utm_``."""
_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}


def _tracking(key: str) -> bool:
    k = key.lower()
    return k.startswith("utm_") or k in TRACKING_PARAMS


def normalize_url(url: str | None) -> str | None:
    """The normalized form of one URL (module docstring), or None when it is not a usable web URL."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").rstrip(".")
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # IPv6: urlsplit drops the brackets
        host = f"[{host}]"
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    query = parts.query
    if query:  # split by hand, so the kept parameters keep their exact encoding
        query = "&".join(p for p in query.split("&") if p and not _tracking(unquote_plus(p.split("=", 1)[0])))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


def normalize_urls(urls: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``normalize_url`` of each value (nulls stay null); one Python call per distinct URL."""
    values = urls.to_pylist()
    normalized = {v: normalize_url(v) for v in set(values) if v is not None}
    return pa.array([None if v is None else normalized[v] for v in values], pa.string())


@functools.cache
def _extractor():
    require("tldextract", "web", "a registered domain")
    import tldextract

    # suffix_list_urls=() and cache_dir=None: the bundled PSL snapshot only, no fetch, no cache file
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


@functools.lru_cache(maxsize=1 << 16)
def registered_domain(host: str) -> str:
    """The registered domain of a host (the host itself when it has no public suffix, e.g. ``localhost``)."""
    result = _extractor()(host)
    if hasattr(result, "top_domain_under_public_suffix"):  # tldextract >= 5.3 renamed registered_domain
        domain = result.top_domain_under_public_suffix
    else:
        domain = result.registered_domain
    return domain or host


def host_of(normalized: str) -> str:
    """The host of a URL that ``normalize_url`` returned (no port)."""
    return urlsplit(normalized).hostname or ""


def load_blocklist(path: str | Path) -> frozenset[str]:
    """Blocked domains and hosts, one per line (``#`` comments, blank lines and case ignored); a line that
    is not a host name fails naming the file and line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the URL blocklist: {exc}", path=str(path)) from exc
    entries = set()
    for number, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip().lower().rstrip(".")
        if not entry:
            continue
        if "/" in entry or " " in entry or ":" in entry:
            raise InputError(
                f"{entry!r} is not a domain; write one host name per line (e.g. example.com), no scheme or path",
                path=str(path),
                line=number,
            )
        entries.add(entry)
    return frozenset(entries)


def _url_values(table: pa.Table, column: str) -> pa.ChunkedArray:
    """The URLs of ``table``; a missing column fails naming the columns there are and the flag that names it."""
    if column not in table.column_names:
        names = ", ".join(table.column_names)
        raise SchemaError(f"no {column!r} column of URLs; the input has {names} (pass --url-column)")
    return table.column(column)


def _parents(host: str) -> Iterable[str]:
    labels = host.split(".")
    for i in range(len(labels)):
        yield ".".join(labels[i:])


@dataclass(frozen=True)
class UrlRules:
    """The ``url`` rule family (module docstring). ``blocklist``: a file path (None: only ``url_invalid``), read
    when the rules first run; a step's ``preflight`` reads it before any work, so that a config (a disabled
    step, a finished one) loads without it."""

    blocklist: str | None = None
    url_column: str = "url"
    name: str = "url"

    @functools.cached_property
    def _blocked(self) -> frozenset[str]:
        return load_blocklist(self.blocklist) if self.blocklist else frozenset()

    def evaluate_table(self, table: pa.Table) -> Verdict:
        from zephyr.pipelines.quality.rules import Verdict

        normalized = normalize_urls(_url_values(table, self.url_column)).to_pylist()
        blocked = self._blocked  # without a blocklist, no host is looked up
        hosts = [host_of(url) if url is not None and blocked else None for url in normalized]
        domain = [host is not None and registered_domain(host) in blocked for host in hosts]
        below = [
            h is not None and not d and any(p in blocked for p in _parents(h)) for h, d in zip(hosts, domain)
        ]
        invalid = [url is None for url in normalized]
        reasons = ("url_invalid", "url_blocked_domain", "url_blocked_subdomain")
        return Verdict([(r, np.array(f, bool)) for r, f in zip(reasons, (invalid, domain, below))])


@dataclass(frozen=True)
class NormalizeUrls:
    """Batch op: rewrite the url column to its normalized form and add ``domain`` (registered domain);
    an unusable URL keeps its original value and gets a null domain (the ``url`` rules drop it as
    ``url_invalid``)."""

    url_column: str = "url"
    domain_column: str = "domain"

    def __call__(self, table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        if table.num_rows == 0 and self.url_column not in table.column_names:
            return table
        original = _url_values(table, self.url_column)
        normalized = normalize_urls(original)
        domains = pa.array(
            [None if u is None else registered_domain(host_of(u)) for u in normalized.to_pylist()],
            pa.string(),
        )
        merged = pc.coalesce(normalized, original.cast(pa.string()))
        table = table.set_column(table.schema.get_field_index(self.url_column), self.url_column, merged)
        if self.domain_column in table.column_names:
            table = table.drop_columns([self.domain_column])
        return table.append_column(self.domain_column, domains)
