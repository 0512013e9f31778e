// CUDA handlers of the fused MXFP8 grouped GEMMs: decode, then one launch on XLA's stream.
// Command-buffer compatible: no host read of device data, no sync, no allocation (the kernels
// locate their groups from the device group sizes themselves).
#include <cuda_runtime_api.h>

#include "xla_plugin/ffi/cuda_status.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_gemm_decode.h"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_k_cuda.h"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_cuda.h"

namespace jgg {
namespace {

ffi::Error Mxfp8RaggedMCuda(cudaStream_t stream, ffi::AnyBuffer lhs,
                            ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
                            ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
                            ffi::Buffer<ffi::S32> lhs_group_sizes,
                            ffi::Result<ffi::AnyBuffer> out, bool lhs_grouped,
                            bool rhs_transposed) {
  auto call = DecodeMxfp8RaggedM(lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes,
                                 out, lhs_grouped, rhs_transposed);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  return FromCuda(cuda::LaunchMxfp8RaggedM(call->problem, call->operands, stream),
                  "mxfp8 ragged_m launch");
}

ffi::Error Mxfp8RaggedMCudaV1(cudaStream_t stream, ffi::AnyBuffer lhs,
                              ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
                              ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
                              ffi::Buffer<ffi::S32> lhs_group_sizes,
                              ffi::Result<ffi::AnyBuffer> out, bool lhs_grouped) {
  return Mxfp8RaggedMCuda(stream, lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes,
                          out, lhs_grouped, /*rhs_transposed=*/false);
}

ffi::Error Mxfp8RaggedKCuda(cudaStream_t stream, ffi::AnyBuffer lhs,
                            ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
                            ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
                            ffi::Buffer<ffi::S32> lhs_group_sizes,
                            ffi::Buffer<ffi::S32> rhs_group_sizes,
                            ffi::Result<ffi::AnyBuffer> out) {
  auto call = DecodeMxfp8RaggedK(lhs, lhs_scales, rhs, rhs_scales, group_sizes, lhs_group_sizes,
                                 rhs_group_sizes, out);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  return FromCuda(cuda::LaunchMxfp8RaggedK(call->problem, call->operands, stream),
                  "mxfp8 ragged_k launch");
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8RaggedMCuda, jgg::Mxfp8RaggedMCudaV1,
                              jgg::BindMxfp8RaggedMOperandsV1(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
                              {xla::ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8RaggedMV2Cuda, jgg::Mxfp8RaggedMCuda,
                              jgg::BindMxfp8RaggedMOperandsV2(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
                              {xla::ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8RaggedKCuda, jgg::Mxfp8RaggedKCuda,
                              jgg::BindMxfp8RaggedKOperands(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
                              {xla::ffi::Traits::kCmdBufferCompatible});
