#!/usr/bin/env bash
# datatrove 0.10.1 with its WARC reader and Trafilatura extractor, for benchmarks/web_extract.py.
source "$(dirname "$0")/_common.sh"
PY=$(make_venv datatrove_web python3.11)
"$PY" -m pip install -q "datatrove==0.10.1" "xxhash<4" "warcio" "faust-cchardet" "python-magic" "trafilatura" \
  "pyarrow" "orjson" "fsspec" "psutil"
"$PY" -c "from datatrove.pipeline.readers import WarcReader; from datatrove.pipeline.extractors import Trafilatura; print('datatrove web ok')"
