// CPU handlers of the grouped MXFP8 quantize / dequantize: decode, then run the portable kernels.
#include <cstring>

#include "xla_plugin/common/debug_poison.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_decode.h"
#include "xla_plugin/kernels/cpu/mxfp8_cpu.h"

namespace jgg {
namespace {

template <typename Result>
void MaybePoison(Result& out) {
  if (PoisonOutputs()) std::memset(out->untyped_data(), kPoisonByte, out->size_bytes());
}

ffi::Error Mxfp8QuantizeCpu(ffi::AnyBuffer x, ffi::Buffer<ffi::S32> group_sizes,
                            ffi::Result<ffi::AnyBuffer> row_data,
                            ffi::Result<ffi::Buffer<ffi::U8>> row_scales,
                            ffi::Result<ffi::AnyBuffer> col_data,
                            ffi::Result<ffi::Buffer<ffi::U8>> col_scales, int32_t layout,
                            bool rowwise, bool colwise, bool swizzled) {
  auto call = DecodeMxfp8Quantize(x, group_sizes, row_data, row_scales, col_data, col_scales,
                                  layout, rowwise, colwise, swizzled);
  if (call.has_error()) return call.error();
  MaybePoison(row_data);
  MaybePoison(row_scales);
  MaybePoison(col_data);
  MaybePoison(col_scales);
  cpu::Mxfp8Quantize(call->problem, call->operands);
  return ffi::Error::Success();
}

ffi::Error Mxfp8DequantizeCpu(ffi::AnyBuffer data, ffi::Buffer<ffi::U8> scales,
                              ffi::Buffer<ffi::S32> group_sizes, ffi::Result<ffi::AnyBuffer> out,
                              int32_t layout, bool colwise, bool swizzled) {
  auto call = DecodeMxfp8Dequantize(data, scales, group_sizes, out, layout, colwise, swizzled);
  if (call.has_error()) return call.error();
  MaybePoison(out);
  cpu::Mxfp8Dequantize(call->problem, call->operands);
  return ffi::Error::Success();
}

// _v2: the same call with a workspace result, which the CPU kernels do not need.
ffi::Error Mxfp8QuantizeCpuV2(ffi::AnyBuffer x, ffi::Buffer<ffi::S32> group_sizes,
                              ffi::Result<ffi::AnyBuffer> row_data,
                              ffi::Result<ffi::Buffer<ffi::U8>> row_scales,
                              ffi::Result<ffi::AnyBuffer> col_data,
                              ffi::Result<ffi::Buffer<ffi::U8>> col_scales,
                              ffi::Result<ffi::Buffer<ffi::U8>> /*workspace*/, int32_t layout,
                              bool rowwise, bool colwise, bool swizzled) {
  return Mxfp8QuantizeCpu(x, group_sizes, row_data, row_scales, col_data, col_scales, layout,
                          rowwise, colwise, swizzled);
}

ffi::Error Mxfp8DequantizeCpuV2(ffi::AnyBuffer data, ffi::Buffer<ffi::U8> scales,
                                ffi::Buffer<ffi::S32> group_sizes,
                                ffi::Result<ffi::AnyBuffer> out,
                                ffi::Result<ffi::Buffer<ffi::U8>> /*workspace*/, int32_t layout,
                                bool colwise, bool swizzled) {
  return Mxfp8DequantizeCpu(data, scales, group_sizes, out, layout, colwise, swizzled);
}

}  // namespace
}  // namespace jgg

XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8QuantizeCpu, jgg::Mxfp8QuantizeCpu,
                              jgg::BindMxfp8QuantizeOperands<false>(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8DequantizeCpu, jgg::Mxfp8DequantizeCpu,
                              jgg::BindMxfp8DequantizeOperands<false>(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8QuantizeV2Cpu, jgg::Mxfp8QuantizeCpuV2,
                              jgg::BindMxfp8QuantizeOperands<true>(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JggMxfp8DequantizeV2Cpu, jgg::Mxfp8DequantizeCpuV2,
                              jgg::BindMxfp8DequantizeOperands<true>(xla::ffi::Ffi::Bind()));
