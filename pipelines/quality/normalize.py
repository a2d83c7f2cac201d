"""Text normalization that is safe for prose, code and maths.

``Normalize(config)(table)`` rewrites the text column; every step is one vectorized Arrow kernel
(``utf8_normalize``, RE2 ``replace_substring_regex``) over the whole column, except the optional mojibake
repair, which has no batch form (ftfy is per-string Python) and so runs only on the rows a vectorized
pre-check flags as likely mojibake.

Steps, in order:

1. ftfy ``fix_encoding`` on suspicious rows (``fix_mojibake=True``; off by default).
2. Unicode NFC. Not NFKC: compatibility folding would rewrite maths (``x²`` → ``x2``, ``ℝ`` → ``R``).
3. Line endings: ``\\r\\n`` and lone ``\\r`` become ``\\n``.
4. Control characters (Unicode Cc except tab and newline) and the byte-order mark are removed.
5. Unicode space separators (NBSP, en/em/thin spaces, ideographic space, …) become an ASCII space.
6. Trailing spaces/tabs at the end of each line are removed.
7. Runs of two or more spaces/tabs *inside* a line (after its first non-blank character) become one space.
   Leading indentation is never touched, so Python/YAML/Makefile structure survives; single tabs inside a
   line are kept (TSV, Makefile recipes).
8. Three or more consecutive newlines become two (paragraph breaks stay; lines never merge).
9. Leading blank lines and trailing whitespace of the document are removed.

Null texts stay null.

>>> import pyarrow as pa
>>> t = pa.table({"text": ["  def f():\\r\\n      return  1   \\n\\n\\n\\nx\\u00a0=\\u00a0$a^2$"]})
>>> Normalize()(t)["text"][0].as_py()
'  def f():\\n      return 1\\n\\nx = $a^2$'
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from zephyr.pipelines.quality._text import put_column, text_array
from zephyr.pipelines.quality.config import NormalizeConfig

from zephyr import counters
from zephyr.errors import require

log = logging.getLogger(__name__)

_CONTROL = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\x{FEFF}]"
_UNICODE_SPACES = r"[\x{00A0}\x{1680}\x{2000}-\x{200A}\x{202F}\x{205F}\x{3000}]"
# Byte pairs that UTF-8 text decoded as Latin-1/cp1252 leaves behind ("Ã©", "â€™", "Â ").
_MOJIBAKE_HINT = r"[ÃÂâ][\x{0080}-\x{00BF}\x{2018}-\x{203A}\x{0152}\x{0153}\x{0160}\x{0161}\x{0178}\x{017D}\x{017E}\x{0192}\x{02C6}\x{02DC}\x{20AC}\x{2122}]"


_DEFAULT = NormalizeConfig()


def normalize_array(texts: pa.Array, config: NormalizeConfig = _DEFAULT) -> pa.Array:
    """Normalize a string array (see the module docstring for the steps)."""
    if config.fix_mojibake:
        texts = _fix_mojibake(texts)
    if config.nfc:
        texts = pc.utf8_normalize(texts, form="NFC")
    if config.strip_control:
        texts = pc.replace_substring_regex(texts, pattern=r"\r\n?", replacement="\n")
        texts = pc.replace_substring_regex(texts, pattern=_CONTROL, replacement="")
    if config.collapse_whitespace:
        texts = pc.replace_substring_regex(texts, pattern=_UNICODE_SPACES, replacement=" ")
        texts = pc.replace_substring_regex(texts, pattern=r"[ \t]+(\n|\z)", replacement=r"\1")
        texts = pc.replace_substring_regex(texts, pattern=r"([^ \t\n])[ \t]{2,}", replacement=r"\1 ")
        texts = pc.replace_substring_regex(texts, pattern=r"\n{3,}", replacement="\n\n")
        texts = pc.replace_substring_regex(texts, pattern=r"\A\n+", replacement="")
        texts = pc.utf8_rtrim_whitespace(texts)
    return texts


def _fix_mojibake(texts: pa.Array) -> pa.Array:
    # ftfy has no batch API; run it only where the vectorized hint matches (typically well under 1% of rows).
    require("ftfy", "quality", "fix_mojibake")
    import ftfy

    suspicious = pc.fill_null(pc.match_substring_regex(texts, _MOJIBAKE_HINT), False)
    idx = pc.indices_nonzero(suspicious).to_numpy()
    if len(idx) == 0:
        return texts
    log.debug("ftfy.fix_encoding on %d of %d rows", len(idx), len(texts))
    values = texts.to_pylist()
    for i in idx:
        values[i] = ftfy.fix_encoding(values[i])
    return pa.array(values, type=texts.type)


@dataclass
class Normalize:
    """Batch op: ``table`` with its text column normalized (``normalize_array``), other columns and row order
    unchanged."""

    config: NormalizeConfig = field(default_factory=NormalizeConfig)
    text_column: str = "text"

    def __call__(self, table: pa.Table) -> pa.Table:
        """Normalized ``table``; counts ``normalize/rows_rewritten`` (texts that changed) and
        ``normalize/bytes_removed`` (UTF-8 bytes fewer), so a report shows what normalization did."""
        texts = normalize_array(text_array(table, self.text_column), self.config)
        out = put_column(table, self.text_column, texts)
        before, after = table.column(self.text_column), out.column(self.text_column)
        if table.num_rows and not pa.types.is_null(before.type):
            changed = pc.sum(pc.fill_null(pc.not_equal(before, after.cast(before.type)), False)).as_py() or 0
            removed = (pc.sum(pc.binary_length(before)).as_py() or 0) - (
                pc.sum(pc.binary_length(after)).as_py() or 0
            )
            counters.increment("normalize/rows_rewritten", int(changed))
            counters.increment("normalize/bytes_removed", int(removed))
        return out
