#!/usr/bin/env bash
# The prepared GPU check: every family at the papers' shape (DiT-small, L = 1024, GPT-2's vocabulary,
# bf16), training tokens/s and MFU, eval rows/s, sampler samples/s in float32 and float64, peak memory,
# and nn.TransformerEncoder beside our backbone. Within five minutes on one H100.
#
#   make gpu-check                 # or: scripts/gpu-check.sh [OUT]
#
# It installs nothing beyond the project (the same .venv as `make test`), refuses to run without a
# CUDA device, and writes OUT/bench.json (the record) and OUT/README.md (the table it prints).
# Commit OUT (default results/bench/paper-shapes) and name the card in the README's performance paragraph.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/bench/paper-shapes}"
make --no-print-directory install >/dev/null
.venv/bin/python - <<'PY'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit("gpu-check: no CUDA device is visible to torch " + torch.__version__ + "; run it on a machine with a GPU")
print(f"gpu-check: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), torch {torch.__version__}", flush=True)
PY
timeout 600 .venv/bin/primebench bench --device cuda --preset paper-shapes ${COMPILE:+--compile} --out "$OUT"
