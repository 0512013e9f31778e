// Where the dequantize-on-load tensor-core paths (the wgmma forward/dgrad kernel, the fused
// wgrad's mma.sync groups) may multiply bf16 copies of MXFP8 values: the scale range in
// which every dequantized code is a normal bf16 number (so exact) and every product of two
// such values a normal f32 below 2^112 (so exact too, and no tensor core's flush of subnormal
// values or products can change it). A code under a scale outside the range is exact there
// only when it is zero and the scale is not the NaN scale 0xFF (which makes even a zero code
// NaN); the kernels send any other to their f32 per-element path.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_BF16_FAST_SCALES_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_BF16_FAST_SCALES_CUH_

#include <cuda_bf16.h>

#include <cstdint>

#include "xla_plugin/kernels/cuda/float_convert.cuh"

namespace jgg::cuda {

// e4m3 [73, 134], e5m2 [80, 142]: each operand's range carries half of the product's
// condition, so it holds whatever the other operand's format.
template <mxfp8::Fp8Format kFormat>
struct FastScales {
  using Exact = ExactScaling<__nv_bfloat16, kFormat>;
  static constexpr int kLo = Exact::Max(Exact::kMinScale, 64 - Exact::kCodeMinExponent);
  static constexpr int kHi = Exact::Min(Exact::kMaxScale, 183 - (Exact::kCodeMaxExponent + 1));
  static_assert(kLo < 127 && kHi > 127);
  static constexpr uint32_t kFactorOffset = Exact::kBiasGap + Exact::kOut.bias - 127;

  __device__ static bool InRange(uint32_t e) { return e - kLo <= static_cast<uint32_t>(kHi - kLo); }
  // Two bf16 factors 2^(e - 127) relative to Exact's code encoding, for two codes of scale e.
  __device__ static uint32_t Factor2(uint32_t e) { return Exact::FactorBits(e) * 0x00010001u; }

  // The factors of 4 codes with a scale each (scale byte j for code j): two bf16x2 words
  // (codes 0, 1 and 2, 3) for Exact::Convert; returns the byte mask of the codes whose scale
  // is outside the range (those get the factor 1: exact for zero codes only).
  __device__ static uint32_t Factors4(uint32_t scales, uint32_t* factors) {
    uint32_t lane_masks[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Two scales in 16-bit lanes; a lane's bit 15: above kHi, or (inverted) not below kLo.
      const uint32_t lanes = __byte_perm(scales, 0, h == 0 ? 0x4140 : 0x4342);
      const uint32_t above = lanes + (0x7FFFu - kHi) * 0x00010001u;
      const uint32_t not_below = lanes + (0x8000u - kLo) * 0x00010001u;
      lane_masks[h] = (((above | ~not_below) & 0x80008000u) >> 15) * 0xFFFFu;
      const uint32_t e = (lanes & ~lane_masks[h]) | (127u * 0x00010001u & lane_masks[h]);
      factors[h] = (e + kFactorOffset * 0x00010001u) << Exact::kOut.mantissa_bits;
    }
    return __byte_perm(lane_masks[0], lane_masks[1], 0x6420);  // code j: lane j % 2 of mask j / 2
  }
};

// Whether any of 4 scale bytes is the NaN scale 0xFF (a zero byte of ~scales).
__device__ inline bool AnyNanScale(uint32_t scales) {
  return ((~scales - 0x01010101u) & scales & 0x80808080u) != 0;
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_BF16_FAST_SCALES_CUH_
