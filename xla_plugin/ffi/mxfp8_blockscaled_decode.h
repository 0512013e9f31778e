// Decodes and validates the buffers of the block-scaled MXFP8 grouped GEMM call (CPU and CUDA
// handlers alike; common/mxfp8_blockscaled_problem.h says what it computes). Python checks all
// of this at trace time; these checks guard against a hand-written custom call.
#ifndef JGG_XLA_PLUGIN_FFI_MXFP8_BLOCKSCALED_DECODE_H_
#define JGG_XLA_PLUGIN_FFI_MXFP8_BLOCKSCALED_DECODE_H_

#include <cstdint>
#include <utility>

#include "xla/ffi/api/ffi.h"
#include "xla_plugin/common/mxfp8_blockscaled_problem.h"
#include "xla_plugin/ffi/mxfp8_decode.h"
#include "xla_plugin/ffi/ragged_decode.h"

namespace jgg {

struct DecodedMxfp8BlockScaled {
  mxfp8::BlockScaledProblem problem;
  mxfp8::BlockScaledOperands operands;
};

inline ffi::ErrorOr<DecodedMxfp8BlockScaled> DecodeMxfp8BlockScaled(
    ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
    ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
    ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::Buffer<ffi::U8>> workspace, int32_t gemm) {
  using mxfp8::BlockScaledGemm;
  if (gemm < 0 || gemm > 2)
    return ffi::Error::InvalidArgument("gemm: expected 0 (forward), 1 (dgrad) or 2 (wgrad)");
  const auto kind = static_cast<BlockScaledGemm>(gemm);
  const auto l = lhs.dimensions(), r = rhs.dimensions(), gs = group_sizes.dimensions();
  const auto o = out->dimensions();
  if (!HasRank(l, 2)) return ffi::Error::InvalidArgument(ShapeMismatch("lhs", "[M, K]"));
  if (!HasRank(gs, 1)) return ffi::Error::InvalidArgument(ShapeMismatch("group_sizes", "[G]"));
  const int64_t m = l[0], k = l[1], g = gs[0];
  int64_t n = 0;
  if (kind == BlockScaledGemm::kWgrad) {
    if (!HasRank(r, 2) || r[0] != m)
      return ffi::Error::InvalidArgument(ShapeMismatch("rhs", "[M, N] with lhs's M"));
    n = r[1];
    if (!HasRank(o, 3) || o[0] != g || o[1] != k || o[2] != n)
      return ffi::Error::InvalidArgument(ShapeMismatch("out", "[G, K, N]"));
  } else {
    const bool dgrad = kind == BlockScaledGemm::kDgrad;
    if (!HasRank(r, 3) || r[0] != g || r[dgrad ? 2 : 1] != k)
      return ffi::Error::InvalidArgument(ShapeMismatch(
          "rhs", dgrad ? "[G, N, K] with lhs's K" : "[G, K, N] with lhs's K"));
    n = r[dgrad ? 1 : 2];
    if (!HasRank(o, 2) || o[0] != m || o[1] != n)
      return ffi::Error::InvalidArgument(ShapeMismatch("out", "[M, N]"));
  }
  auto types = DecodeGemmElementTypes(lhs.element_type(), rhs.element_type(), out->element_type());
  if (types.has_error()) return types.error();
  const mxfp8::BlockScaledProblem problem{kind, m, k, n, g, types->lhs, types->rhs,
                                          types->out};
  if (static_cast<int64_t>(lhs_scales.element_count()) != mxfp8::BlockScaledLhsScaleBytes(problem))
    return ffi::Error::InvalidArgument("lhs_scales: expected mxfp8_scale_bytes() elements");
  if (static_cast<int64_t>(rhs_scales.element_count()) != mxfp8::BlockScaledRhsScaleBytes(problem))
    return ffi::Error::InvalidArgument("rhs_scales: expected mxfp8_scale_bytes() elements");
  if (static_cast<int64_t>(workspace->element_count()) != mxfp8::BlockScaledWorkspaceBytes(g))
    return ffi::Error::InvalidArgument("workspace: expected mxfp8_blockscaled_workspace_bytes(G)");
  return DecodedMxfp8BlockScaled{
      problem, {static_cast<const uint8_t*>(lhs.untyped_data()), lhs_scales.typed_data(),
                static_cast<const uint8_t*>(rhs.untyped_data()), rhs_scales.typed_data(),
                group_sizes.typed_data(), out->untyped_data(), workspace->typed_data()}};
}

// lhs, lhs_scales, rhs, rhs_scales (swizzled), group_sizes -> out, workspace; gemm.
template <typename Binding>
auto BindMxfp8BlockScaledOperands(Binding&& binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // lhs codes
      .template Arg<ffi::Buffer<ffi::U8>>()                 // lhs scales
      .template Arg<ffi::AnyBuffer>()                       // rhs codes
      .template Arg<ffi::Buffer<ffi::U8>>()                 // rhs scales
      .template Arg<ffi::Buffer<ffi::S32>>()                // group_sizes [G]
      .template Ret<ffi::AnyBuffer>()                       // out
      .template Ret<ffi::Buffer<ffi::U8>>()                 // workspace
      .template Attr<int32_t>("gemm");
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_FFI_MXFP8_BLOCKSCALED_DECODE_H_
