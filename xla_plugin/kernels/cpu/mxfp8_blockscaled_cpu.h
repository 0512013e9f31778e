// The block-scaled MXFP8 grouped GEMM on the CPU (common/mxfp8_blockscaled_problem.h): each
// group's operands dequantized from their swizzled scales exactly where the GEMM library reads
// them (DescribeGroup), then the f32 GEMM. The reference semantics of the call whose CUDA
// handler runs the sm_100 kernel.
#ifndef JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_BLOCKSCALED_CPU_H_
#define JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_BLOCKSCALED_CPU_H_

#include "xla_plugin/common/mxfp8_blockscaled_problem.h"

namespace jgg::cpu {

void Mxfp8BlockScaled(const mxfp8::BlockScaledProblem& problem,
                      const mxfp8::BlockScaledOperands& operands);

}  // namespace jgg::cpu

#endif  // JGG_XLA_PLUGIN_KERNELS_CPU_MXFP8_BLOCKSCALED_CPU_H_
