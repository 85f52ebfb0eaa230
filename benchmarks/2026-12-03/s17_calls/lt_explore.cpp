// Probe (seventeenth session): every cuBLASLt configuration (algorithm id x tile x stages x cluster x swizzle x
// custom option, no split-K) that cublasLtMatmulAlgoCheck accepts for a block-scaled FP8 problem, beyond the
// heuristic's own offers. Layouts as numerics/csrc/cublaslt_gemm.cpp.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <torch/extension.h>

#include <array>
#include <vector>

#define LT_CHECK(expr)                                                                              \
  do {                                                                                              \
    cublasStatus_t s_ = (expr);                                                                     \
    TORCH_CHECK(s_ == CUBLAS_STATUS_SUCCESS, #expr ": ", cublasLtGetStatusString(s_));              \
  } while (0)

namespace {
cublasLtHandle_t lt = nullptr;
std::vector<cublasLtMatmulAlgo_t> table;

cudaDataType_t ty(at::ScalarType t) {
  switch (t) {
    case at::kFloat8_e4m3fn: return CUDA_R_8F_E4M3;
    case at::kBFloat16: return CUDA_R_16BF;
    case at::kFloat: return CUDA_R_32F;
    default: TORCH_CHECK(false, "dtype");
  }
}

struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Problem(int64_t m, int64_t n, int64_t k, at::ScalarType xt, at::ScalarType wt, at::ScalarType ot, bool blocks,
          const void* xs, const void* ws) {
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t tr = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof(tr));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep));
    int32_t am = blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    int32_t bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof(am));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof(bm));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof(ws));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(xs));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, ty(wt), k, n, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, ty(xt), k, m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&d, ty(ot), n, m, n));
  }
  ~Problem() {
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t size = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS) return {};
  std::vector<T> out(size / sizeof(T));
  if (size) cublasLtMatmulAlgoCapGetAttribute(&algo, attr, out.data(), size, &size);
  return out;
}

template <typename T>
T cap_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t size = 0;
  cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &v, sizeof(v), &size);
  return v;
}

template <typename T>
void cfg(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T v) {
  cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &v, sizeof(v));
}
}  // namespace

// Rows: table index, algo id, tile, stages, cluster, swizzle, custom, workspace.
torch::Tensor explore(const torch::Tensor& xs, const torch::Tensor& ws, int64_t m, int64_t n, int64_t k,
                      at::ScalarType xt, at::ScalarType wt, at::ScalarType ot, bool blocks, int64_t ws_limit,
                      bool all_swizzles_customs) {
  const c10::cuda::CUDAGuard guard(ws.device());
  if (!lt) LT_CHECK(cublasLtCreate(&lt));
  Problem p(m, n, k, xt, wt, ot, blocks, xs.data_ptr(), ws.data_ptr());
  int ids[256];
  int nid = 0;
  LT_CHECK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, ty(wt), ty(xt), ty(ot), ty(ot), 256, ids,
                                    &nid));
  std::vector<std::array<int64_t, 8>> rows;
  const int clusters[] = {0, 2, 3, 4, 5, 6};
  for (int i = 0; i < nid; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, ty(wt), ty(xt), ty(ot), ty(ot), ids[i], &base) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    auto tiles = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    auto stages = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(0);
    if (stages.empty()) stages.push_back(0);
    const int swz_max = all_swizzles_customs ? cap_value<uint32_t>(base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) : 0;
    const int cust_max = all_swizzles_customs ? cap_value<int32_t>(base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX) : 0;
    for (uint32_t tile : tiles)
      for (uint32_t stage : stages)
        for (int cluster : clusters)
          for (int swz = 0; swz <= swz_max; ++swz)
            for (int cust = 0; cust <= cust_max; ++cust) {
              cublasLtMatmulAlgo_t algo = base;
              cfg<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile);
              cfg<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage);
              cfg<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster);
              cfg<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swz);
              cfg<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, cust);
              cfg<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
              cublasLtMatmulHeuristicResult_t res = {};
              if (cublasLtMatmulAlgoCheck(lt, p.op, p.a, p.b, p.d, p.d, &algo, &res) != CUBLAS_STATUS_SUCCESS)
                continue;
              if (res.workspaceSize > static_cast<size_t>(ws_limit)) continue;
              rows.push_back({static_cast<int64_t>(table.size()), ids[i], tile, stage, cluster, swz, cust,
                              static_cast<int64_t>(res.workspaceSize)});
              table.push_back(algo);
            }
  }
  auto out = torch::empty({static_cast<int64_t>(rows.size()), 8}, torch::kInt64);
  auto acc = out.accessor<int64_t, 2>();
  for (size_t r = 0; r < rows.size(); ++r)
    for (int c = 0; c < 8; ++c) acc[r][c] = rows[r][c];
  return out;
}

void run(int64_t index, const torch::Tensor& x, const torch::Tensor& xs, const torch::Tensor& w,
         const torch::Tensor& ws, bool blocks, torch::Tensor& out, torch::Tensor& workspace) {
  const c10::cuda::CUDAGuard guard(out.device());
  Problem p(x.size(0), w.size(0), x.size(1), x.scalar_type(), w.scalar_type(), out.scalar_type(), blocks,
            xs.data_ptr(), ws.data_ptr());
  const float one = 1.0f, zero = 0.0f;
  LT_CHECK(cublasLtMatmul(lt, p.op, &one, w.data_ptr(), p.a, x.data_ptr(), p.b, &zero, out.data_ptr(), p.d,
                          out.data_ptr(), p.d, &table.at(index), workspace.data_ptr(), workspace.numel(),
                          c10::cuda::getCurrentCUDAStream(out.device().index())));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("explore", &explore);
  module.def("run", &run);
}
