import pyarrow as pa
import pytest
from zephyr.pipelines.quality.normalize import Normalize, NormalizeConfig

from zephyr.errors import SchemaError

PYTHON = "def f(x):\n    if x:\n\treturn  x  # two spaces\n    return None\n"
LATEX = "\\begin{align}\n  x^2 + y^2 &= z^2 \\\\\n  \\int_0^1 f(x)\\,dx &\\le 1\n\\end{align}\nLet $x² ∈ ℝ$ and ﬁ."


def _norm(*texts, **cfg):
    return Normalize(NormalizeConfig(**cfg))(pa.table({"text": list(texts)}))["text"].to_pylist()


def test_code_indentation_and_lines_survive():
    (out,) = _norm(PYTHON)
    lines = out.split("\n")
    assert lines[1] == "    if x:" and lines[2] == "\treturn x # two spaces" and lines[3] == "    return None"
    assert len(lines) == 4  # trailing newline stripped, no line merged


def test_latex_and_compatibility_characters_unchanged():
    (out,) = _norm(LATEX)
    assert out == LATEX  # no runs to collapse; NFC keeps ², ℝ and the ﬁ ligature (NFKC would not)


def test_nfc_controls_crlf_and_unicode_spaces():
    (out,) = _norm("e\u0301te\x00\x1b\r\nnext\rline\u00a0\u2003x\ufeff")
    assert out == "\u00e9te\nnext\nline x"


def test_blank_line_runs_capped_and_leading_blank_lines_removed():
    (out,) = _norm("\n\n \nA\n\n\n\n\nB   \n")
    assert out == "A\n\nB"


def test_nulls_and_empty_kept():
    assert _norm(None, "", "   ") == [None, "", ""]


def test_mojibake_repair_only_when_asked():
    assert _norm("cafÃ© â€œquotedâ€\x9d") != ["café “quoted”"]
    assert _norm("cafÃ© dÃ©jÃ  vu", fix_mojibake=True) == ["café déjà vu"]


def test_missing_column_is_schema_error():
    with pytest.raises(SchemaError, match="content"):
        Normalize()(pa.table({"content": ["x"]}))
