#!/usr/bin/env bash
# text-dedup 0.4.0 (0.4.1 requires Python 3.12; 0.4.0 runs on the 3.11 used everywhere else here).
source "$(dirname "$0")/_common.sh"
PY=$(make_venv textdedup python3.11)
"$PY" -m pip install -q "text-dedup==0.4.0" "psutil"
"$PY" -c "import text_dedup; print('text_dedup ok')"
