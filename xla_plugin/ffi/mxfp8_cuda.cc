// CUDA handlers of the grouped MXFP8 quantize / dequantize: decode, then one launch on XLA's
// stream. Declared command-buffer compatible: no host read of device data, no sync, no
// allocation (group offsets are computed inside the kernel; there is no workspace).
#include <cuda_runtime_api.h>

#include <string>

#include "xla_plugin/common/debug_poison.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_decode.h"
#include "xla_plugin/kernels/cuda/mxfp8_cuda.h"

namespace jgg {
namespace {

ffi::Error FromCuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(status));
}

// A memset node when captured: poisoning keeps the handler command-buffer compatible.
template <typename Result>
cudaError_t MaybePoison(Result& out, cudaStream_t stream) {
  if (!PoisonOutputs() || out->size_bytes() == 0) return cudaSuccess;
  return cudaMemsetAsync(out->untyped_data(), kPoisonByte, out->size_bytes(), stream);
}

ffi::Error Mxfp8QuantizeCuda(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Buffer<ffi::S32> group_sizes,
                             ffi::Result<ffi::AnyBuffer> row_data,
                             ffi::Result<ffi::Buffer<ffi::U8>> row_scales,
                             ffi::Result<ffi::AnyBuffer> col_data,
                             ffi::Result<ffi::Buffer<ffi::U8>> col_scales, int32_t layout,
                             bool rowwise, bool colwise, bool swizzled) {
  auto call = DecodeMxfp8Quantize(x, group_sizes, row_data, row_scales, col_data, col_scales,
                                  layout, rowwise, colwise, swizzled);
  if (call.has_error()) return call.error();
  for (cudaError_t status : {MaybePoison(row_data, stream), MaybePoison(row_scales, stream),
                             MaybePoison(col_data, stream), MaybePoison(col_scales, stream)}) {
    if (auto e = FromCuda(status, "poison"); e.failure()) return e;
  }
  return FromCuda(cuda::LaunchMxfp8Quantize(call->problem, call->operands, stream),
                  "mxfp8 quantize launch");
}

ffi::Error Mxfp8DequantizeCuda(cudaStream_t stream, ffi::AnyBuffer data,
                               ffi::Buffer<ffi::U8> scales, ffi::Buffer<ffi::S32> group_sizes,
                               ffi::Result<ffi::AnyBuffer> out, int32_t layout, bool colwise,
                               bool swizzled) {
  auto call = DecodeMxfp8Dequantize(data, scales, group_sizes, out, layout, colwise, swizzled);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  return FromCuda(cuda::LaunchMxfp8Dequantize(call->problem, call->operands, stream),
                  "mxfp8 dequantize launch");
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    JggMxfp8QuantizeCuda, jgg::Mxfp8QuantizeCuda,
    jgg::BindMxfp8QuantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    JggMxfp8DequantizeCuda, jgg::Mxfp8DequantizeCuda,
    jgg::BindMxfp8DequantizeOperands(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
