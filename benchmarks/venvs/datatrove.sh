#!/usr/bin/env bash
# datatrove 0.10.1 for the fuzzy-dedup benchmark. Its xxhash import breaks on xxhash>=4, hence the pin.
source "$(dirname "$0")/_common.sh"
PY=$(make_venv datatrove python3.11)
"$PY" -m pip install -q "datatrove==0.10.1" "xxhash<4" "tokenizers" "spacy" "nltk" "psutil" "pyarrow" "pandas" "orjson" \
  "fasttext-numpy2-wheel" "fasteners" "aiohttp" "requests"  # LanguageFilter + its asset cache (quality_filters.py)
"$PY" -c "import datatrove, xxhash; print('datatrove', datatrove.__version__ if hasattr(datatrove, '__version__') else 'ok', 'xxhash', xxhash.VERSION)"
