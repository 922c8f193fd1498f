#!/usr/bin/env bash
# Install LEAP-JAX into the active Python environment.
#   bash scripts/install.sh        # runtime: kernel environment + trainer
#   bash scripts/install.sh test   # plus test tools, Ray (the `dist` extra) and the parity references (torch CPU, transformers)
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e ".[env,train]"
if [ "${1:-}" = "test" ]; then
  python -m pip install -q -e ".[dev,dist]"
  # parity extra: pin torch to the CPU wheel (a plain `torch` would pull a multi-GB CUDA build)
  python -m pip install -q "torch==2.13.0" -e ".[parity]"
fi
