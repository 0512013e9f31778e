// Conversions between the kernels' element types (fp8 included) and f32.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

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

// kN results converted to O and stored at dst (16-byte aligned, kN * sizeof(O) a multiple of
// 16) with 16-byte evict-first stores: for outputs far larger than L2 that are never re-read.
template <typename O, int kN>
__device__ inline void StoreEvictFirst(const float (&values)[kN], O* dst) {
  alignas(16) O result[kN];
#pragma unroll
  for (int e = 0; e < kN; ++e) result[e] = FromFloat<O>(values[e]);
  static_assert(sizeof(result) % sizeof(int4) == 0, "whole 16-byte stores");
#pragma unroll
  for (int q = 0; q < static_cast<int>(sizeof(result) / sizeof(int4)); ++q)
    __stcs(reinterpret_cast<int4*>(dst) + q, reinterpret_cast<const int4*>(result)[q]);
}

// a and b converted to O (as FromFloat) and stored at dst[0], dst[1] by one store (dst aligned
// to 2 * sizeof(O)).
template <typename O>
__device__ inline void StorePair(O* dst, float a, float b) {
  if constexpr (std::is_same_v<O, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else if constexpr (std::is_same_v<O, __nv_bfloat16>) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  } else {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  }
}

// Two fp8 elements (the low 16 bits of `pair`, first element lowest) as f32: exact, through
// the hardware's fp8x2 -> f16x2 conversion (every e4m3 and e5m2 value is an f16).
template <mxfp8::Fp8Format kFormat>
__device__ inline float2 Fp8PairToFloat2(uint32_t pair) {
  constexpr __nv_fp8_interpretation_t kKind =
      kFormat == mxfp8::Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kKind);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Dequantization of fp8 codes by their E8M0 scale with integer operations and one multiply per
// element (or per pair of 16-bit elements), for the scales where that is exact.
//
// A code's magnitude bits, moved into the exponent and mantissa fields of Out (sign kept),
// are Out's encoding of the code's value times 2^-(Out bias - fp8 bias): subnormal codes
// become subnormal Out values with the same factor. Multiplying by the power of two
// 2^(e - 127 + Out bias - fp8 bias) then gives q * 2^(e - 127) with no rounding as long as
// every finite code's result is a normal, finite Out value and the factor itself is one:
// scales in [kMinScale, kMaxScale]. NaN codes (and e5m2's Inf) are not values here: a word
// holding one, or a scale outside the range, goes through the per-element path instead.
template <typename Out, mxfp8::Fp8Format kFormat>
struct ExactScaling {
  static constexpr mxfp8::FloatFormat kOut = std::is_same_v<Out, float> ? mxfp8::F32Format()
                                             : std::is_same_v<Out, __half> ? mxfp8::F16Format()
                                                                            : mxfp8::Bf16Format();
  static constexpr mxfp8::FloatFormat kIn = mxfp8::Fp8FloatFormat(kFormat);
  static constexpr bool kE4m3 = kFormat == mxfp8::Fp8Format::kE4M3;
  static constexpr int kLane = std::is_same_v<Out, float> ? 32 : 16;  // bits per Out element
  static constexpr int kExponentBits = kOut.total_bits - 1 - kOut.mantissa_bits;
  static constexpr int kShift = kExponentBits - (7 - kIn.mantissa_bits);  // code -> Out field
  static constexpr int kBiasGap = kOut.bias - kIn.bias;
  // Exponents of the smallest subnormal code and of the largest finite code.
  static constexpr int kCodeMinExponent = 1 - kIn.bias - kIn.mantissa_bits;
  static constexpr int kCodeMaxExponent = kE4m3 ? 8 : 15;
  static constexpr int kOutMinExponent = 1 - kOut.bias, kOutMaxExponent = kOut.bias;
  static constexpr int Max(int a, int b) { return a > b ? a : b; }
  static constexpr int Min(int a, int b) { return a < b ? a : b; }
  static constexpr int kMinScale = Max(127 + kOutMinExponent - kCodeMinExponent,
                                       127 + kOutMinExponent - kBiasGap);
  static constexpr int kMaxScale = Min(127 + kOutMaxExponent - kCodeMaxExponent,
                                       127 + kOutMaxExponent - kBiasGap);
  // A code sign-extended to its lane, shifted so its magnitude lands in Out's exponent and
  // mantissa fields, keeps the lane's sign bit and those fields.
  static constexpr int kLeftShift = kLane - 8 - kShift;
  static constexpr uint32_t kKeep =
      kLane == 32 ? (0x80000000u | (0x7Fu << kLeftShift))
                  : (0x8000u | (0x7Fu << kLeftShift)) * 0x00010001u;
  // Per code byte: its magnitude plus this has bit 7 set exactly for NaN (and Inf) codes.
  static constexpr uint32_t kSpecialMask = kE4m3 ? 0x7F7F7F7Fu : 0x7C7C7C7Cu;
  static constexpr uint32_t kSpecialStep = kE4m3 ? 0x01010101u : 0x04040404u;

  __device__ static bool InRange(uint32_t e) {
    return kMinScale <= kMaxScale && e - kMinScale <= static_cast<uint32_t>(kMaxScale - kMinScale);
  }
  // Out bits of the factor for scale e (in range).
  __device__ static uint32_t FactorBits(uint32_t e) {
    return (e - 127 + kBiasGap + kOut.bias) << kOut.mantissa_bits;
  }
  // Whether any code of the n words is NaN (or Inf).
  template <int n>
  __device__ static bool AnySpecial(const uint32_t (&codes)[n]) {
    uint32_t flags = 0;
#pragma unroll
    for (int i = 0; i < n; ++i) flags |= (codes[i] & kSpecialMask) + kSpecialStep;
    return (flags & 0x80808080u) != 0;
  }
  // Four codes (first lowest) times their factors: `factors` holds one Out word per output
  // word (two 16-bit factors, or one f32 factor), `out` receives 4 * sizeof(Out) / 4 words.
  __device__ static void Convert(uint32_t codes, const uint32_t* factors, uint32_t* out) {
    if constexpr (kLane == 16) {
      // Lanes (code 0, code 1) and (code 2, code 3), each code's sign in the lane's high byte.
      const uint32_t lanes[2] = {SignedBytes(codes, 0x9180), SignedBytes(codes, 0xB3A2)};
#pragma unroll
      for (int w = 0; w < 2; ++w) out[w] = Multiply((lanes[w] << kLeftShift) & kKeep, factors[w]);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t lane = SignedBytes(codes, k | ((8 | k) * 0x1110));  // code k, sign-extended
        const uint32_t bits = (lane << kLeftShift) & kKeep;
        out[k] = __float_as_uint(__fmul_rn(__uint_as_float(bits), __uint_as_float(factors[k])));
      }
    }
  }

 private:
  // PRMT of {0:x}: byte i of the result is byte (selector nibble i & 7) of the pair, or with
  // bit 3 of the nibble set, that byte's sign bit repeated (__byte_perm has no sign mode).
  __device__ static uint32_t SignedBytes(uint32_t x, uint32_t selector) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(x), "r"(selector));
    return r;
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t nibble = (selector >> (4 * i)) & 0xF;
      uint32_t byte = (nibble & 7) < 4 ? (x >> (8 * (nibble & 7))) & 0xFF : 0;
      if (nibble & 8) byte = (byte & 0x80) ? 0xFF : 0x00;
      r |= byte << (8 * i);
    }
    return r;
#endif
  }
  __device__ static uint32_t Multiply(uint32_t a, uint32_t b) {  // two 16-bit lanes, exact here
    if constexpr (std::is_same_v<Out, __half>) {
      const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&a),
                                *reinterpret_cast<const __half2*>(&b));
      return *reinterpret_cast<const uint32_t*>(&p);
    } else {
      const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                       *reinterpret_cast<const __nv_bfloat162*>(&b));
      return *reinterpret_cast<const uint32_t*>(&p);
    }
  }
};

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_FLOAT_CONVERT_CUH_
