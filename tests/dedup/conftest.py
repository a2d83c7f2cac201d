"""The dedup tests import their corpus generators from ``benchmarks/dupes_synthetic.py`` (test data, not
library code)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
