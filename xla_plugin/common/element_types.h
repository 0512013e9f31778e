// Element types the GEMM handlers accept, decoupled from XLA's enum so the
// kernels do not depend on the FFI headers.
#ifndef JGG_XLA_PLUGIN_COMMON_ELEMENT_TYPES_H_
#define JGG_XLA_PLUGIN_COMMON_ELEMENT_TYPES_H_

#include <cstdint>
#include <cstring>

#include "xla_plugin/common/ragged_layout.h"

namespace jgg {

enum class ElementType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline const char* ElementTypeName(ElementType t) {
  switch (t) {
    case ElementType::kF32: return "f32";
    case ElementType::kBF16: return "bf16";
    case ElementType::kF16: return "f16";
  }
  return "?";
}

// bfloat16 <-> float on raw bits: exact widening; narrowing rounds to nearest
// even and keeps NaN a (quiet) NaN, as every framework does.
JGG_HOST_DEVICE inline float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  memcpy(&out, &wide, sizeof(out));
  return out;
}

JGG_HOST_DEVICE inline uint16_t FloatToBf16Bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_ELEMENT_TYPES_H_
