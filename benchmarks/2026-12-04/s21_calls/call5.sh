#!/usr/bin/env bash
# Call 5 (twenty-first session): every cuBLASLt algorithm offered for the wgrad GEMM on the 8B shapes at 8192
# tokens (scripts/probe_wgrad_algorithms.py), against torch._scaled_mm's pick: the wgrad is the step's largest
# kernel (call 1's profile).
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
timeout 300 python3 scripts/probe_wgrad_algorithms.py > "$OUT/wgrad_algorithms.txt" 2>&1
echo "probe rc=$?"; grep -E "^\||Error|error" "$OUT/wgrad_algorithms.txt" | cut -c1-170 | head -150
