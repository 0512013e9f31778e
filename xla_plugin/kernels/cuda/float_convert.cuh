// Conversions between the kernels' element types and their f32 accumulators.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace jgg::cuda {

__device__ inline float ToFloat(float v) { return v; }
__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float ToFloat(__half v) { return __half2float(v); }

// Round to nearest even, like XLA's converts.
template <typename O> __device__ inline O FromFloat(float v);
template <> __device__ inline float FromFloat<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ inline __half FromFloat<__half>(float v) { return __float2half_rn(v); }

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_
