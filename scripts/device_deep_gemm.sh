# Sourced from the repository root by a device call's script, after scripts/device_env.sh: DeepGEMM for AUTO's
# Hopper GEMMs, built from the carried source tarball `.dg/deepgemm_src.tar.gz` (a DeepGEMM checkout with its
# CUTLASS and fmt headers; README "DeepGEMM") by scripts/build_deep_gemm.py with the image's dynamic-libstdc++
# g++, about 50 s; its JIT cache in /tmp/dgcache. Exports PYTHONPATH with the build first; the build's log is
# $OUT/deep_gemm_build.log. A warm machine's earlier build is used again when it succeeded (its marker
# /tmp/deep_gemm/.built; a failed build leaves /tmp/deep_gemm without one). Without the tarball the call runs
# without DeepGEMM.
export DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
if [ -f /tmp/deep_gemm/.built ]; then
  export PYTHONPATH=/tmp/deep_gemm:${PYTHONPATH:-}
  echo "DeepGEMM: this machine's earlier build in /tmp/deep_gemm"
elif [ -f .dg/deepgemm_src.tar.gz ]; then
  CXX=/usr/bin/g++ PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 240 python3 scripts/build_deep_gemm.py \
    .dg/deepgemm_src.tar.gz --into /tmp/deep_gemm > "$OUT/deep_gemm_build.log" 2>&1 \
    && touch /tmp/deep_gemm/.built && export PYTHONPATH=/tmp/deep_gemm:${PYTHONPATH:-}
  tail -n 1 "$OUT/deep_gemm_build.log"
else
  echo "no .dg/deepgemm_src.tar.gz: DeepGEMM not built"
fi
