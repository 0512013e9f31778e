// CUDA handler of the block-scaled MXFP8 grouped GEMM: on compute capability 10.x the CUTLASS
// sm_100 kernels (kernels/cuda/mxfp8_blockscaled_cuda.cu); elsewhere an error naming the GPU,
// since no other GPU has block-scaled MMA (Python never routes a call here without being asked).
// Command-buffer compatible: no host read of device data, no sync, no allocation.
#include <cuda_runtime_api.h>

#include "xla_plugin/ffi/cuda_status.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_blockscaled_decode.h"
#include "xla_plugin/kernels/cuda/mxfp8_blockscaled_cuda.h"

namespace jgg {
namespace {

ffi::Error Mxfp8BlockScaledCuda(cudaStream_t stream, ffi::AnyBuffer lhs,
                                ffi::Buffer<ffi::U8> lhs_scales, ffi::AnyBuffer rhs,
                                ffi::Buffer<ffi::U8> rhs_scales, ffi::Buffer<ffi::S32> group_sizes,
                                ffi::Result<ffi::AnyBuffer> out,
                                ffi::Result<ffi::Buffer<ffi::U8>> workspace, int32_t gemm) {
  auto call = DecodeMxfp8BlockScaled(lhs, lhs_scales, rhs, rhs_scales, group_sizes, out,
                                     workspace, gemm);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  return FromCuda(cuda::LaunchMxfp8BlockScaled(call->problem, call->operands, stream),
                  "mxfp8 block-scaled launch (needs an sm_100 GPU)");
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8BlockScaledCuda, jgg::Mxfp8BlockScaledCuda,
                              jgg::BindMxfp8BlockScaledOperands(
                                  xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
                              {xla::ffi::Traits::kCmdBufferCompatible});
