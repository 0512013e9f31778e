// CPU handler of the block-scaled MXFP8 grouped GEMM: decode, then the reference kernel.
#include <cstring>

#include "xla_plugin/common/debug_poison.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_blockscaled_decode.h"
#include "xla_plugin/kernels/cpu/mxfp8_blockscaled_cpu.h"

namespace jgg {
namespace {

ffi::Error Mxfp8BlockScaledCpu(ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales,
                               ffi::AnyBuffer rhs, ffi::Buffer<ffi::U8> rhs_scales,
                               ffi::Buffer<ffi::S32> group_sizes, ffi::Result<ffi::AnyBuffer> out,
                               ffi::Result<ffi::Buffer<ffi::U8>> workspace, int32_t gemm) {
  auto call = DecodeMxfp8BlockScaled(lhs, lhs_scales, rhs, rhs_scales, group_sizes, out,
                                     workspace, gemm);
  if (call.has_error()) return call.error();
  if (PoisonOutputs()) std::memset(out->untyped_data(), kPoisonByte, out->size_bytes());
  cpu::Mxfp8BlockScaled(call->problem, call->operands);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8BlockScaledCpu, jgg::Mxfp8BlockScaledCpu,
                              jgg::BindMxfp8BlockScaledOperands(xla::ffi::Ffi::Bind()));
