#!/usr/bin/env bash
# Install what a real engine's adapter needs, beside loopcheck's own install:
# `scripts/install-engine.sh vllm` (adapters/vllm_sut.py), `... lmdeploy`
# (adapters/lmdeploy_sut.py) or `... sglang` (adapters/sglang_sut.py); vllm first: the
# LMDeploy and SGLang sets add to vLLM's, and SGLang's to LMDeploy's. The engine's wheel and
# the pure-Python packages its scheduling code imports are pinned in
# requirements-ENGINE.txt and installed with --no-deps, so that nothing pulls the
# engine's CUDA stack or another torch (pip may warn that the engine's own pins are
# unmet; its scheduling code runs regardless). Ends by building the adapter once on
# the config it supports, so a broken install fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
engine="${1:?usage: scripts/install-engine.sh vllm|lmdeploy|sglang}"
python3 -m pip install -q --no-deps -r "requirements-$engine.txt"
python3 - "$engine" <<'PY'
import sys

from loopcheck.model.config import Config
from loopcheck.adapters.loader import load_factory

factory = load_factory(sys.argv[1])
pinned = sys.modules[factory.__module__].PINNED
factory(Config(**{**Config().to_json(), **pinned}))
print(f"{sys.argv[1]} adapter: ready")
PY
