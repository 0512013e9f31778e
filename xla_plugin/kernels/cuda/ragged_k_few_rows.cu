#include "xla_plugin/kernels/cuda/ragged_k_few_rows.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "xla_plugin/common/workspace.h"

namespace jgg::cuda {
namespace {

constexpr int kVector = 8;  // elements per thread: one 16-byte load of bf16/f16
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksPerGroup = 1024;

__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float ToFloat(__half v) { return __half2float(v); }

template <class O> __device__ inline O FromFloat(float v);
template <> __device__ inline float FromFloat<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ inline __half FromFloat<__half>(float v) { return __float2half_rn(v); }

// out[g, b, i, n0 .. n0+8) = sum over rows r of g: lhs[b, r, i] * rhs[b, r, n0 .. n0+8).
// A block walks output rows i; its threads walk the 8-element vectors of that
// row (coalesced 16-byte loads of rhs and stores of out, no index division);
// lhs[b, r, i] is a broadcast.
template <class T, class O>
__global__ void __launch_bounds__(kThreads) RaggedKFewRowsKernel(RaggedKProblem p, const T* lhs,
                                                                 const T* rhs, O* out,
                                                                 const void* workspace) {
  const int64_t g = blockIdx.y / p.batch, b = blockIdx.y % p.batch;
  const RaggedSchedule s = ScheduleOfBatch(const_cast<void*>(workspace), b, p.num_local_groups);
  const int64_t begin = s.row_begin[g], end = s.row_begin[g + 1];
  const T* lhs_b = lhs + b * p.rows * p.p;
  const T* rhs_b = rhs + b * p.rows * p.n;
  O* out_g = out + (g * p.batch + b) * p.p * p.n;
  for (int64_t i = blockIdx.x; i < p.p; i += gridDim.x) {
    for (int64_t n0 = threadIdx.x * kVector; n0 < p.n; n0 += kThreads * kVector) {
      float acc[kVector] = {};
      for (int64_t r = begin; r < end; ++r) {
        const float a = ToFloat(lhs_b[r * p.p + i]);
        const uint4 packed = *reinterpret_cast<const uint4*>(rhs_b + r * p.n + n0);
        const T* x = reinterpret_cast<const T*>(&packed);
#pragma unroll
        for (int e = 0; e < kVector; ++e) acc[e] = fmaf(a, ToFloat(x[e]), acc[e]);
      }
      alignas(16) O result[kVector];
#pragma unroll
      for (int e = 0; e < kVector; ++e) result[e] = FromFloat<O>(acc[e]);
      constexpr int kStores = sizeof(result) / sizeof(uint4);  // 1 for 16-bit out, 2 for f32
#pragma unroll
      for (int q = 0; q < kStores; ++q)
        reinterpret_cast<uint4*>(out_g + i * p.n + n0)[q] = reinterpret_cast<const uint4*>(result)[q];
    }
  }
}

template <class T>
cudaError_t LaunchWithOutput(const RaggedKProblem& p, const RaggedOperands& o, dim3 grid,
                             cudaStream_t stream) {
  const T* lhs = static_cast<const T*>(o.lhs);
  const T* rhs = static_cast<const T*>(o.rhs);
  switch (p.out_type) {
    case ElementType::kF32:
      RaggedKFewRowsKernel<T, float><<<grid, kThreads, 0, stream>>>(
          p, lhs, rhs, static_cast<float*>(o.out), o.workspace);
      break;
    case ElementType::kBF16:
      RaggedKFewRowsKernel<T, __nv_bfloat16><<<grid, kThreads, 0, stream>>>(
          p, lhs, rhs, static_cast<__nv_bfloat16*>(o.out), o.workspace);
      break;
    case ElementType::kF16:
      RaggedKFewRowsKernel<T, __half><<<grid, kThreads, 0, stream>>>(
          p, lhs, rhs, static_cast<__half*>(o.out), o.workspace);
      break;
  }
  return cudaGetLastError();
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool RaggedKFewRowsSupported(const RaggedKProblem& p, const RaggedOperands& o) {
  return p.in_type != ElementType::kF32 && p.n % kVector == 0 && Aligned16(o.rhs) &&
         Aligned16(o.out);
}

cudaError_t LaunchRaggedKFewRows(const RaggedKProblem& p, const RaggedOperands& o,
                                 cudaStream_t stream) {
  const int64_t blocks = MinI64(kMaxBlocksPerGroup, p.p);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.num_local_groups * p.batch));
  return p.in_type == ElementType::kBF16 ? LaunchWithOutput<__nv_bfloat16>(p, o, grid, stream)
                                         : LaunchWithOutput<__half>(p, o, grid, stream);
}

}  // namespace jgg::cuda
