#!/usr/bin/env bash
# data-juicer (py-data-juicer) for its document_minhash_deduplicator. It imports aiohttp without declaring it.
source "$(dirname "$0")/_common.sh"
PY=$(make_venv datajuicer python3.11)
"$PY" -m pip install -q "py-data-juicer" "aiohttp" "psutil"
"$PY" -c "import data_juicer; print('data_juicer', data_juicer.__version__)"
