#!/usr/bin/env bash
# The CUDA paths, in one short run for a lent GPU machine (run from the repository root:
# `bash bench/gpu_check.sh`; about 3 minutes). Needs a CUDA build of torch and the
# project installed as `.ci/install` does (the device machine has no network: install
# from a local wheel cache). Runs every test that skips without CUDA: the tiny engine
# on CUDA against the CPU, and SmolLM2 greedy on CUDA (float32 = the CPU's ids;
# bfloat16 still answers). Not yet run: no GPU machine was lent so far.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 setup.py -q build_ext --inplace
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c "import torch; print('cuda', torch.cuda.is_available(), torch.version.cuda)"
python3 -m pytest -q -p no:cacheprovider -rs \
  tests/unit/worker/test_worker_engine.py::test_cuda_engine_matches_cpu \
  "tests/functional/serving/test_smollm2_exact.py::test_cuda_greedy_answers_like_the_cpu"
