// CPU handlers of the ragged GEMMs: decode, then run the portable kernels.
#include <cstring>

#include "xla_plugin/common/debug_poison.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/ragged_decode.h"
#include "xla_plugin/kernels/cpu/ragged_dot_cpu.h"

namespace jgg {
namespace {

void MaybePoison(ffi::Result<ffi::AnyBuffer>& out) {
  if (PoisonOutputs()) std::memset(out->untyped_data(), kPoisonByte, out->size_bytes());
}

ffi::Error RaggedMCpu(ffi::AnyBuffer lhs, ffi::AnyBuffer rhs, ffi::Buffer<ffi::S32> group_sizes,
                      ffi::Buffer<ffi::S32> group_offset, ffi::Result<ffi::AnyBuffer> out,
                      ffi::Result<ffi::Buffer<ffi::U8>> workspace, bool rhs_transposed) {
  auto call = DecodeRaggedM(lhs, rhs, group_sizes, group_offset, out, workspace, rhs_transposed);
  if (call.has_error()) return call.error();
  MaybePoison(out);
  cpu::RaggedM(call->problem, call->operands);
  return ffi::Error::Success();
}

ffi::Error RaggedKCpu(ffi::AnyBuffer lhs, ffi::AnyBuffer rhs, ffi::Buffer<ffi::S32> group_sizes,
                      ffi::Buffer<ffi::S32> group_offset, ffi::Result<ffi::AnyBuffer> out,
                      ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  auto call = DecodeRaggedK(lhs, rhs, group_sizes, group_offset, out, workspace);
  if (call.has_error()) return call.error();
  MaybePoison(out);
  cpu::RaggedK(call->problem, call->operands);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(JggRaggedMCpu, jgg::RaggedMCpu,
                              jgg::BindRaggedOperands(xla::ffi::Ffi::Bind())
                                  .Attr<bool>("rhs_transposed"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggRaggedKCpu, jgg::RaggedKCpu,
                              jgg::BindRaggedOperands(xla::ffi::Ffi::Bind()));
