// The XLA FFI handlers of the plugin. Target names (with their version) are
// given to them in python_module.cc; one handler per op and platform.
#ifndef JGG_XLA_PLUGIN_FFI_HANDLERS_H_
#define JGG_XLA_PLUGIN_FFI_HANDLERS_H_

#include "xla/ffi/api/ffi.h"

XLA_FFI_DECLARE_HANDLER_SYMBOL(JggRaggedMCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggRaggedKCpu);

XLA_FFI_DECLARE_HANDLER_SYMBOL(JggRaggedMCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggRaggedKCuda);

XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8QuantizeCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8DequantizeCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8QuantizeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8DequantizeCuda);
// _v2 of the MXFP8 targets: a workspace result (the CUDA kernels' job counter).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8QuantizeV2Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8DequantizeV2Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8QuantizeV2Cuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8DequantizeV2Cuda);
// The fused MXFP8 grouped GEMM (forward orientation, few rows per group).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8RaggedMCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8RaggedMCuda);
// _v2 of the fused MXFP8 GEMM: the rhs_transposed attribute (dgrad).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8RaggedMV2Cpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8RaggedMV2Cuda);
// The fused MXFP8 wgrad (ragged K, few rows per group).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8RaggedKCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8RaggedKCuda);
// The block-scaled MXFP8 grouped GEMM (CUDA: sm_100 only).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8BlockScaledCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JggMxfp8BlockScaledCuda);

#endif  // JGG_XLA_PLUGIN_FFI_HANDLERS_H_
