#include "xla_plugin/kernels/cpu/mxfp8_cpu.h"

#include <cstring>

namespace jgg::cpu {
namespace {

using mxfp8::kBlockSize;
using mxfp8::Region;
using mxfp8::ScaleMatrix;

uint32_t LoadF32Bits(const void* x, ElementType t, int64_t i) {
  switch (t) {
    case ElementType::kF32: {
      uint32_t bits;
      std::memcpy(&bits, static_cast<const uint32_t*>(x) + i, sizeof(bits));
      return bits;
    }
    case ElementType::kBF16: return mxfp8::Bf16BitsToF32Bits(static_cast<const uint16_t*>(x)[i]);
    case ElementType::kF16: return mxfp8::F16BitsToF32Bits(static_cast<const uint16_t*>(x)[i]);
  }
  return 0;
}

// Max |x| bits of a block, NaN elements ignored (TE's fmaxf semantics).
struct BlockMax {
  uint32_t bits = 0;
  void Add(uint32_t x_bits) {
    const uint32_t magnitude = x_bits & 0x7FFFFFFFu;
    if (magnitude <= 0x7F800000u && magnitude > bits) bits = magnitude;
  }
};

// Zeroes the region's capacity in `data` (fp8 zero is all-zero bits).
void ZeroCapacity(const Region& r, int64_t stride, uint8_t* data) {
  if (data == nullptr) return;
  for (int64_t i = 0; i < r.cap_rows; ++i) {
    std::memset(data + r.elem_offset + i * stride, 0, r.cap_cols);
  }
}

void QuantizeRowwise(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o,
                     const Region& r) {
  const int64_t stride = p.shape.cols;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/false);
  for (int64_t i = 0; i < r.rows; ++i) {
    for (int64_t j = 0; j < m.cols; ++j) {
      const int64_t first = r.elem_offset + i * stride + j * kBlockSize;
      const int64_t count = MinI64(kBlockSize, r.cols - j * kBlockSize);
      BlockMax amax;
      for (int64_t k = 0; k < count; ++k) amax.Add(LoadF32Bits(o.x, p.in_type, first + k));
      const uint8_t e = mxfp8::ScaleExponent(amax.bits, p.format);
      o.row_scales[r.scale_offset + mxfp8::ScaleIndex(m, false, p.swizzled, i, j)] = e;
      for (int64_t k = 0; k < count; ++k) {
        o.row_data[first + k] =
            mxfp8::QuantizeElement(LoadF32Bits(o.x, p.in_type, first + k), e, p.format);
      }
    }
  }
}

void QuantizeColwise(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o,
                     const Region& r) {
  const int64_t stride = p.shape.cols;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/true);
  for (int64_t i = 0; i < m.rows; ++i) {
    const int64_t count = MinI64(kBlockSize, r.rows - i * kBlockSize);
    for (int64_t j = 0; j < r.cols; ++j) {
      const int64_t first = r.elem_offset + i * kBlockSize * stride + j;
      BlockMax amax;
      for (int64_t k = 0; k < count; ++k) amax.Add(LoadF32Bits(o.x, p.in_type, first + k * stride));
      const uint8_t e = mxfp8::ScaleExponent(amax.bits, p.format);
      o.col_scales[r.scale_offset + mxfp8::ScaleIndex(m, true, p.swizzled, i, j)] = e;
      for (int64_t k = 0; k < count; ++k) {
        o.col_data[first + k * stride] =
            mxfp8::QuantizeElement(LoadF32Bits(o.x, p.in_type, first + k * stride), e, p.format);
      }
    }
  }
}

mxfp8::FloatFormat OutFormat(ElementType t) {
  switch (t) {
    case ElementType::kF32: return mxfp8::F32Format();
    case ElementType::kBF16: return mxfp8::Bf16Format();
    case ElementType::kF16: return mxfp8::F16Format();
  }
  return mxfp8::F32Format();
}

void StoreBits(void* out, ElementType t, int64_t i, uint32_t bits) {
  if (t == ElementType::kF32) {
    std::memcpy(static_cast<uint32_t*>(out) + i, &bits, sizeof(bits));
  } else {
    static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(bits);
  }
}

void DequantizeRegion(const mxfp8::DequantizeProblem& p, const mxfp8::DequantizeOperands& o,
                      const Region& r) {
  const int64_t stride = p.shape.cols;
  const mxfp8::FloatFormat out = OutFormat(p.out_type);
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, p.colwise);
  for (int64_t i = 0; i < r.cap_rows; ++i) {
    for (int64_t j = 0; j < r.cap_cols; ++j) {
      const int64_t idx = r.elem_offset + i * stride + j;
      uint32_t bits = 0;
      if (i < r.rows && j < r.cols) {
        const int64_t si = p.colwise ? i / kBlockSize : i, sj = p.colwise ? j : j / kBlockSize;
        const uint8_t e = o.scales[r.scale_offset + mxfp8::ScaleIndex(m, p.colwise, p.swizzled, si, sj)];
        bits = mxfp8::DequantizeElement(o.data[idx], e, p.format, out);
      }
      StoreBits(o.out, p.out_type, idx, bits);
    }
  }
}

}  // namespace

void Mxfp8Quantize(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o) {
  // Every scale byte that holds no real scale is 0: clear, then write the real ones.
  if (p.rowwise) std::memset(o.row_scales, 0, p.scale_bytes);
  if (p.colwise) std::memset(o.col_scales, 0, p.scale_bytes);
  mxfp8::ForEachRegion(p.shape, o.group_sizes, [&](const Region& r) {
    ZeroCapacity(r, p.shape.cols, p.rowwise ? o.row_data : nullptr);
    ZeroCapacity(r, p.shape.cols, p.colwise ? o.col_data : nullptr);
    if (r.rows == 0 || r.cols == 0) return;
    if (p.rowwise) QuantizeRowwise(p, o, r);
    if (p.colwise) QuantizeColwise(p, o, r);
  });
}

void Mxfp8Dequantize(const mxfp8::DequantizeProblem& p, const mxfp8::DequantizeOperands& o) {
  mxfp8::ForEachRegion(p.shape, o.group_sizes,
                       [&](const Region& r) { DequantizeRegion(p, o, r); });
}

}  // namespace jgg::cpu
