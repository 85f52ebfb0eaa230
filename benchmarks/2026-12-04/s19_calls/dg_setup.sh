# Sourced by a call script from the repository root: DeepGEMM from the carried source, module and JIT cache
# (eighteenth session's build, `benchmarks/2026-12-03/s18_calls/README.md`); exports PYTHONPATH with /tmp/dgsys first.
mkdir -p /tmp/dgsys && tar xzf .dg/deepgemm_src.tar.gz -C /tmp/dgsys --strip-components=1
for sub in cute cutlass; do ln -sfn /tmp/dgsys/third-party/cutlass/include/$sub /tmp/dgsys/deep_gemm/include/$sub; done
tar xzf .dg/dgsys.tgz -C /tmp && tar xzf .dg/dgcache.tgz -C /tmp
export PYTHONPATH=/tmp/dgsys:$PYTHONPATH DG_JIT_CACHE_DIR=/tmp/dgcache TORCH_EXTENSIONS_DIR=/tmp/torch_ext
