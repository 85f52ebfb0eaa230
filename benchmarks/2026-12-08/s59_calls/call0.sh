#!/usr/bin/env bash
# Fifty-ninth session, call 0 (carry .whl). On any card: the GPU tests of the fifty-eighth session's changes that
# reach the GPU (identity check's NaN refusal, apply's KV-cache mark, the engine's check, the loader, the trainer's
# rescale and skip) and this session's sampling edge cases, then `precision check` end to end on tiny-llama for
# three policies (~300 s). On an H200, first the re-quantizer rows (`s57_calls/call2.sh`, ~190 s).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_card.sh
case "$card" in
  *H200*) bash benchmarks/2026-12-07/s57_calls/call2.sh ;;
esac
source scripts/device_env.sh
gpu_tests changed 140 tests/verify tests/rewrite tests/models/gpu tests/rl/gpu
# The sampling edge cases (this session): on CUDA the fused sampler's test runs the Triton kernel on the GPU.
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/rl/test_sampling_edges.py > "$OUT/sampling_edges.log" 2>&1
echo "sampling_edges rc=$?"; tail -n 3 "$OUT/sampling_edges.log" | cut -c1-200
for policy in jetrl_unified jetrl_unified_kv fp8rl_rollout_tis; do
  timeout 40 python3 -c "from precision_engine.cli.app import main; main()" check -p $policy -m tiny-llama \
    --device cuda > "$OUT/check_$policy.txt" 2>&1
  echo "check $policy rc=$?"; tail -n 3 "$OUT/check_$policy.txt" | cut -c1-200
done
