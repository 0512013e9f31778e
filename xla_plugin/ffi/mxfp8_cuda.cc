// CUDA handlers of the grouped MXFP8 quantize / dequantize: decode, then one launch on XLA's
// stream (_v2: the workspace result holds the job counter, which the launcher zeroes with a
// memset where its kernel takes jobs from it). Declared
// command-buffer compatible: no host read of device data, no sync, no allocation (group
// offsets are computed inside the kernel).
#include <cuda_runtime_api.h>

#include "xla_plugin/ffi/cuda_status.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_decode.h"
#include "xla_plugin/kernels/cuda/mxfp8_cuda.h"

namespace jgg {
namespace {

// `job_counter`: null for _v1 (a static job split), else the workspace's counter.
ffi::Error Mxfp8QuantizeCuda(cudaStream_t stream, ffi::AnyBuffer x,
                             ffi::Buffer<ffi::S32> group_sizes,
                             ffi::Result<ffi::AnyBuffer> row_data,
                             ffi::Result<ffi::Buffer<ffi::U8>> row_scales,
                             ffi::Result<ffi::AnyBuffer> col_data,
                             ffi::Result<ffi::Buffer<ffi::U8>> col_scales,
                             unsigned long long* job_counter, int32_t layout, bool rowwise,
                             bool colwise, bool swizzled) {
  auto call = DecodeMxfp8Quantize(x, group_sizes, row_data, row_scales, col_data, col_scales,
                                  layout, rowwise, colwise, swizzled);
  if (call.has_error()) return call.error();
  for (cudaError_t status : {MaybePoison(row_data, stream), MaybePoison(row_scales, stream),
                             MaybePoison(col_data, stream), MaybePoison(col_scales, stream)}) {
    if (auto e = FromCuda(status, "poison"); e.failure()) return e;
  }
  call->operands.job_counter = job_counter;
  return FromCuda(cuda::LaunchMxfp8Quantize(call->problem, call->operands, stream),
                  "mxfp8 quantize launch");
}

ffi::Error Mxfp8DequantizeCuda(cudaStream_t stream, ffi::AnyBuffer data,
                               ffi::Buffer<ffi::U8> scales, ffi::Buffer<ffi::S32> group_sizes,
                               ffi::Result<ffi::AnyBuffer> out, unsigned long long* job_counter,
                               int32_t layout, bool colwise, bool swizzled) {
  auto call = DecodeMxfp8Dequantize(data, scales, group_sizes, out, layout, colwise, swizzled);
  if (call.has_error()) return call.error();
  if (auto e = FromCuda(MaybePoison(out, stream), "poison"); e.failure()) return e;
  call->operands.job_counter = job_counter;
  return FromCuda(cuda::LaunchMxfp8Dequantize(call->problem, call->operands, stream),
                  "mxfp8 dequantize launch");
}

ffi::Error Mxfp8QuantizeCudaV1(cudaStream_t stream, ffi::AnyBuffer x,
                               ffi::Buffer<ffi::S32> group_sizes,
                               ffi::Result<ffi::AnyBuffer> row_data,
                               ffi::Result<ffi::Buffer<ffi::U8>> row_scales,
                               ffi::Result<ffi::AnyBuffer> col_data,
                               ffi::Result<ffi::Buffer<ffi::U8>> col_scales, int32_t layout,
                               bool rowwise, bool colwise, bool swizzled) {
  return Mxfp8QuantizeCuda(stream, x, group_sizes, row_data, row_scales, col_data, col_scales,
                           nullptr, layout, rowwise, colwise, swizzled);
}

ffi::Error Mxfp8QuantizeCudaV2(cudaStream_t stream, ffi::AnyBuffer x,
                               ffi::Buffer<ffi::S32> group_sizes,
                               ffi::Result<ffi::AnyBuffer> row_data,
                               ffi::Result<ffi::Buffer<ffi::U8>> row_scales,
                               ffi::Result<ffi::AnyBuffer> col_data,
                               ffi::Result<ffi::Buffer<ffi::U8>> col_scales,
                               ffi::Result<ffi::Buffer<ffi::U8>> workspace, int32_t layout,
                               bool rowwise, bool colwise, bool swizzled) {
  return Mxfp8QuantizeCuda(stream, x, group_sizes, row_data, row_scales, col_data, col_scales,
                           JobCounter(workspace), layout, rowwise, colwise, swizzled);
}

ffi::Error Mxfp8DequantizeCudaV1(cudaStream_t stream, ffi::AnyBuffer data,
                                 ffi::Buffer<ffi::U8> scales, ffi::Buffer<ffi::S32> group_sizes,
                                 ffi::Result<ffi::AnyBuffer> out, int32_t layout, bool colwise,
                                 bool swizzled) {
  return Mxfp8DequantizeCuda(stream, data, scales, group_sizes, out, nullptr, layout, colwise,
                             swizzled);
}

ffi::Error Mxfp8DequantizeCudaV2(cudaStream_t stream, ffi::AnyBuffer data,
                                 ffi::Buffer<ffi::U8> scales, ffi::Buffer<ffi::S32> group_sizes,
                                 ffi::Result<ffi::AnyBuffer> out,
                                 ffi::Result<ffi::Buffer<ffi::U8>> workspace, int32_t layout,
                                 bool colwise, bool swizzled) {
  return Mxfp8DequantizeCuda(stream, data, scales, group_sizes, out, JobCounter(workspace),
                             layout, colwise, swizzled);
}

}  // namespace
}  // namespace jgg

#define JGG_MXFP8_CUDA_HANDLER(symbol, function, bind)                                  \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                        \
      symbol, function, bind(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()), \
      {xla::ffi::Traits::kCmdBufferCompatible})
JGG_MXFP8_CUDA_HANDLER(JggMxfp8QuantizeCuda, jgg::Mxfp8QuantizeCudaV1,
                       jgg::BindMxfp8QuantizeOperands<false>);
JGG_MXFP8_CUDA_HANDLER(JggMxfp8DequantizeCuda, jgg::Mxfp8DequantizeCudaV1,
                       jgg::BindMxfp8DequantizeOperands<false>);
JGG_MXFP8_CUDA_HANDLER(JggMxfp8QuantizeV2Cuda, jgg::Mxfp8QuantizeCudaV2,
                       jgg::BindMxfp8QuantizeOperands<true>);
JGG_MXFP8_CUDA_HANDLER(JggMxfp8DequantizeV2Cuda, jgg::Mxfp8DequantizeCudaV2,
                       jgg::BindMxfp8DequantizeOperands<true>);
