"""Markdown that data cannot break: how the reports put source names, step and pipeline names, column
names, rule names and example texts into ``report.md`` and ``_report.md``.

A value from data or config is never pasted into Markdown as it is. Markdown viewers (GitHub, IDE
previews, most renderers) pass raw HTML through, so a source named ``<script>…</script>`` would be live
HTML there; a ``|`` ends a table cell and a newline ends a table row, so one name could shift every column
after it; and ``*``, ``_``, ``[…](…)`` or a backtick would turn into emphasis, links or code. So:

- ``md_text(value)``: the value as plain text: whitespace runs (newlines included) become one space, ``&``,
  ``<`` and ``>`` become entities, and Markdown's punctuation is backslash-escaped.
- ``md_code(value)``: the value as a code span (inside which nothing is markup), fenced with more backticks
  than the value holds; whitespace runs become one space.
- ``md_row(cells)``: a table row, every ``|`` in a cell escaped, which GitHub Flavored Markdown honours
  inside code spans too.

Report blocks hold inline Markdown made of the code's own words and these pieces, so ``inline_html`` can
render the same text to HTML: it knows exactly that subset (code spans, ``**bold**``, backslash escapes,
the entities ``md_text`` writes) and escapes everything else.

>>> md_text("<script>x</script>|a")
'&lt;script&gt;x&lt;/script&gt;|a'
>>> md_code("a`b")
'``a`b``'
>>> md_row([md_code("x|y"), "2"])
'| `x\\\\|y` | 2 |'
>>> md_text("fuzzy_dedup _x_ *y*")
'fuzzy_dedup \\\\_x\\\\_ \\\\*y\\\\*'
>>> inline_html("**total** " + md_code("<b>") + " " + md_text("a_b <i> _x_"))
'<b>total</b> <code>&lt;b&gt;</code> a_b &lt;i&gt; _x_'
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

_ESCAPED = re.compile(r"[\\`*\[\]#~]|(?<![^\W_])_|_(?![^\W_])")
"""Markdown punctuation that starts markup inside a line: emphasis, code, links, strikethrough, a heading's
closing ``#``s. An ``_`` between two letters or digits never does (CommonMark), so ``fuzzy_dedup`` reads as
written. What is special only at a line's start (``-``, ``+``, ``1.``, ``>``) never meets a value there, since
whitespace is collapsed and every line starts with the code's own words; ``|`` is ``md_row``'s to escape,
because a table escape must be the last one (GitHub Flavored Markdown reads any ``\\|`` in a row as a literal
pipe and drops that one backslash, before inline parsing)."""
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_INLINE = re.compile(
    r"(?P<fence>`+)(?P<code>.*?)(?<!`)(?P=fence)(?!`)"  # a code span: the same run of backticks closes it
    r"|\*\*(?P<bold>(?:\\.|[^*\\])+)\*\*"
    r"|\\(?P<escaped>[!-/:-@\[-`{-~])"
    r"|&(?P<entity>amp|lt|gt|#\d{1,7});"
)


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def md_text(value: object) -> str:
    """``value`` as inline Markdown that renders as exactly its text (on one line)."""
    text = _ESCAPED.sub(lambda m: "\\" + m.group(), _one_line(value))
    return re.sub(r"[&<>]", lambda m: _ENTITIES[m.group()], text)


def md_code(value: object) -> str:
    """``value`` as a code span (on one line); nothing inside it is markup or HTML."""
    text = _one_line(value)
    if not text:
        return md_text("(empty)")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_count(value: object) -> str:
    """A count with thousands separators (other values as they are)."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def md_excerpt(text: str, chars: int = 240) -> str:
    """The start of a text as one line of plain inline Markdown (``md_text``), cut at ``chars``."""
    flat = " ".join(text.split())
    return md_text(flat if len(flat) <= chars else flat[: chars - 1] + "…")


def md_row(cells: Iterable[object]) -> str:
    """One table row of inline Markdown cells, each made safe as a cell: a ``|`` would end it, even inside a
    code span."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def inline_html(text: str) -> str:
    """Inline Markdown of the subset above as HTML, everything else escaped: the HTML report's text is the
    Markdown report's, read the way a Markdown viewer reads it."""
    out: list[str] = []
    position = 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[position : match.start()]))
        position = match.end()
        if match.group("fence"):
            code = match.group("code")
            if len(code) > 1 and code[0] == code[-1] == " " and code.strip():
                code = code[1:-1]  # the padding md_code adds around a backtick, as CommonMark strips it
            out.append(f"<code>{html.escape(code)}</code>")
        elif match.group("bold") is not None:
            out.append(f"<b>{inline_html(match.group('bold'))}</b>")
        elif match.group("escaped") is not None:
            out.append(html.escape(match.group("escaped")))
        else:
            out.append(html.escape(html.unescape(match.group())))
    out.append(html.escape(text[position:]))
    return "".join(out)
