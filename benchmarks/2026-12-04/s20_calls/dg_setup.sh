# Sourced by a call script from the repository root: DeepGEMM (54e2261, CUTLASS f3fde58, fmt 553ec11) from the
# carried source tarball. Where .dg/ carries no built module (dgsys.tgz) it is built here with the system g++
# (`benchmarks/2026-12-03/s18_calls/dg_build.py`, ~50 s).
# Exports PYTHONPATH with /tmp/dgsys first.
export DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
if [ -f .dg/dgsys.tgz ]; then
  mkdir -p /tmp/dgsys && tar xzf .dg/deepgemm_src.tar.gz -C /tmp/dgsys --strip-components=1
  for sub in cute cutlass; do ln -sfn /tmp/dgsys/third-party/cutlass/include/$sub /tmp/dgsys/deep_gemm/include/$sub; done
  tar xzf .dg/dgsys.tgz -C /tmp
  [ -f .dg/dgcache.tgz ] && tar xzf .dg/dgcache.tgz -C /tmp
else
  CXX=/usr/bin/g++ DG_ROOT=/tmp/dgsys timeout 200 python3 benchmarks/2026-12-03/s18_calls/dg_build.py \
    .dg/deepgemm_src.tar.gz > "$OUT/dg_build.log" 2>&1
  tail -n 1 "$OUT/dg_build.log"
fi
export PYTHONPATH=/tmp/dgsys:$PYTHONPATH
