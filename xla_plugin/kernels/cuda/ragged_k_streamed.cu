#include "xla_plugin/kernels/cuda/ragged_k_streamed.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/launch_limits.h"

namespace jgg::cuda {
namespace {

constexpr int kVector = 8;         // output columns per thread: one 16-byte load of rhs
constexpr int kMaxThreads = 256;   // a block covers up to 256 * 8 columns of one output row
constexpr int kOutRowsPerBlock = 64;

// out rows [0, out_rows) at `out` (stride n), columns [0, 8) of this thread:
// out[i, :] = sum over r < kRows of lhs_tile[i][r] * rhs rows r (zero past `rows`).
template <int kRows, typename T, typename O>
__device__ void StreamOutputRows(const T* rhs, int64_t n, int64_t rows,
                                 const float (&lhs_tile)[kOutRowsPerBlock][kStreamedMaxRows],
                                 int out_rows, O* out) {
  float y[kRows][kVector];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    alignas(16) T v[kVector];
    *reinterpret_cast<int4*>(v) = r < rows ? __ldg(reinterpret_cast<const int4*>(rhs + r * n))
                                           : make_int4(0, 0, 0, 0);
#pragma unroll
    for (int e = 0; e < kVector; ++e) y[r][e] = ToFloat(v[e]);
  }
  for (int i = 0; i < out_rows; ++i) {
    float acc[kVector] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float a = lhs_tile[i][r];
#pragma unroll
      for (int e = 0; e < kVector; ++e) acc[e] = fmaf(a, y[r][e], acc[e]);
    }
    StoreEvictFirst(acc, out + i * n);
  }
}

// Grid: x = blocks of kOutRowsPerBlock output rows (of P), y = column chunks of
// blockDim.x * 8 (strided when there are more than kMaxGridYZ), z = (local group,
// batch entry).
template <typename T, typename O>
__global__ void __launch_bounds__(kMaxThreads) RaggedKStreamedKernel(
    RaggedKProblem p, const T* lhs, const T* rhs, O* out, const void* workspace, int max_rows) {
  const int64_t g = blockIdx.z / p.batch, b = blockIdx.z % p.batch;
  const RaggedSchedule s = ScheduleOfBatch(const_cast<void*>(workspace), b, p.num_local_groups);
  const int64_t begin = s.row_begin[g], rows = s.row_begin[g + 1] - begin;
  if (rows > max_rows) return;  // the tensor-core path's group

  // lhs[b, begin + r, i0 + i] as f32, zero past the group's rows: consecutive
  // threads read consecutive i.
  __shared__ float lhs_tile[kOutRowsPerBlock][kStreamedMaxRows];
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kOutRowsPerBlock;
  const int out_rows = static_cast<int>(MinI64(kOutRowsPerBlock, p.p - i0));
  const T* lhs_rows = lhs + (b * p.rows + begin) * p.p + i0;
  for (int t = threadIdx.x; t < kOutRowsPerBlock * kStreamedMaxRows; t += blockDim.x) {
    const int i = t % kOutRowsPerBlock, r = t / kOutRowsPerBlock;
    lhs_tile[i][r] = r < rows && i < out_rows ? ToFloat(lhs_rows[r * p.p + i]) : 0.0f;
  }
  __syncthreads();

  const T* rhs_rows = rhs + (b * p.rows + begin) * p.n;
  O* out_rows_begin = out + ((g * p.batch + b) * p.p + i0) * p.n;
  const int64_t column_step = static_cast<int64_t>(gridDim.y) * blockDim.x * kVector;
  for (int64_t n0 = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * kVector;
       n0 < p.n; n0 += column_step) {
    // Unrolled for the next power of two of rows (the padding rows are zeros).
    if (rows <= 1) {
      StreamOutputRows<1>(rhs_rows + n0, p.n, rows, lhs_tile, out_rows, out_rows_begin + n0);
    } else if (rows <= 2) {
      StreamOutputRows<2>(rhs_rows + n0, p.n, rows, lhs_tile, out_rows, out_rows_begin + n0);
    } else if (rows <= 4) {
      StreamOutputRows<4>(rhs_rows + n0, p.n, rows, lhs_tile, out_rows, out_rows_begin + n0);
    } else {
      StreamOutputRows<8>(rhs_rows + n0, p.n, rows, lhs_tile, out_rows, out_rows_begin + n0);
    }
  }
}

template <typename T, typename O>
cudaError_t Launch(const RaggedKProblem& p, const RaggedOperands& o, int max_rows,
                   bool beside_gemm, cudaStream_t stream) {
  const int64_t vectors = CeilDiv(p.n, kVector);
  const int threads = static_cast<int>(MinI64(kMaxThreads, CeilDiv(vectors, 32) * 32));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(CeilDiv(p.p, kOutRowsPerBlock)),
                        static_cast<unsigned>(MinI64(kMaxGridYZ, CeilDiv(vectors, threads))),
                        static_cast<unsigned>(p.num_local_groups * p.batch));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  cudaLaunchAttribute beside{};
  beside.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  beside.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &beside;
  config.numAttrs = beside_gemm ? 1 : 0;
  return cudaLaunchKernelEx(&config, RaggedKStreamedKernel<T, O>, p, static_cast<const T*>(o.lhs),
                            static_cast<const T*>(o.rhs), static_cast<O*>(o.out),
                            static_cast<const void*>(o.workspace), max_rows);
}

template <typename T>
cudaError_t LaunchWithInput(const RaggedKProblem& p, const RaggedOperands& o, int max_rows,
                            bool beside_gemm, cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kF32: return Launch<T, float>(p, o, max_rows, beside_gemm, stream);
    case ElementType::kBF16: return Launch<T, __nv_bfloat16>(p, o, max_rows, beside_gemm, stream);
    case ElementType::kF16: return Launch<T, __half>(p, o, max_rows, beside_gemm, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchRaggedKStreamed(const RaggedKProblem& p, const RaggedOperands& o, int max_rows,
                                  bool beside_gemm, cudaStream_t stream) {
  if (max_rows < 0 || max_rows > kStreamedMaxRows) return cudaErrorInvalidValue;
  switch (p.in_type) {
    case ElementType::kBF16:
      return LaunchWithInput<__nv_bfloat16>(p, o, max_rows, beside_gemm, stream);
    case ElementType::kF16: return LaunchWithInput<__half>(p, o, max_rows, beside_gemm, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace jgg::cuda
