// Block-scaled FP8 GEMM through cuBLASLt with an algorithm the caller pins (numerics/cublas_pinned.py).
//
// torch._scaled_mm asks cuBLASLt's heuristic for an algorithm on every call, and the heuristic's answer (tile,
// cluster, split-K) depends on M, so a row's bits do too. Here the heuristic is asked once per problem shape
// (`algorithms`), its answers are kept in a table, and every `matmul` names the entry it runs.
//
// Layout (cuBLAS is column-major): out [M, N] row-major is D = op(A) * B with A = w ([N, K] row-major, read
// transposed) and B = x ([M, K] row-major, i.e. K x M column-major). x's scales are 1x128 groups stored M-major
// ([K/128][M]); w's are 128x128 blocks stored [N/128][K/128], or 1x128 groups stored [K/128][N] (the wgrad
// pair): the layouts numerics/quantize.py writes and torch._scaled_mm reads.

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <torch/extension.h>

#include <cstdint>
#include <map>
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
std::map<c10::DeviceIndex, cublasLtHandle_t> handles;

cublasLtHandle_t handle(c10::DeviceIndex device) {
  std::lock_guard<std::mutex> lock(table_mutex);
  auto found = handles.find(device);
  if (found != handles.end()) return found->second;
  cublasLtHandle_t created = nullptr;
  LT_CHECK(cublasLtCreate(&created));
  handles[device] = created;
  return created;
}

cublasLtMatmulAlgo_t entry(int64_t index) {
  std::lock_guard<std::mutex> lock(table_mutex);
  TORCH_CHECK(index >= 0 && index < static_cast<int64_t>(table.size()), "cublaslt_gemm: no algorithm ", index);
  return table[index];
}

cudaDataType_t cuda_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat8_e4m3fn: return CUDA_R_8F_E4M3;
    case at::kFloat8_e5m2: return CUDA_R_8F_E5M2;
    case at::kBFloat16: return CUDA_R_16BF;
    case at::kFloat: return CUDA_R_32F;
    default: TORCH_CHECK(false, "cublaslt_gemm: unsupported dtype ", type);
  }
}

// The descriptors of one problem, destroyed with it. Scale pointers are part of the operation descriptor;
// the heuristic and the applicability check never read through them.
struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;

  Problem(int64_t m, int64_t n, int64_t k, at::ScalarType x_type, at::ScalarType w_type, at::ScalarType out_type,
          bool w_blocks, const void* x_scale, const void* w_scale) {
    LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, transpose);
    set(CUBLASLT_MATMUL_DESC_TRANSB, keep);
    const int32_t a_mode = w_blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                    : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, a_mode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, b_mode);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scale);
    LT_CHECK(cublasLtMatrixLayoutCreate(&a, cuda_type(w_type), k, n, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&b, cuda_type(x_type), k, m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&d, cuda_type(out_type), n, m, n));
  }

  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

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

const cublasLtMatmulAlgoConfigAttributes_t kConfig[] = {
    CUBLASLT_ALGO_CONFIG_ID,           CUBLASLT_ALGO_CONFIG_TILE_ID,          CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
    CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
    CUBLASLT_ALGO_CONFIG_STAGES_ID,    CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,   CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
constexpr int kConfigFields = sizeof(kConfig) / sizeof(kConfig[0]);

}  // namespace

// Up to `requested` algorithms the heuristic offers for an [m, k] x [n, k]^T problem on the current device, best
// first, added to the table. Returns int64 [found, 11]: table index, the nine config fields (algorithm id,
// tile, split-K, reduction scheme, CTA swizzle, custom option, stages, inner shape, cluster shape), workspace.
torch::Tensor algorithms(const torch::Tensor& x_scale, const torch::Tensor& w_scale, int64_t m, int64_t n, int64_t k,
                         at::ScalarType x_type, at::ScalarType w_type, at::ScalarType out_type, bool w_blocks,
                         int64_t requested, int64_t workspace_bytes) {
  const c10::cuda::CUDAGuard guard(w_scale.device());
  Problem problem(m, n, k, x_type, w_type, out_type, w_blocks, x_scale.data_ptr(), w_scale.data_ptr());
  cublasLtMatmulPreference_t preference = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                       sizeof(workspace));
  std::vector<cublasLtMatmulHeuristicResult_t> results(requested);
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle(w_scale.device().index()), problem.op, problem.a, problem.b, problem.d, problem.d, preference,
      static_cast<int>(requested), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(preference);
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS || status == CUBLAS_STATUS_NOT_SUPPORTED,
              "cublasLtMatmulAlgoGetHeuristic: ", cublasLtGetStatusString(status));
  if (status != CUBLAS_STATUS_SUCCESS) found = 0;
  auto info = torch::empty({found, kConfigFields + 2}, torch::kInt64);
  auto rows = info.accessor<int64_t, 2>();
  std::lock_guard<std::mutex> lock(table_mutex);
  for (int i = 0; i < found; ++i) {
    rows[i][0] = static_cast<int64_t>(table.size());
    table.push_back(results[i].algo);
    for (int j = 0; j < kConfigFields; ++j) rows[i][j + 1] = static_cast<int64_t>(config_value(results[i].algo, kConfig[j]));
    rows[i][kConfigFields + 1] = static_cast<int64_t>(results[i].workspaceSize);
  }
  return info;
}

// The workspace bytes table entry `index` needs for an [m, k] x [n, k]^T problem, or -1 where it cannot run it.
int64_t workspace_needed(int64_t index, const torch::Tensor& x_scale, const torch::Tensor& w_scale, int64_t m,
                         int64_t n, int64_t k, at::ScalarType x_type, at::ScalarType w_type, at::ScalarType out_type,
                         bool w_blocks) {
  const c10::cuda::CUDAGuard guard(w_scale.device());
  Problem problem(m, n, k, x_type, w_type, out_type, w_blocks, x_scale.data_ptr(), w_scale.data_ptr());
  cublasLtMatmulAlgo_t algo = entry(index);
  cublasLtMatmulHeuristicResult_t result = {};
  const cublasStatus_t status = cublasLtMatmulAlgoCheck(handle(w_scale.device().index()), problem.op, problem.a,
                                                        problem.b, problem.d, problem.d, &algo, &result);
  return status == CUBLAS_STATUS_SUCCESS ? static_cast<int64_t>(result.workspaceSize) : -1;
}

// out = dequant(x) @ dequant(w)^T with table entry `index`, on the current stream of out's device.
void matmul(int64_t index, const torch::Tensor& x, const torch::Tensor& x_scale, const torch::Tensor& w,
            const torch::Tensor& w_scale, bool w_blocks, torch::Tensor& out, torch::Tensor& workspace) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && out.is_cuda() && workspace.is_cuda(), "cublaslt_gemm: CUDA tensors");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "cublaslt_gemm: x [M, K] and w [N, K]");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && out.is_contiguous(), "cublaslt_gemm: contiguous operands");
  TORCH_CHECK(out.size(0) == x.size(0) && out.size(1) == w.size(0), "cublaslt_gemm: out must be [M, N]");
  TORCH_CHECK(x_scale.scalar_type() == at::kFloat && w_scale.scalar_type() == at::kFloat,
              "cublaslt_gemm: float32 scales");
  const c10::cuda::CUDAGuard guard(out.device());
  Problem problem(x.size(0), w.size(0), x.size(1), x.scalar_type(), w.scalar_type(), out.scalar_type(), w_blocks,
                  x_scale.data_ptr(), w_scale.data_ptr());
  const cublasLtMatmulAlgo_t algo = entry(index);
  const float one = 1.0f, zero = 0.0f;
  LT_CHECK(cublasLtMatmul(handle(out.device().index()), problem.op, &one, w.data_ptr(), problem.a, x.data_ptr(),
                          problem.b, &zero, out.data_ptr(), problem.d, out.data_ptr(), problem.d, &algo,
                          workspace.data_ptr(), workspace.numel(),
                          c10::cuda::getCurrentCUDAStream(out.device().index())));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("algorithms", &algorithms);
  module.def("workspace_needed", &workspace_needed);
  module.def("matmul", &matmul);
}
