// Portable C++ kernels of the grouped MXFP8 quantize and dequantize (common/mxfp8_problem.h).
// Integer-only element math (common/mxfp8_math.h): exact under XLA's flushed-denormal CPU
// mode. They are the reference the CUDA kernels are tested against, not a fast path.
#ifndef JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_CPU_H_
#define JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_CPU_H_

#include "xla_plugin/common/mxfp8_problem.h"

namespace jgg::cpu {

// Host pointers. Writes every byte of every output.
void Mxfp8Quantize(const mxfp8::QuantizeProblem& problem, const mxfp8::QuantizeOperands& operands);
void Mxfp8Dequantize(const mxfp8::DequantizeProblem& problem,
                     const mxfp8::DequantizeOperands& operands);

}  // namespace jgg::cpu

#endif  // JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_CPU_H_
