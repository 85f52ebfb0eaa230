#!/usr/bin/env bash
# Fifty-eighth session, call 0 (carry .whl). On an H200: `s57_calls/call2.sh` (the re-quantizer rows). On any
# other card: the rollout engine's GPU tests after this session's KV-cache check in `Engine.generate` (90 s), then
# the quantizer GPU tests the fifty-sixth session had no time for (`s57_calls/quant_rest.txt`, 150 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in
  *H200*) bash benchmarks/2026-12-07/s57_calls/call2.sh ;;
  *)
    source scripts/device_env.sh
    gpu_tests engine 90 tests/rl/gpu/test_engine_gpu.py
    bash benchmarks/2026-12-07/s57_calls/call2.sh ;;
esac
