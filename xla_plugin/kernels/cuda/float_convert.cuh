// Conversions between the kernels' element types (fp8 included) and f32.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "xla_plugin/common/mxfp8_math.h"

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

// Two fp8 elements (the low 16 bits of `pair`, first element lowest) as f32: exact, through
// the hardware's fp8x2 -> f16x2 conversion (every e4m3 and e5m2 value is an f16).
template <mxfp8::Fp8Format kFormat>
__device__ inline float2 Fp8PairToFloat2(uint32_t pair) {
  constexpr __nv_fp8_interpretation_t kKind =
      kFormat == mxfp8::Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kKind);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_
