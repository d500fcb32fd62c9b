#!/usr/bin/env bash
# Create ./.venv (if missing) and install privzv with the given extras.
# torch is installed first, pinned, so pip never resolves a CUDA build on its own:
#   TORCH_VERSION=2.13.0 (default) chooses another version.
# Usage: scripts/install.sh [extras]   e.g. scripts/install.sh test,mnist
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-mnist}"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "installing torch==${TORCH_VERSION:-2.13.0} (CPU build where available) ..." >&2
  "${pip[@]}" "torch==${TORCH_VERSION:-2.13.0}"
fi
"${pip[@]}" -e ".[${extras}]"
