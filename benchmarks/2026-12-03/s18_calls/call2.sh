#!/usr/bin/env bash
# Call 2 (eighteenth session): call 1's `import deep_gemm` segfaulted before any output. dg_diag.py finds the
# stage (faulthandler) on call 1's module, while DeepGEMM's own setup.py builds another beside it; the probe then
# runs on the first that imports: JIT compiles in four parallel parts, then the timed run.
set -u
cd "$(dirname "$0")/../../.."
source scripts/device_env.sh
export DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
D=benchmarks/2026-12-03/s18_calls
tar xzf .dg/deepgemm_src.tar.gz -C /tmp && cp -r /tmp/dg /tmp/dg_setup
for r in /tmp/dg /tmp/dg_setup; do
  for sub in cute cutlass; do ln -sfn $r/third-party/cutlass/include/$sub $r/deep_gemm/include/$sub; done
done
tar xzf .dg/dg_built.tgz -C /tmp dg/deep_gemm/_C.so
( cd /tmp/dg_setup && MAX_JOBS=8 timeout 200 python3 setup.py build_ext --inplace > "$OUT/dg_setup_build.log" 2>&1 ) &
BG=$!
timeout 120 python3 -X faulthandler $D/dg_diag.py /tmp/dg > "$OUT/dg_diag_mine.txt" 2>&1
echo "mine rc=$?"; grep -v "^\[W" "$OUT/dg_diag_mine.txt" | tail -n 25 | cut -c1-250
wait $BG
echo "setup build rc=$(tail -n 2 "$OUT/dg_setup_build.log" | tr '\n' ' ' | cut -c1-200)"
SO=$(find /tmp/dg_setup/deep_gemm -maxdepth 1 -name "_C*.so" | head -n 1)
ROOT=""
grep -q "gemm ok" "$OUT/dg_diag_mine.txt" && ROOT=/tmp/dg
if [ -z "$ROOT" ] && [ -n "$SO" ]; then
  cp "$SO" /tmp/dg_setup/deep_gemm/_C.so
  timeout 120 python3 -X faulthandler $D/dg_diag.py /tmp/dg_setup > "$OUT/dg_diag_setup.txt" 2>&1
  echo "setup rc=$?"; grep -v "^\[W" "$OUT/dg_diag_setup.txt" | tail -n 25 | cut -c1-250
  grep -q "gemm ok" "$OUT/dg_diag_setup.txt" && ROOT=/tmp/dg_setup
fi
[ -z "$ROOT" ] && exit 0
for i in 0 1 2 3; do
  PYTHONPATH=$ROOT:$PYTHONPATH timeout 150 python3 $D/dg_probe.py --warm --part=$i/4 > "$OUT/dg_warm$i.log" 2>&1 &
done
wait
grep -h -v "^\[W\|warm done" "$OUT"/dg_warm*.log | tail -n 8 | cut -c1-300
PYTHONPATH=$ROOT:$PYTHONPATH timeout 240 python3 $D/dg_probe.py > "$OUT/dg_probe.txt" 2>&1
grep -v "^\[W\|Warning\|warn(" "$OUT/dg_probe.txt" | tail -n 45 | cut -c1-330
tar czf "$OUT/dg_built2.tgz" -C /tmp "${ROOT#/tmp/}/deep_gemm/_C.so" dgcache 2>/dev/null
