// Block-scaled FP8 GEMM through cuBLASLt with an algorithm the caller pins.
//
// torch._scaled_mm asks cuBLASLt's heuristic for an algorithm on every call, and the heuristic's answer (tile,
// split-K) depends on M, so a row's bits do too. Here the heuristic is asked once (`algorithms`), the answers
// are kept in a table, and every `matmul` names the entry it runs: a row computed with the same algorithm has
// the same additions at any M. Which entries agree bitwise with each other is measured by the caller
// (numerics/cublaslt.py), not assumed.
//
// Layout (cuBLAS is column-major): out [M, N] row-major is D = op(A) * B with A = w ([N, K] row-major, read
// transposed), B = x ([M, K] row-major, K x M column-major). x's scales are 1x128 groups stored M-major
// ([K/128][M]); w's are 128x128 blocks stored [N/128][K/128], or 1x128 groups stored [K/128][N] (the wgrad
// pair). These are the layouts numerics/quantize.py writes and torch._scaled_mm reads.

#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <torch/extension.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace {

#define LT_CHECK(expr)                                                                                      \
  do {                                                                                                      \
    cublasStatus_t status_ = (expr);                                                                        \
    TORCH_CHECK(status_ == CUBLAS_STATUS_SUCCESS, #expr ": ", cublasLtGetStatusString(status_));             \
  } while (0)

std::mutex table_mutex;
std::vector<cublasLtMatmulAlgo_t> table;  // every algorithm handed out, by index

// One handle for the process: cuBLASLt handles hold no device state and are safe to share across threads.
cublasLtHandle_t handle() {
  static cublasLtHandle_t shared = [] {
    cublasLtHandle_t created = nullptr;
    LT_CHECK(cublasLtCreate(&created));
    return created;
  }();
  return shared;
}

cudaDataType_t cuda_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat8_e4m3fn: return CUDA_R_8F_E4M3;
    case torch::kFloat8_e5m2: return CUDA_R_8F_E5M2;
    case torch::kBFloat16: return CUDA_R_16BF;
    case torch::kFloat: return CUDA_R_32F;
    default: TORCH_CHECK(false, "cublaslt_gemm: unsupported dtype ", t.scalar_type());
  }
}

// The descriptors of one problem; destroyed with it.
struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;

  Problem(const torch::Tensor& x, const torch::Tensor& x_scale, const torch::Tensor& w,
          const torch::Tensor& w_scale, bool w_blocks, const torch::Tensor& out) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && out.is_cuda(), "cublaslt_gemm: CUDA tensors only");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "cublaslt_gemm: x [M, K], w [N, K]");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && out.is_contiguous(), "cublaslt_gemm: contiguous");
    TORCH_CHECK(out.size(0) == x.size(0) && out.size(1) == w.size(0), "cublaslt_gemm: out must be [M, N]");
    TORCH_CHECK(x_scale.scalar_type() == torch::kFloat && w_scale.scalar_type() == torch::kFloat,
                "cublaslt_gemm: float32 scales");
    const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, transpose);
    set(CUBLASLT_MATMUL_DESC_TRANSB, keep);
    const int32_t a_mode = w_blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                    : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
    const void* a_scale = w_scale.data_ptr();
    const void* b_scale = x_scale.data_ptr();
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale);
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, cuda_type(w), k, n, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, cuda_type(x), k, m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&d, cuda_type(out), n, m, n));
  }

  ~Problem() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }

  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    LT_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
  }
};

uint64_t config_value(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS ||
      size > sizeof(uint64_t)) {
    return ~uint64_t{0};
  }
  uint64_t value = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, size, &size);
  return value;
}

}  // namespace

// Asks cuBLASLt's heuristic for up to `requested` algorithms for this problem and adds them to the table.
// Returns int64 [found, 11]: table index, algorithm id, tile, split-K, reduction scheme, CTA swizzle, custom
// option, stages, inner shape, cluster shape, workspace bytes.
torch::Tensor algorithms(const torch::Tensor& x, const torch::Tensor& x_scale, const torch::Tensor& w,
                         const torch::Tensor& w_scale, bool w_blocks, const torch::Tensor& out, int64_t requested,
                         int64_t workspace_bytes) {
  Problem problem(x, x_scale, w, w_scale, w_blocks, out);
  cublasLtMatmulPreference_t preference = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  std::vector<cublasLtMatmulHeuristicResult_t> results(requested);
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle(), problem.op, problem.a, problem.b, problem.d, problem.d, preference,
      static_cast<int>(requested), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(preference);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS || status == CUBLAS_STATUS_NOT_SUPPORTED,
              "cublasLtMatmulAlgoGetHeuristic: ", cublasLtGetStatusString(status));
  auto info = torch::empty({found, 11}, torch::kInt64);
  auto rows = info.accessor<int64_t, 2>();
  std::lock_guard<std::mutex> lock(table_mutex);
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    rows[i][0] = static_cast<int64_t>(table.size());
    table.push_back(algo);
    const cublasLtMatmulAlgoConfigAttributes_t attributes[] = {
        CUBLASLT_ALGO_CONFIG_ID,          CUBLASLT_ALGO_CONFIG_TILE_ID,       CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
        CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
        CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_STAGES_ID, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
        CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
    for (int j = 0; j < 9; ++j) rows[i][j + 1] = static_cast<int64_t>(config_value(algo, attributes[j]));
    rows[i][10] = static_cast<int64_t>(results[i].workspaceSize);
  }
  return info;
}

// The workspace bytes table entry `index` needs for this problem, or -1 where it cannot run it.
int64_t workspace_needed(const torch::Tensor& x, const torch::Tensor& x_scale, const torch::Tensor& w,
                         const torch::Tensor& w_scale, bool w_blocks, const torch::Tensor& out, int64_t index) {
  Problem problem(x, x_scale, w, w_scale, w_blocks, out);
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    TORCH_CHECK(index >= 0 && index < static_cast<int64_t>(table.size()), "cublaslt_gemm: no algorithm ", index);
    algo = table[index];
  }
  cublasLtMatmulHeuristicResult_t result = {};
  const cublasStatus_t status = cublasLtMatmulAlgoCheck(handle(), problem.op,
                                                        problem.a, problem.b, problem.d, problem.d, &algo, &result);
  return status == CUBLAS_STATUS_SUCCESS ? static_cast<int64_t>(result.workspaceSize) : -1;
}

// out = dequant(x) @ dequant(w)^T with table entry `index`, on the current stream.
void matmul(const torch::Tensor& x, const torch::Tensor& x_scale, const torch::Tensor& w, const torch::Tensor& w_scale,
            bool w_blocks, torch::Tensor& out, int64_t index, torch::Tensor& workspace) {
  Problem problem(x, x_scale, w, w_scale, w_blocks, out);
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    TORCH_CHECK(index >= 0 && index < static_cast<int64_t>(table.size()), "cublaslt_gemm: no algorithm ", index);
    algo = table[index];
  }
  const float one = 1.0f, zero = 0.0f;
  LT_CHECK(cublasLtMatmul(handle(), problem.op, &one, w.data_ptr(), problem.a,
                          x.data_ptr(), problem.b, &zero, out.data_ptr(), problem.d, out.data_ptr(), problem.d,
                          &algo, workspace.data_ptr(), workspace.numel(), c10::cuda::getCurrentCUDAStream()));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("algorithms", &algorithms);
  module.def("workspace_needed", &workspace_needed);
  module.def("matmul", &matmul);
}
