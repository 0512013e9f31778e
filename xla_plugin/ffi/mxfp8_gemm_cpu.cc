// CPU handlers of the fused MXFP8 grouped GEMMs: decode, then the portable kernel.
#include <cstring>

#include "xla_plugin/common/debug_poison.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_gemm_decode.h"
#include "xla_plugin/kernels/cpu/mxfp8_gemm_cpu.h"

namespace jgg {
namespace {

ffi::Error Mxfp8RaggedMCpu(ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales,
                           ffi::AnyBuffer rhs, ffi::Buffer<ffi::U8> rhs_scales,
                           ffi::Buffer<ffi::S32> group_sizes, ffi::Buffer<ffi::S32> lhs_group_sizes,
                           ffi::Result<ffi::AnyBuffer> out, bool lhs_grouped,
                           bool rhs_transposed) {
  auto call = DecodeMxfp8RaggedM(lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes,
                                 out, lhs_grouped, rhs_transposed);
  if (call.has_error()) return call.error();
  if (PoisonOutputs()) std::memset(out->untyped_data(), kPoisonByte, out->size_bytes());
  cpu::Mxfp8RaggedM(call->problem, call->operands);
  return ffi::Error::Success();
}

ffi::Error Mxfp8RaggedMCpuV1(ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales,
                             ffi::AnyBuffer rhs, ffi::Buffer<ffi::U8> rhs_scales,
                             ffi::Buffer<ffi::S32> group_sizes,
                             ffi::Buffer<ffi::S32> lhs_group_sizes,
                             ffi::Result<ffi::AnyBuffer> out, bool lhs_grouped) {
  return Mxfp8RaggedMCpu(lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes, out,
                         lhs_grouped, /*rhs_transposed=*/false);
}

ffi::Error Mxfp8RaggedKCpu(ffi::AnyBuffer lhs, ffi::Buffer<ffi::U8> lhs_scales,
                           ffi::AnyBuffer rhs, ffi::Buffer<ffi::U8> rhs_scales,
                           ffi::Buffer<ffi::S32> group_sizes, ffi::Buffer<ffi::S32> lhs_group_sizes,
                           ffi::Buffer<ffi::S32> rhs_group_sizes,
                           ffi::Result<ffi::AnyBuffer> out) {
  auto call = DecodeMxfp8RaggedK(lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes,
                                 rhs_group_sizes, out);
  if (call.has_error()) return call.error();
  if (PoisonOutputs()) std::memset(out->untyped_data(), kPoisonByte, out->size_bytes());
  cpu::Mxfp8RaggedK(call->problem, call->operands);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8RaggedMCpu, jgg::Mxfp8RaggedMCpuV1,
                              jgg::BindMxfp8RaggedMOperandsV1(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8RaggedMV2Cpu, jgg::Mxfp8RaggedMCpu,
                              jgg::BindMxfp8RaggedMOperandsV2(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8RaggedKCpu, jgg::Mxfp8RaggedKCpu,
                              jgg::BindMxfp8RaggedKOperands(xla::ffi::Ffi::Bind()));
