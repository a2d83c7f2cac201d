# Shared helpers for the peer-venv scripts: each peer gets its own venv under benchmarks/.venvs/<name>,
# so its pinned dependencies never touch zephyr's .venv. Usage: source this file, then make_venv NAME PY.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENVS="$ROOT/benchmarks/.venvs"
make_venv() {
  local name=$1 py=${2:-python3.11}
  mkdir -p "$VENVS"
  if [ ! -x "$VENVS/$name/bin/python" ]; then
    "$py" -m venv "$VENVS/$name"
  fi
  "$VENVS/$name/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  echo "$VENVS/$name/bin/python"
}
