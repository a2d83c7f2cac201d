"""PII redaction: e-mail addresses, phone numbers, IPv4 and IPv6 addresses → placeholders, with counts.

Each kind is one RE2 pattern applied to the whole column with ``pyarrow.compute``: first
``count_substring_regex`` (per-row counts), then ``replace_substring_regex``. Kinds run in the order e-mail,
IPv6, IPv4, phone, so a later pattern never sees the digits of an earlier match (an IPv4 address is not
also counted as a phone number). The patterns favour precision on prose and code:

- e-mail: ``local@domain.tld`` (ASCII local part, dotted domain, 2+ letter TLD);
- IPv6: full 8-group form and ``::``-compressed forms with at least three hex groups (two for a leading
  ``::``), on word boundaries, so C++/Rust paths such as ``std::vector`` or ``a::b`` are not matched (nor
  is the two-group ``fe80::1``);
- IPv4: four dotted octets 0-255 on word boundaries (dotted version strings such as ``1.2.3.4`` match too);
- phone: an optional ``+CC``, an optional ``(area)``, then 3 groups of 2-4 / 3-4 / 3-4 digits separated by
  space, dot or hyphen; or ``+`` followed by 8-15 digits (E.164). Dates and plain integers do not match.

Null texts stay null and count 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality._text import put_column, text_array
from zephyr.pipelines.quality.config import PIIConfig

from zephyr import counters
from zephyr.removal import check_added_columns

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_H = r"[0-9A-Fa-f]{1,4}"
PII_PATTERNS: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b",
    "ipv6": (
        rf"\b(?:(?:{_H}:){{7}}{_H}"
        rf"|(?:{_H}:){{2,6}}:{_H}(?::{_H}){{0,4}}"
        rf"|{_H}::{_H}(?::{_H}){{1,5}}"
        rf"|(?:{_H}:){{2,7}}:"
        rf"|::(?:{_H}:){{1,6}}{_H})\b"
    ),
    "ipv4": rf"\b{_OCTET}(?:\.{_OCTET}){{3}}\b",
    "phone": (
        r"(?:\+[0-9]{1,3}[ .\-]?)?(?:\([0-9]{1,4}\)[ .\-]?|\b[0-9]{2,4}[ .\-])[0-9]{3,4}[ .\-][0-9]{3,4}\b"
        r"|\+[0-9]{8,15}\b"
    ),
}
"""RE2 patterns by kind, in application order."""

_DEFAULT = PIIConfig()


def redact_pii_array(texts: pa.Array, config: PIIConfig = _DEFAULT) -> tuple[pa.Array, dict[str, pa.Array]]:
    """(redacted texts, {kind: per-row int32 counts})."""
    counts: dict[str, pa.Array] = {}
    for kind, pattern in PII_PATTERNS.items():
        if kind not in config.kinds:
            continue
        counts[kind] = pc.cast(pc.fill_null(pc.count_substring_regex(texts, pattern), 0), pa.int32())
        texts = pc.replace_substring_regex(texts, pattern, config.placeholders[kind])
    return texts, counts


def count_columns(config: PIIConfig) -> tuple[str, ...]:
    """The columns ``RedactPII`` adds with ``config``: ``<column_prefix>_<kind>`` per kind, or none."""
    return tuple(f"{config.column_prefix}_{kind}" for kind in config.kinds) if config.count_columns else ()


@dataclass
class RedactPII:
    """Batch op: ``text_column`` with its PII replaced, the ``pii_<kind>`` count columns (if configured), and
    the matches counted per kind (``pii/<kind>``) with or without count columns.

    The counts come from the arrays, not from written columns, so ``count_columns=False`` leaves an input's
    own ``pii_*`` columns alone; with count columns, an input that has them fails unless ``replace_columns``
    (or ``PIIConfig(column_prefix=...)`` names others; ``zephyr.removal``).

    >>> import pyarrow as pa
    >>> t = RedactPII()(pa.table({"text": ["mail bob@example.com from 10.0.0.1 or +1 555-123-4567"]}))
    >>> t["text"][0].as_py(), t["pii_email"][0].as_py(), t["pii_phone"][0].as_py()
    ('mail <EMAIL> from <IP_ADDRESS> or <PHONE_NUMBER>', 1, 1)
    """

    config: PIIConfig = field(default_factory=PIIConfig)
    text_column: str = "text"
    replace_columns: bool = False

    def __call__(self, table: pa.Table) -> pa.Table:
        check_added_columns(
            table.schema.names, count_columns(self.config), replace_columns=self.replace_columns
        )
        texts, counts = redact_pii_array(text_array(table, self.text_column), self.config)
        for kind, per_row in counts.items():
            counters.increment(f"pii/{kind}", int(pc.sum(per_row).as_py() or 0))
        table = put_column(table, self.text_column, texts)
        if self.config.count_columns:
            for kind, c in counts.items():
                table = put_column(table, f"{self.config.column_prefix}_{kind}", c)
        return table
