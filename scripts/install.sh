#!/usr/bin/env bash
# Create ./.venv (if missing) and install privzv editable with the given extras (default: all).
# torch is installed first, pinned, so pip never resolves a CUDA build on its own; TORCH_VERSION
# picks another version. The extras are then installed with torch constrained to the version
# installed, so no package (a torchvision, a transformers) can make pip replace it: pip stops
# with a conflict instead. Extras (pyproject.toml): dpevent, train, attacks, flower, flower-sim,
# secure, mnist, text, all, test, docs, bench, lint; the core alone is `pip install privzv`.
# Usage: scripts/install.sh [extras]   e.g. scripts/install.sh test,mnist
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-all}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "installing torch==${TORCH_VERSION} (CPU build where available) ..." >&2
  "${pip[@]}" "torch==${TORCH_VERSION}" numpy  # numpy beside it: torch warns on import without it
fi
pin="$(mktemp)"
trap 'rm -f "$pin"' EXIT
.venv/bin/python -c "from importlib.metadata import version; print('torch==' + version('torch'))" > "$pin"
"${pip[@]}" --constraint "$pin" -e ".[${extras}]"
