// The grouped MXFP8 quantize and dequantize calls every backend implements (layouts and
// scale placement: mxfp8_layout.h; element math: mxfp8_math.h).
//
//   Quantize:   x (f32 / bf16 / f16) -> rowwise data + scales (1x32 blocks along a row) and/or
//               colwise data + scales (32x1 blocks along a column); data has x's shape.
//   Dequantize: one orientation's data + scales -> f32 / bf16 / f16 of x's shape.
#ifndef JGG_XLA_PLUGIN_COMMON_MXFP8_PROBLEM_H_
#define JGG_XLA_PLUGIN_COMMON_MXFP8_PROBLEM_H_

#include <cstdint>

#include "xla_plugin/common/element_types.h"
#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_math.h"

namespace jgg::mxfp8 {

struct QuantizeProblem {
  GroupedShape shape;
  ElementType in_type;
  Fp8Format format;
  bool rowwise, colwise, swizzled;
  int64_t scale_bytes;  // of each requested orientation's buffer: ScaleBufferBytes(shape)
};

// Device (or host) pointers; the outputs of an orientation not asked for are null.
struct QuantizeOperands {
  const void* x;
  const int32_t* group_sizes;
  uint8_t* row_data;
  uint8_t* row_scales;
  uint8_t* col_data;
  uint8_t* col_scales;
  // CUDA only: zero at launch, the kernel hands out jobs from it (null: a static job split).
  unsigned long long* job_counter = nullptr;
};

struct DequantizeProblem {
  GroupedShape shape;
  Fp8Format format;
  bool colwise, swizzled;  // which orientation the data is, how its scales are laid out
  ElementType out_type;
  int64_t scale_bytes;
};

struct DequantizeOperands {
  const uint8_t* data;
  const uint8_t* scales;
  const int32_t* group_sizes;
  void* out;
  unsigned long long* job_counter = nullptr;  // as QuantizeOperands::job_counter
};

}  // namespace jgg::mxfp8

#endif  // JGG_XLA_PLUGIN_COMMON_MXFP8_PROBLEM_H_
