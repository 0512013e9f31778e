// Decodes and validates the buffers of a ragged GEMM call into a problem
// description. Shared by the CPU and CUDA handlers so both accept exactly the
// same calls. Python checks everything at trace time already; these checks
// guard against a hand-written custom call and name the offending operand.
#ifndef JGG_XLA_PLUGIN_FFI_RAGGED_DECODE_H_
#define JGG_XLA_PLUGIN_FFI_RAGGED_DECODE_H_

#include <string>
#include <utility>

#include "xla/ffi/api/ffi.h"
#include "xla_plugin/common/ragged_problem.h"
#include "xla_plugin/common/workspace.h"

namespace jgg {

namespace ffi = ::xla::ffi;

inline ffi::ErrorOr<ElementType> DecodeElementType(ffi::DataType t, const char* operand) {
  switch (t) {
    case ffi::DataType::F32: return ElementType::kF32;
    case ffi::DataType::BF16: return ElementType::kBF16;
    case ffi::DataType::F16: return ElementType::kF16;
    default:
      return ffi::Error::InvalidArgument(std::string(operand) +
                                         ": element type must be f32, bf16 or f16");
  }
}

inline std::string ShapeMismatch(const char* operand, const char* expected) {
  return std::string(operand) + ": expected shape " + expected;
}

template <typename Dims>
bool HasRank(const Dims& dims, size_t rank) { return dims.size() == rank; }

// What both ops decode alike: group metadata, workspace, element types, pointers.
struct CommonCall {
  ElementType in_type, out_type;
  int64_t num_global_groups;
  RaggedOperands operands;
};

inline ffi::ErrorOr<CommonCall> DecodeCommon(ffi::AnyBuffer lhs, ffi::AnyBuffer rhs,
                                             ffi::Buffer<ffi::S32> group_sizes,
                                             ffi::Buffer<ffi::S32> group_offset,
                                             ffi::Result<ffi::AnyBuffer> out,
                                             ffi::Result<ffi::Buffer<ffi::U8>> workspace,
                                             int64_t batch, int64_t num_local_groups) {
  if (lhs.element_type() != rhs.element_type())
    return ffi::Error::InvalidArgument("rhs: element type must equal lhs's");
  const auto gs = group_sizes.dimensions();
  if (!HasRank(gs, 2) || gs[0] != batch)
    return ffi::Error::InvalidArgument(ShapeMismatch("group_sizes", "[batch, num_groups]"));
  if (group_offset.element_count() != 1)
    return ffi::Error::InvalidArgument(ShapeMismatch("group_offset", "[1]"));
  const auto workspace_bytes = static_cast<int64_t>(workspace->element_count());
  if (workspace_bytes < RequiredRaggedWorkspaceBytes(batch, num_local_groups))
    return ffi::Error::InvalidArgument("workspace: smaller than workspace_bytes()");
  auto in_type = DecodeElementType(lhs.element_type(), "lhs");
  if (in_type.has_error()) return in_type.error();
  auto out_type = DecodeElementType(out->element_type(), "out");
  if (out_type.has_error()) return out_type.error();
  return CommonCall{
      in_type.value(), out_type.value(), gs[1],
      RaggedOperands{lhs.untyped_data(), rhs.untyped_data(), group_sizes.typed_data(),
                     group_offset.typed_data(), out->untyped_data(), workspace->untyped_data(),
                     workspace_bytes}};
}

struct DecodedRaggedM {
  RaggedMProblem problem;
  RaggedOperands operands;
};

inline ffi::ErrorOr<DecodedRaggedM> DecodeRaggedM(
    ffi::AnyBuffer lhs, ffi::AnyBuffer rhs, ffi::Buffer<ffi::S32> group_sizes,
    ffi::Buffer<ffi::S32> group_offset, ffi::Result<ffi::AnyBuffer> out,
    ffi::Result<ffi::Buffer<ffi::U8>> workspace, bool rhs_transposed) {
  const auto l = lhs.dimensions(), r = rhs.dimensions(), o = out->dimensions();
  if (!HasRank(l, 3)) return ffi::Error::InvalidArgument(ShapeMismatch("lhs", "[B, M, K]"));
  const int64_t batch = l[0], rows = l[1], k = l[2];
  const char* rhs_shape = rhs_transposed ? "[G, B, N, K]" : "[G, B, K, N]";
  if (!HasRank(r, 4) || r[1] != batch || r[rhs_transposed ? 3 : 2] != k)
    return ffi::Error::InvalidArgument(ShapeMismatch("rhs", rhs_shape));
  const int64_t groups = r[0], n = r[rhs_transposed ? 2 : 3];
  if (!HasRank(o, 3) || o[0] != batch || o[1] != rows || o[2] != n)
    return ffi::Error::InvalidArgument(ShapeMismatch("out", "[B, M, N]"));
  auto common = DecodeCommon(lhs, rhs, group_sizes, group_offset, out, workspace, batch, groups);
  if (common.has_error()) return common.error();
  return DecodedRaggedM{RaggedMProblem{batch, rows, k, n, groups, common->num_global_groups,
                                       rhs_transposed, common->in_type, common->out_type},
                        common->operands};
}

struct DecodedRaggedK {
  RaggedKProblem problem;
  RaggedOperands operands;
};

inline ffi::ErrorOr<DecodedRaggedK> DecodeRaggedK(
    ffi::AnyBuffer lhs, ffi::AnyBuffer rhs, ffi::Buffer<ffi::S32> group_sizes,
    ffi::Buffer<ffi::S32> group_offset, ffi::Result<ffi::AnyBuffer> out,
    ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  const auto l = lhs.dimensions(), r = rhs.dimensions(), o = out->dimensions();
  if (!HasRank(l, 3)) return ffi::Error::InvalidArgument(ShapeMismatch("lhs", "[B, R, P]"));
  const int64_t batch = l[0], rows = l[1], p = l[2];
  if (!HasRank(r, 3) || r[0] != batch || r[1] != rows)
    return ffi::Error::InvalidArgument(ShapeMismatch("rhs", "[B, R, N]"));
  const int64_t n = r[2];
  if (!HasRank(o, 4) || o[1] != batch || o[2] != p || o[3] != n)
    return ffi::Error::InvalidArgument(ShapeMismatch("out", "[G, B, P, N]"));
  const int64_t groups = o[0];
  auto common = DecodeCommon(lhs, rhs, group_sizes, group_offset, out, workspace, batch, groups);
  if (common.has_error()) return common.error();
  return DecodedRaggedK{RaggedKProblem{batch, rows, p, n, groups, common->num_global_groups,
                                       common->in_type, common->out_type},
                        common->operands};
}

// The operands every ragged GEMM handler binds, in order: lhs, rhs,
// group_sizes, group_offset -> out, workspace. Backends prepend their context.
template <typename Binding>
auto BindRaggedOperands(Binding binding) {
  return std::move(binding).template Arg<ffi::AnyBuffer>()  // lhs
      .template Arg<ffi::AnyBuffer>()            // rhs
      .template Arg<ffi::Buffer<ffi::S32>>()     // group_sizes
      .template Arg<ffi::Buffer<ffi::S32>>()     // group_offset
      .template Ret<ffi::AnyBuffer>()            // out
      .template Ret<ffi::Buffer<ffi::U8>>();     // workspace
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_FFI_RAGGED_DECODE_H_
