// MXFP8 element math shared by the CPU and CUDA kernels (OCP MX v1.0, SPEC section 4).
//
// Every rounding here is done on integers, never by the FPU: XLA's CPU runtime runs our
// handlers with denormals flushed (FTZ/DAZ), which would silently change blocks whose
// values or scales touch the fp32 denormal range. The CUDA kernels use the hardware cvt
// for the elements (bit-identical by construction, checked by the GPU tests) and these
// functions for the per-block scale.
//
// Scale rule, bit-compatible with TransformerEngine:
//   amax = max |x| over the block, NaN elements ignored (TE's fmaxf / __hmax ignore NaN);
//   s    = fl32(amax * fl32(1 / max_norm))            (TE multiplies by the fp32 reciprocal);
//   e    = E8M0 of s rounded UP to a power of two: the fp32 exponent field of s, +1 when the
//          mantissa is non-zero, with TE's edge cases (s NaN -> 0xFF, Inf -> 0xFE, 0 -> 0x00,
//          fp32-denormal s <= 2^-127 -> 0x00, exponent 0xFE never rounds up to 0xFF);
//   q    = satfinite RNE(x * 2^(127 - e)); NaN elements become the canonical fp8 NaN 0x7F.
//   dequantization: x' = q * 2^(e - 127) rounded to nearest even into the output type
//          (exact for bf16/f32 unless the output underflows or overflows); scale 0xFF or a
//          NaN element give the output type's canonical quiet NaN.
#ifndef JGG_XLA_PLUGIN_COMMON_MXFP8_MATH_H_
#define JGG_XLA_PLUGIN_COMMON_MXFP8_MATH_H_

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"

namespace jgg::mxfp8 {

enum class Fp8Format : int32_t { kE4M3 = 0, kE5M2 = 1 };

// A binary floating-point format, seen as unsigned integer encodings.
struct FloatFormat {
  int total_bits;
  int mantissa_bits;
  int bias;
  uint32_t max_finite;     // magnitude bits of the largest finite value
  uint32_t on_overflow;    // magnitude bits a rounded value beyond max_finite becomes
  uint32_t canonical_nan;  // magnitude + sign bits of the NaN this library writes
};

// Overflow gives Inf for the IEEE types and saturates ("satfinite") for the fp8 elements.
JGG_HOST_DEVICE constexpr FloatFormat F32Format() {
  return {32, 23, 127, 0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u};
}
JGG_HOST_DEVICE constexpr FloatFormat Bf16Format() { return {16, 7, 127, 0x7F7Fu, 0x7F80u, 0x7FC0u}; }
JGG_HOST_DEVICE constexpr FloatFormat F16Format() { return {16, 10, 15, 0x7BFFu, 0x7C00u, 0x7E00u}; }
// E4M3 ("fn": no Inf, 0x7F/0xFF are NaN): max 448 = 0x7E. E5M2: max 57344 = 0x7B.
JGG_HOST_DEVICE constexpr FloatFormat E4m3Format() { return {8, 3, 7, 0x7Eu, 0x7Eu, 0x7Fu}; }
JGG_HOST_DEVICE constexpr FloatFormat E5m2Format() { return {8, 2, 15, 0x7Bu, 0x7Bu, 0x7Fu}; }
JGG_HOST_DEVICE constexpr FloatFormat Fp8FloatFormat(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? E4m3Format() : E5m2Format();
}

// fl32(1 / max_norm) as mantissa * 2^exponent: 1/448 = 0x3B124925, 1/57344 = 0x37924925
// (the same 24-bit mantissa, 8/7 * 2^23, rounded up).
constexpr uint64_t kMaxNormRcpMantissa = 0x924925u;
JGG_HOST_DEVICE constexpr int MaxNormRcpExponent(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? (0x76 - 150) : (0x6F - 150);
}

constexpr uint8_t kScaleNaN = 0xFF;
constexpr uint8_t kScaleInf = 0xFE;

JGG_HOST_DEVICE inline int BitLength(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(v));
#else
  return v == 0 ? 0 : 64 - __builtin_clzll(v);
#endif
}

// Round-to-nearest-even of (-1)^negative * m * 2^e into `f`; overflow per f.on_overflow.
// Exact for any 64-bit m and any e (tiny values round to a signed zero).
JGG_HOST_DEVICE inline uint32_t EncodeRne(bool negative, uint64_t m, int e, FloatFormat f) {
  const uint32_t sign = negative ? (1u << (f.total_bits - 1)) : 0u;
  if (m == 0) return sign;
  const int length = BitLength(m);
  const int top = length - 1 + e;  // the value lies in [2^top, 2^(top+1))
  const int min_normal = 1 - f.bias;
  const int max_exponent = static_cast<int>(f.max_finite >> f.mantissa_bits) - f.bias;
  if (top > max_exponent + 1) return sign | f.on_overflow;
  // Exponent of the last kept mantissa bit: fixed in the denormal range.
  const int lsb = (top < min_normal ? min_normal : top) - f.mantissa_bits;
  const int shift = lsb - e;
  uint64_t kept;
  if (shift <= 0) {
    kept = m << -shift;  // exact: fewer than mantissa_bits + 2 bits
  } else if (shift > length) {
    kept = 0;  // below half of the last bit
  } else if (shift == length) {
    kept = m > (uint64_t{1} << (length - 1)) ? 1 : 0;  // a tie rounds to the even 0
  } else {
    kept = m >> shift;
    const uint64_t rest = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (kept & 1))) ++kept;
  }
  // `kept` carries the implicit bit for normal numbers, so adding it to (biased - 1) in the
  // exponent field gives the encoding; a rounding carry moves into the exponent for free,
  // and a denormal that rounds up becomes the smallest normal the same way.
  const int biased = top < min_normal ? 0 : top + f.bias - 1;
  const uint32_t magnitude = (static_cast<uint32_t>(biased) << f.mantissa_bits) + static_cast<uint32_t>(kept);
  if (magnitude > f.max_finite) return sign | f.on_overflow;
  return sign | magnitude;
}

// A finite value as (-1)^negative * m * 2^e, or a NaN / Inf marker.
struct Unpacked {
  bool nan, inf, negative;
  uint64_t m;
  int e;
};

// IEEE-style formats (f32, bf16, f16, e5m2): exponent all ones is Inf (mantissa 0) or NaN.
JGG_HOST_DEVICE inline Unpacked UnpackIeee(uint32_t bits, FloatFormat f) {
  const uint32_t mantissa_mask = (1u << f.mantissa_bits) - 1;
  const uint32_t exponent_ones = (1u << (f.total_bits - 1 - f.mantissa_bits)) - 1;
  Unpacked u{};
  u.negative = (bits >> (f.total_bits - 1)) & 1u;
  const uint32_t exponent = (bits >> f.mantissa_bits) & exponent_ones;
  const uint32_t mantissa = bits & mantissa_mask;
  if (exponent == exponent_ones) {
    u.nan = mantissa != 0;
    u.inf = mantissa == 0;
    return u;
  }
  u.m = exponent == 0 ? mantissa : (mantissa | (mantissa_mask + 1));
  u.e = (exponent == 0 ? 1 : static_cast<int>(exponent)) - f.bias - f.mantissa_bits;
  return u;
}

JGG_HOST_DEVICE inline Unpacked UnpackFp8(uint8_t bits, Fp8Format format) {
  if (format == Fp8Format::kE5M2) return UnpackIeee(bits, E5m2Format());
  Unpacked u{};  // E4M3FN: no Inf; S.1111.111 is NaN, S.1111.110 = 448 is finite
  u.negative = bits >> 7;
  if ((bits & 0x7Fu) == 0x7Fu) {
    u.nan = true;
    return u;
  }
  const uint32_t exponent = (bits >> 3) & 0xFu, mantissa = bits & 7u;
  u.m = exponent == 0 ? mantissa : (mantissa | 8u);
  u.e = (exponent == 0 ? 1 : static_cast<int>(exponent)) - 7 - 3;
  return u;
}

// Exact widening of bf16 / f16 bits to f32 bits (integer only: safe under DAZ).
JGG_HOST_DEVICE inline uint32_t Bf16BitsToF32Bits(uint16_t bits) { return static_cast<uint32_t>(bits) << 16; }
JGG_HOST_DEVICE inline uint32_t F16BitsToF32Bits(uint16_t bits) {
  const Unpacked u = UnpackIeee(bits, F16Format());
  const uint32_t sign = u.negative ? 0x80000000u : 0u;
  if (u.nan) return sign | 0x7FC00000u | ((bits & 0x3FFu) << 13);
  if (u.inf) return sign | 0x7F800000u;
  return EncodeRne(u.negative, u.m, u.e, F32Format());
}

// The E8M0 scale exponent of a block whose amax has fp32 bits `amax_bits` (sign ignored).
JGG_HOST_DEVICE inline uint8_t ScaleExponent(uint32_t amax_bits, Fp8Format format) {
  amax_bits &= 0x7FFFFFFFu;
  if (amax_bits > 0x7F800000u) return kScaleNaN;
  if (amax_bits == 0x7F800000u) return kScaleInf;
  const Unpacked a = UnpackIeee(amax_bits, F32Format());
  // s = fl32(amax * fl32(1/max_norm)): the 48-bit product is exact, one rounding to fp32.
  const uint32_t s = EncodeRne(false, a.m * kMaxNormRcpMantissa, a.e + MaxNormRcpExponent(format),
                               F32Format());
  uint32_t exponent = s >> 23;
  const uint32_t mantissa = s & 0x7FFFFFu;
  if (mantissa > 0 && exponent != 0xFE && !(exponent == 0 && mantissa <= 0x400000u)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// 2^(127 - e) as fp32 bits: the factor the elements of a block are multiplied by before the
// cast (TE's exp2f_rcp); NaN for the NaN scale. Used by the CUDA kernels' hardware path.
JGG_HOST_DEVICE inline uint32_t ScaleReciprocalBits(uint8_t e) {
  if (e == kScaleNaN) return 0x7FFFFFFFu;
  if (e == kScaleInf) return 0x00400000u;  // 2^-127, an fp32 denormal
  return static_cast<uint32_t>(254 - e) << 23;
}

// 2^(e - 127) as fp32 bits (the dequantization factor); NaN for 0xFF, 2^-127 for e = 0.
JGG_HOST_DEVICE inline uint32_t ScaleBits(uint8_t e) {
  if (e == kScaleNaN) return 0x7FFFFFFFu;
  if (e == 0) return 0x00400000u;
  return static_cast<uint32_t>(e) << 23;
}

// One element: satfinite RNE(x * 2^(127 - e)) from the fp32 bits of x.
JGG_HOST_DEVICE inline uint8_t QuantizeElement(uint32_t x_bits, uint8_t e, Fp8Format format) {
  const FloatFormat f = Fp8FloatFormat(format);
  const Unpacked x = UnpackIeee(x_bits, F32Format());
  if (x.nan || e == kScaleNaN) return static_cast<uint8_t>(f.canonical_nan);
  const uint32_t sign = x.negative ? 0x80u : 0u;
  if (x.inf) return static_cast<uint8_t>(sign | f.max_finite);
  return static_cast<uint8_t>(EncodeRne(x.negative, x.m, x.e + 127 - static_cast<int>(e), f));
}

// One element back: RNE(q * 2^(e - 127)) as bits of `out`.
JGG_HOST_DEVICE inline uint32_t DequantizeElement(uint8_t q, uint8_t e, Fp8Format format,
                                                  FloatFormat out) {
  const Unpacked u = UnpackFp8(q, format);
  if (u.nan || e == kScaleNaN) return out.canonical_nan;
  const uint32_t sign = u.negative ? (1u << (out.total_bits - 1)) : 0u;
  if (u.inf) return sign | (out.max_finite + 1);  // an E5M2 Inf stays Inf
  return EncodeRne(u.negative, u.m, u.e + static_cast<int>(e) - 127, out);
}

}  // namespace jgg::mxfp8

#endif  // JGG_XLA_PLUGIN_COMMON_MXFP8_MATH_H_
