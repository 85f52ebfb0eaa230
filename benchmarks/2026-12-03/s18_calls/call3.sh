#!/usr/bin/env bash
# Call 3 (eighteenth session): call 2 imported deep_gemm but its first fp8_gemm_nt segfaulted. Where (DG_JIT_DEBUG
# prints each JIT stage), and does a build on CUDA's runtime API (-DDG_JIT_USE_RUNTIME_API: libraries and kernels
# through cudart instead of driver symbols looked up with dlsym) get past it?
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s18_calls
DG_ROOT=/tmp/dgrt DG_CFLAGS=-DDG_JIT_USE_RUNTIME_API timeout 200 python3 $D/dg_build.py > "$OUT/dg_build_rt.log" 2>&1 &
BG=$!
tar xzf .dg/deepgemm_src.tar.gz -C /tmp
for sub in cute cutlass; do ln -sfn /tmp/dg/third-party/cutlass/include/$sub /tmp/dg/deep_gemm/include/$sub; done
tar xzf .dg/dg_built.tgz -C /tmp dg/deep_gemm/_C.so
DG_JIT_DEBUG=1 timeout 120 python3 -X faulthandler $D/dg_diag.py /tmp/dg > "$OUT/dg_diag_debug.txt" 2>&1
echo "driver-api build rc=$?"; grep -v "^\[W" "$OUT/dg_diag_debug.txt" | tail -n 30 | cut -c1-400
wait $BG; tail -n 2 "$OUT/dg_build_rt.log"
DG_JIT_DEBUG=1 timeout 120 python3 -X faulthandler $D/dg_diag.py /tmp/dgrt > "$OUT/dg_diag_rt.txt" 2>&1
echo "runtime-api build rc=$?"; grep -v "^\[W" "$OUT/dg_diag_rt.txt" | tail -n 30 | cut -c1-400
tar czf "$OUT/dg_built_rt.tgz" -C /tmp dgrt/deep_gemm/_C.so 2>/dev/null
