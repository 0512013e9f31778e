// Decodes and validates the buffers of the fused MXFP8 grouped GEMM calls (CPU and CUDA
// handlers alike). Python checks all of this at trace time; these checks guard against a
// hand-written custom call and name the operand.
#ifndef JGG_XLA_PLUGIN_FFI_MXFP8_GEMM_DECODE_H_
#define JGG_XLA_PLUGIN_FFI_MXFP8_GEMM_DECODE_H_

#include <cstdint>
#include <utility>

#include "xla/ffi/api/ffi.h"
#include "xla_plugin/common/mxfp8_gemm_problem.h"
#include "xla_plugin/ffi/mxfp8_decode.h"
#include "xla_plugin/ffi/ragged_decode.h"

namespace jgg {

struct DecodedMxfp8RaggedM {
  mxfp8::RaggedMProblem problem;
  mxfp8::RaggedMOperands operands;
};

inline ffi::ErrorOr<DecodedMxfp8RaggedM> DecodeMxfp8RaggedM(
    ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
    ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
    ffi::Buffer<ffi::S32> lhs_group_sizes, ffi::Result<ffi::AnyBuffer> out, bool lhs_grouped,
    bool rhs_transposed) {
  const auto l = lhs.dimensions(), r = rhs.dimensions(), gs = group_sizes.dimensions();
  const auto lgs = lhs_group_sizes.dimensions();
  if (!HasRank(l, 2)) return ffi::Error::InvalidArgument(ShapeMismatch("lhs", "[M, K]"));
  if (!HasRank(r, 3) || r[rhs_transposed ? 2 : 1] != l[1])
    return ffi::Error::InvalidArgument(ShapeMismatch(
        "rhs", rhs_transposed ? "[G, N, K] with lhs's K" : "[G, K, N] with lhs's K"));
  const int64_t n = r[rhs_transposed ? 1 : 2];
  if (!HasRank(gs, 1) || gs[0] != r[0])
    return ffi::Error::InvalidArgument(ShapeMismatch("group_sizes", "[G]"));
  if (!HasRank(lgs, 1) || (!lhs_grouped && lgs[0] != 0))
    return ffi::Error::InvalidArgument(
        ShapeMismatch("lhs_group_sizes", "[lhs groups] ([0] unless lhs_grouped)"));
  const auto o = out->dimensions();
  if (!HasRank(o, 2) || o[0] != l[0] || o[1] != n)
    return ffi::Error::InvalidArgument(ShapeMismatch("out", "[M, N]"));
  auto types = DecodeGemmElementTypes(lhs.element_type(), rhs.element_type(), out->element_type());
  if (types.has_error()) return types.error();
  const mxfp8::RaggedMProblem problem{
      l[0], l[1], n, r[0], types->lhs, types->rhs, lhs_grouped, lgs[0], types->out,
      rhs_transposed};
  if (static_cast<int64_t>(lhs_scales.element_count()) != mxfp8::LhsScaleBytes(problem))
    return ffi::Error::InvalidArgument("lhs_scales: expected mxfp8_scale_bytes() elements");
  if (static_cast<int64_t>(rhs_scales.element_count()) != mxfp8::RhsScaleBytes(problem))
    return ffi::Error::InvalidArgument("rhs_scales: expected mxfp8_scale_bytes() elements");
  return DecodedMxfp8RaggedM{
      problem, {static_cast<const uint8_t*>(lhs.untyped_data()), lhs_scales.typed_data(),
                static_cast<const uint8_t*>(rhs.untyped_data()), rhs_scales.typed_data(),
                group_sizes.typed_data(), lhs_group_sizes.typed_data(), out->untyped_data()}};
}

// lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes -> out; lhs_grouped (_v1),
// and rhs_transposed (_v2; _v1 calls are the forward orientation).
template <typename Binding>
auto BindMxfp8RaggedMOperandsV1(Binding&& binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // lhs data [M, K]
      .template Arg<ffi::Buffer<ffi::U8>>()                 // lhs rowwise scales
      .template Arg<ffi::AnyBuffer>()                       // rhs data [G, K, N] / [G, N, K]
      .template Arg<ffi::Buffer<ffi::U8>>()                 // rhs scales along K
      .template Arg<ffi::Buffer<ffi::S32>>()                // group_sizes [G]
      .template Arg<ffi::Buffer<ffi::S32>>()                // lhs_group_sizes
      .template Ret<ffi::AnyBuffer>()                       // out [M, N]
      .template Attr<bool>("lhs_grouped");
}

template <typename Binding>
auto BindMxfp8RaggedMOperandsV2(Binding&& binding) {
  return BindMxfp8RaggedMOperandsV1(std::move(binding)).template Attr<bool>("rhs_transposed");
}

struct DecodedMxfp8RaggedK {
  mxfp8::RaggedKProblem problem;
  mxfp8::RaggedKOperands operands;
};

inline ffi::ErrorOr<DecodedMxfp8RaggedK> DecodeMxfp8RaggedK(
    ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
    ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
    ffi::Buffer<ffi::S32> lhs_group_sizes, ffi::Buffer<ffi::S32> rhs_group_sizes,
    ffi::Result<ffi::AnyBuffer> out) {
  const auto l = lhs.dimensions(), r = rhs.dimensions(), gs = group_sizes.dimensions();
  if (!HasRank(l, 2)) return ffi::Error::InvalidArgument(ShapeMismatch("lhs", "[M, K]"));
  if (!HasRank(r, 2) || r[0] != l[0])
    return ffi::Error::InvalidArgument(ShapeMismatch("rhs", "[M, N] with lhs's M"));
  if (!HasRank(gs, 1)) return ffi::Error::InvalidArgument(ShapeMismatch("group_sizes", "[G]"));
  const int64_t groups = gs[0];
  for (auto [name, sizes] : {std::pair{"lhs_group_sizes", lhs_group_sizes.dimensions()},
                             std::pair{"rhs_group_sizes", rhs_group_sizes.dimensions()}}) {
    if (!HasRank(sizes, 1) || sizes[0] != groups)
      return ffi::Error::InvalidArgument(ShapeMismatch(name, "[G], as group_sizes"));
  }
  const auto o = out->dimensions();
  if (!HasRank(o, 3) || o[0] != groups || o[1] != l[1] || o[2] != r[1])
    return ffi::Error::InvalidArgument(ShapeMismatch("out", "[G, K, N]"));
  auto types = DecodeGemmElementTypes(lhs.element_type(), rhs.element_type(), out->element_type());
  if (types.has_error()) return types.error();
  const mxfp8::RaggedKProblem problem{l[0], l[1], r[1], groups, types->lhs, types->rhs,
                                      types->out};
  if (static_cast<int64_t>(lhs_scales.element_count()) != mxfp8::ColwiseScaleBytes(problem, l[1]))
    return ffi::Error::InvalidArgument("lhs_scales: expected mxfp8_scale_bytes() elements");
  if (static_cast<int64_t>(rhs_scales.element_count()) != mxfp8::ColwiseScaleBytes(problem, r[1]))
    return ffi::Error::InvalidArgument("rhs_scales: expected mxfp8_scale_bytes() elements");
  return DecodedMxfp8RaggedK{
      problem, {static_cast<const uint8_t*>(lhs.untyped_data()), lhs_scales.typed_data(),
                static_cast<const uint8_t*>(rhs.untyped_data()), rhs_scales.typed_data(),
                group_sizes.typed_data(), lhs_group_sizes.typed_data(),
                rhs_group_sizes.typed_data(), out->untyped_data()}};
}

// lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes, rhs_group_sizes -> out.
template <typename Binding>
auto BindMxfp8RaggedKOperands(Binding&& binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // lhs colwise data [M, K]
      .template Arg<ffi::Buffer<ffi::U8>>()                 // lhs colwise scales
      .template Arg<ffi::AnyBuffer>()                       // rhs colwise data [M, N]
      .template Arg<ffi::Buffer<ffi::U8>>()                 // rhs colwise scales
      .template Arg<ffi::Buffer<ffi::S32>>()                // group_sizes [G]
      .template Arg<ffi::Buffer<ffi::S32>>()                // lhs_group_sizes [G]
      .template Arg<ffi::Buffer<ffi::S32>>()                // rhs_group_sizes [G]
      .template Ret<ffi::AnyBuffer>();                      // out [G, K, N]
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_FFI_MXFP8_GEMM_DECODE_H_
