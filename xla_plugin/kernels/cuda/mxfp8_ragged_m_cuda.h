// The fused MXFP8 grouped GEMM on CUDA for groups of few rows (decode, small experts), where
// the time is reading the weights: each fp8 weight byte is loaded once per 8 group rows,
// turned into an mma operand in registers (no bf16 copy in HBM) and used for all of them.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_CUDA_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_CUDA_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/mxfp8_gemm_problem.h"

namespace jgg::cuda {

// Preconditions (checked, cudaErrorInvalidValue otherwise): K a multiple of 4 and N of 8
// (the kernel's 4-byte x and 8- or 16-byte weight loads), lhs 4-byte and rhs and its scales
// 16-byte aligned (XLA's buffers are).
cudaError_t LaunchMxfp8RaggedM(const mxfp8::RaggedMProblem& problem,
                               const mxfp8::RaggedMOperands& operands, cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_CUDA_H_
