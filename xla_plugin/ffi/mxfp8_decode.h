// Decodes and validates the buffers of the grouped MXFP8 quantize / dequantize calls. Shared by
// the CPU and CUDA handlers so both accept exactly the same calls. Python checks everything at
// trace time already; these checks guard against a hand-written custom call and name the operand.
#ifndef JGG_XLA_PLUGIN_FFI_MXFP8_DECODE_H_
#define JGG_XLA_PLUGIN_FFI_MXFP8_DECODE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "xla/ffi/api/ffi.h"
#include "xla_plugin/common/mxfp8_problem.h"
#include "xla_plugin/ffi/ragged_decode.h"

namespace jgg {

inline ffi::ErrorOr<mxfp8::Fp8Format> DecodeFp8Format(ffi::DataType t, const char* operand) {
  switch (t) {
    case ffi::DataType::F8E4M3FN: return mxfp8::Fp8Format::kE4M3;
    case ffi::DataType::F8E5M2: return mxfp8::Fp8Format::kE5M2;
    default:
      return ffi::Error::InvalidArgument(std::string(operand) +
                                         ": element type must be f8e4m3fn or f8e5m2");
  }
}

// The element types of an MXFP8 GEMM call: each operand's fp8 format and the result type.
struct GemmElementTypes {
  mxfp8::Fp8Format lhs, rhs;
  ElementType out;
};

inline ffi::ErrorOr<GemmElementTypes> DecodeGemmElementTypes(ffi::DataType lhs, ffi::DataType rhs,
                                                             ffi::DataType out) {
  auto lhs_format = DecodeFp8Format(lhs, "lhs");
  if (lhs_format.has_error()) return lhs_format.error();
  auto rhs_format = DecodeFp8Format(rhs, "rhs");
  if (rhs_format.has_error()) return rhs_format.error();
  auto out_type = DecodeElementType(out, "out");
  if (out_type.has_error()) return out_type.error();
  return GemmElementTypes{lhs_format.value(), rhs_format.value(), out_type.value()};
}

// The static shape of a call from x (or the data) and group_sizes, per layout. A stack may
// come as its tile view [G, Rt, Ct, r, c] (python/jax_grouped_gemm/mxfp8/tile_view.py): the
// bytes of a row-major [G, Rt * r, Ct * c] stack, every buffer leading with (G, Rt, Ct) so that
// XLA can split the call along groups and tiles; a varying_both slot is one tile
// (group_sizes [G, 1, 1, 2]).
inline ffi::ErrorOr<mxfp8::GroupedShape> DecodeGroupedShape(ffi::AnyBuffer x,
                                                            ffi::Buffer<ffi::S32> group_sizes,
                                                            int32_t layout, const char* x_name) {
  using mxfp8::GroupedLayout;
  if (layout < 0 || layout > 3)
    return ffi::Error::InvalidArgument("layout: must be 0 (same dims), 1 (varying first), "
                                       "2 (varying last) or 3 (varying both)");
  const auto kind = static_cast<GroupedLayout>(layout);
  const auto d = x.dimensions();
  const auto gs = group_sizes.dimensions();
  const bool tiled = HasRank(d, 5);
  const auto stack = [&]() -> mxfp8::GroupedShape {
    return tiled ? mxfp8::GroupedShape{kind, d[0], d[1] * d[3], d[2] * d[4]}
                 : mxfp8::GroupedShape{kind, d[0], d[1], d[2]};
  };
  switch (kind) {
    case GroupedLayout::kSameDims:
      if (!HasRank(d, 3) && !tiled)
        return ffi::Error::InvalidArgument(ShapeMismatch(x_name, "[G, R, C] or [G, Rt, Ct, r, c]"));
      return stack();
    case GroupedLayout::kVaryingFirst:
    case GroupedLayout::kVaryingLast:
      if (!HasRank(d, 2)) return ffi::Error::InvalidArgument(ShapeMismatch(x_name, "[R, C]"));
      if (!HasRank(gs, 1)) return ffi::Error::InvalidArgument(ShapeMismatch("group_sizes", "[G]"));
      return mxfp8::GroupedShape{kind, gs[0], d[0], d[1]};
    case GroupedLayout::kVaryingBoth: {
      const bool slots = HasRank(d, 3) && HasRank(gs, 2) && gs[0] == d[0] && gs[1] == 2;
      const bool tile_slots = tiled && d[1] == 1 && d[2] == 1 && HasRank(gs, 4) &&
                              gs[0] == d[0] && gs[1] == 1 && gs[2] == 1 && gs[3] == 2;
      if (!slots && !tile_slots)
        return ffi::Error::InvalidArgument(ShapeMismatch(
            "x, group_sizes", "[G, R, C] and [G, 2], or [G, 1, 1, R, C] and [G, 1, 1, 2]"));
      return stack();
    }
  }
  return ffi::Error::InvalidArgument("layout: unknown");
}

template <typename Dims, typename OtherDims>
bool SameDims(const Dims& a, const OtherDims& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// One orientation's outputs: (data like x, scales of scale_bytes) when requested, else empty.
inline ffi::Error CheckOrientation(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer>& data,
                                   ffi::Result<ffi::Buffer<ffi::U8>>& scales, bool requested,
                                   int64_t scale_bytes, const char* data_name,
                                   const char* scales_name) {
  if (!requested) {
    if (data->element_count() != 0 || scales->element_count() != 0)
      return ffi::Error::InvalidArgument(std::string(data_name) +
                                         ": must be empty when not requested");
    return ffi::Error::Success();
  }
  if (!SameDims(data->dimensions(), x.dimensions()))
    return ffi::Error::InvalidArgument(std::string(data_name) + ": expected the shape of x");
  if (static_cast<int64_t>(scales->element_count()) != scale_bytes)
    return ffi::Error::InvalidArgument(std::string(scales_name) +
                                       ": expected mxfp8_scale_bytes() elements");
  return ffi::Error::Success();
}

struct DecodedMxfp8Quantize {
  mxfp8::QuantizeProblem problem;
  mxfp8::QuantizeOperands operands;
};

inline ffi::ErrorOr<DecodedMxfp8Quantize> DecodeMxfp8Quantize(
    ffi::AnyBuffer x, ffi::Buffer<ffi::S32> group_sizes, ffi::Result<ffi::AnyBuffer> row_data,
    ffi::Result<ffi::Buffer<ffi::U8>> row_scales, ffi::Result<ffi::AnyBuffer> col_data,
    ffi::Result<ffi::Buffer<ffi::U8>> col_scales, int32_t layout, bool rowwise, bool colwise,
    bool swizzled) {
  auto shape = DecodeGroupedShape(x, group_sizes, layout, "x");
  if (shape.has_error()) return shape.error();
  if (!rowwise && !colwise)
    return ffi::Error::InvalidArgument("rowwise, colwise: at least one must be true");
  auto in_type = DecodeElementType(x.element_type(), "x");
  if (in_type.has_error()) return in_type.error();
  const int64_t scale_bytes = mxfp8::ScaleBufferBytes(shape.value());
  if (auto e = CheckOrientation(x, row_data, row_scales, rowwise, scale_bytes, "rowwise data",
                                "rowwise scale_inv");
      e.failure())
    return e;
  if (auto e = CheckOrientation(x, col_data, col_scales, colwise, scale_bytes, "colwise data",
                                "colwise scale_inv");
      e.failure())
    return e;
  auto format = DecodeFp8Format(rowwise ? row_data->element_type() : col_data->element_type(),
                                rowwise ? "rowwise data" : "colwise data");
  if (format.has_error()) return format.error();
  if (rowwise && colwise && row_data->element_type() != col_data->element_type())
    return ffi::Error::InvalidArgument("colwise data: element type must equal rowwise data's");
  auto ptr = [](auto& buffer, bool requested) {
    return requested ? static_cast<uint8_t*>(buffer->untyped_data()) : nullptr;
  };
  return DecodedMxfp8Quantize{
      mxfp8::QuantizeProblem{shape.value(), in_type.value(), format.value(), rowwise, colwise,
                             swizzled, scale_bytes},
      mxfp8::QuantizeOperands{x.untyped_data(), group_sizes.typed_data(), ptr(row_data, rowwise),
                              ptr(row_scales, rowwise), ptr(col_data, colwise),
                              ptr(col_scales, colwise)}};
}

struct DecodedMxfp8Dequantize {
  mxfp8::DequantizeProblem problem;
  mxfp8::DequantizeOperands operands;
};

inline ffi::ErrorOr<DecodedMxfp8Dequantize> DecodeMxfp8Dequantize(
    ffi::AnyBuffer data, ffi::Buffer<ffi::U8> scales, ffi::Buffer<ffi::S32> group_sizes,
    ffi::Result<ffi::AnyBuffer> out, int32_t layout, bool colwise, bool swizzled) {
  auto shape = DecodeGroupedShape(data, group_sizes, layout, "data");
  if (shape.has_error()) return shape.error();
  auto format = DecodeFp8Format(data.element_type(), "data");
  if (format.has_error()) return format.error();
  auto out_type = DecodeElementType(out->element_type(), "out");
  if (out_type.has_error()) return out_type.error();
  if (!SameDims(out->dimensions(), data.dimensions()))
    return ffi::Error::InvalidArgument(ShapeMismatch("out", "the shape of data"));
  const int64_t scale_bytes = mxfp8::ScaleBufferBytes(shape.value());
  if (static_cast<int64_t>(scales.element_count()) != scale_bytes)
    return ffi::Error::InvalidArgument("scale_inv: expected mxfp8_scale_bytes() elements");
  return DecodedMxfp8Dequantize{
      mxfp8::DequantizeProblem{shape.value(), format.value(), colwise, swizzled, out_type.value(),
                               scale_bytes},
      mxfp8::DequantizeOperands{static_cast<const uint8_t*>(data.untyped_data()),
                                scales.typed_data(), group_sizes.typed_data(),
                                out->untyped_data()}};
}

// Bytes of the workspace result of the _v2 targets: the kernels' job counter (zeroed by the
// handler before the launch). _v1 targets have no workspace (a static job split).
inline constexpr int64_t kMxfp8WorkspaceBytes = 8;

// The buffers and attributes every quantize handler binds, in order: x, group_sizes ->
// rowwise data, rowwise scales, colwise data, colwise scales[, workspace (_v2)]; layout,
// rowwise, colwise, swizzled. (Bindings are built as one chain of temporaries: they cannot be
// moved once named.)
template <typename Binding>
auto BindMxfp8QuantizeBuffers(Binding&& binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // x
      .template Arg<ffi::Buffer<ffi::S32>>()                // group_sizes
      .template Ret<ffi::AnyBuffer>()                       // rowwise data
      .template Ret<ffi::Buffer<ffi::U8>>()                 // rowwise scale_inv
      .template Ret<ffi::AnyBuffer>()                       // colwise data
      .template Ret<ffi::Buffer<ffi::U8>>();                // colwise scale_inv
}

template <typename Binding>
auto BindMxfp8QuantizeAttrs(Binding&& binding) {
  return std::move(binding).template Attr<int32_t>("layout")
      .template Attr<bool>("rowwise")
      .template Attr<bool>("colwise")
      .template Attr<bool>("swizzled");
}

template <bool kWithWorkspace, typename Binding>
auto BindMxfp8QuantizeOperands(Binding&& binding) {
  if constexpr (kWithWorkspace) {
    return BindMxfp8QuantizeAttrs(BindMxfp8QuantizeBuffers(std::move(binding))
                                      .template Ret<ffi::Buffer<ffi::U8>>());  // workspace
  } else {
    return BindMxfp8QuantizeAttrs(BindMxfp8QuantizeBuffers(std::move(binding)));
  }
}

// data, scale_inv, group_sizes -> out[, workspace (_v2)]; layout, colwise, swizzled.
template <typename Binding>
auto BindMxfp8DequantizeBuffers(Binding&& binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // data
      .template Arg<ffi::Buffer<ffi::U8>>()                 // scale_inv
      .template Arg<ffi::Buffer<ffi::S32>>()                // group_sizes
      .template Ret<ffi::AnyBuffer>();                      // out
}

template <typename Binding>
auto BindMxfp8DequantizeAttrs(Binding&& binding) {
  return std::move(binding).template Attr<int32_t>("layout")
      .template Attr<bool>("colwise")
      .template Attr<bool>("swizzled");
}

template <bool kWithWorkspace, typename Binding>
auto BindMxfp8DequantizeOperands(Binding&& binding) {
  if constexpr (kWithWorkspace) {
    return BindMxfp8DequantizeAttrs(BindMxfp8DequantizeBuffers(std::move(binding))
                                        .template Ret<ffi::Buffer<ffi::U8>>());  // workspace
  } else {
    return BindMxfp8DequantizeAttrs(BindMxfp8DequantizeBuffers(std::move(binding)));
  }
}

// The job counter in a _v2 workspace result, or null (a static job split) where it has no room
// for one: an empty stack's shard gets a [0, 8] workspace.
inline unsigned long long* JobCounter(ffi::Result<ffi::Buffer<ffi::U8>>& workspace) {
  if (static_cast<int64_t>(workspace->element_count()) < kMxfp8WorkspaceBytes ||
      reinterpret_cast<uintptr_t>(workspace->untyped_data()) % 8 != 0)
    return nullptr;
  return static_cast<unsigned long long*>(workspace->untyped_data());
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_FFI_MXFP8_DECODE_H_
