"""Name a text input that is UTF-16 or UTF-32 instead of calling it "invalid UTF-8".

zephyr reads text inputs (JSON lines, WARC) as UTF-8. A file saved as UTF-16 (Windows tools, PowerShell's
``>``) or UTF-32 fails UTF-8 decoding at its byte-order mark, and without one its ASCII reads as valid UTF-8
with a NUL beside every character, so line by line it looked like a first "invalid UTF-8" line followed by
lines of invalid JSON (and one line too many: the NUL after the last newline). Told from its first bytes,
the file is refused or quarantined once, as a whole, with the conversion that fixes it.

How it is told: a byte-order mark (UTF-32 checked before UTF-16, whose little-endian mark begins UTF-32's),
else the NUL pattern of mostly-ASCII text: in UTF-16LE every odd byte of an ASCII character is zero, in
UTF-32LE three bytes of four, and so on. JSON text never holds a raw NUL (it is a control character, escaped
as ``\\u0000`` inside strings), so a lane that is at least 40% zeros while the others are under 5% is no
UTF-8 JSON line with a stray NUL.
"""

from __future__ import annotations

SAMPLE_BYTES = 4096
"""Bytes of a file's start that ``wide_text`` looks at."""

_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian)", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)", "UTF-32"),
    (b"\xff\xfe", "UTF-16 (little-endian)", "UTF-16"),
    (b"\xfe\xff", "UTF-16 (big-endian)", "UTF-16"),
)
_PATTERNS = (  # (unit bytes, the lanes that are zero for ASCII, name, iconv's name)
    (4, (1, 2, 3), "UTF-32 (little-endian)", "UTF-32LE"),
    (4, (0, 1, 2), "UTF-32 (big-endian)", "UTF-32BE"),
    (2, (1,), "UTF-16 (little-endian)", "UTF-16LE"),
    (2, (0,), "UTF-16 (big-endian)", "UTF-16BE"),
)


def wide_text(head: bytes) -> str | None:
    """ "the file is ..." naming what text it is and the ``iconv`` line that converts it, when ``head``, a file's
    first bytes, is UTF-16 or UTF-32 text; None otherwise (UTF-8, with or without a BOM, or anything else).

    >>> wide_text("{}".encode("utf-16"))
    'the file is UTF-16 (little-endian) text; zephyr reads UTF-8: convert it with iconv -f UTF-16 -t UTF-8 (iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8)'
    >>> wide_text('{"a": 1}'.encode("utf-16-be")).split(";")[0]
    'the file is UTF-16 (big-endian) text'
    >>> wide_text('{"a": "\\u00e9"}'.encode("utf-8")) is None
    True
    """
    for bom, name, iconv in _BOMS:
        if head.startswith(bom):
            return _named(name, iconv)
    for unit, zero_lanes, name, iconv in _PATTERNS:
        sample = head[: len(head[:SAMPLE_BYTES]) // unit * unit]
        if len(sample) < 4 * unit:
            continue
        count = len(sample) // unit
        zeros = [sample[lane::unit].count(0) / count for lane in range(unit)]
        if all(zeros[lane] >= 0.4 for lane in zero_lanes) and all(
            zeros[lane] < 0.05 for lane in range(unit) if lane not in zero_lanes
        ):
            return _named(name, iconv)
    return None


def _named(name: str, iconv: str) -> str:
    return (
        f"the file is {name} text; zephyr reads UTF-8: convert it with iconv -f {iconv} -t UTF-8 "
        f"(iconv -f {iconv} -t UTF-8 FILE > FILE.utf8)"
    )
