#!/usr/bin/env bash
# Install what the vLLM adapter (sut/vllm_sut.py) needs, beside loopcheck's own
# install: vLLM's wheel and the pure-Python packages its v1 scheduler imports, each
# pinned in requirements-vllm.txt and installed with --no-deps (so no CUDA stack and
# no other torch). pip may warn that vLLM's own pins are unmet; the scheduler runs
# regardless. Ends by building one vLLM scheduler, so a broken install fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-deps -r requirements-vllm.txt
python3 - <<'PY'
from loopcheck.model.config import Config
from loopcheck.sut.vllm_sut import PINNED, VllmSUT

VllmSUT(Config(**{**Config().to_json(), **PINNED}))
print("vLLM adapter: ready")
PY
