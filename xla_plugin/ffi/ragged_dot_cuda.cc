// CUDA handlers of the ragged GEMMs: decode, then launch on XLA's stream.
// Declared command-buffer compatible: they read no device data on the host,
// never synchronize and never allocate (scratch comes in as `workspace`).
#include <cuda_runtime_api.h>

#include "xla_plugin/ffi/cuda_status.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/ragged_decode.h"
#include "xla_plugin/kernels/cuda/ragged_dot_cuda.h"

namespace jgg {
namespace {

ffi::Error RaggedMCuda(cudaStream_t stream, ffi::AnyBuffer lhs, ffi::AnyBuffer rhs,
                       ffi::Buffer<ffi::S32> group_sizes, ffi::Buffer<ffi::S32> group_offset,
                       ffi::Result<ffi::AnyBuffer> out,
                       ffi::Result<ffi::Buffer<ffi::U8>> workspace, bool rhs_transposed) {
  auto call = DecodeRaggedM(lhs, rhs, group_sizes, group_offset, out, workspace, rhs_transposed);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  return FromCuda(cuda::LaunchRaggedM(call->problem, call->operands, stream), "ragged_m launch");
}

ffi::Error RaggedKCuda(cudaStream_t stream, ffi::AnyBuffer lhs, ffi::AnyBuffer rhs,
                       ffi::Buffer<ffi::S32> group_sizes, ffi::Buffer<ffi::S32> group_offset,
                       ffi::Result<ffi::AnyBuffer> out,
                       ffi::Result<ffi::Buffer<ffi::U8>> workspace) {
  auto call = DecodeRaggedK(lhs, rhs, group_sizes, group_offset, out, workspace);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  return FromCuda(cuda::LaunchRaggedK(call->problem, call->operands, stream), "ragged_k launch");
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    JggRaggedMCuda, jgg::RaggedMCuda,
    jgg::BindRaggedOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>())
        .Attr<bool>("rhs_transposed"),
    {xla::ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    JggRaggedKCuda, jgg::RaggedKCuda,
    jgg::BindRaggedOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
