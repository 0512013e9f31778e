// The fused MXFP8 wgrad on CUDA for groups of few rows (decode, small experts):
// out[g] = deq(x_g)^T . deq(dy_g) costs rows_g multiply-adds per output element, so its time
// is writing the [G, K, N] result. The codes are dequantized on load (no bf16 copy of either
// operand in HBM) and multiplied in f32.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_K_CUDA_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_K_CUDA_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/mxfp8_gemm_problem.h"

namespace jgg::cuda {

// Preconditions (checked, cudaErrorInvalidValue otherwise): K and N multiples of 8 (the
// kernel's 8-byte code and scale loads), the operands and their scales 8-byte and out 16-byte
// aligned (XLA's buffers are), at most 65535 groups.
cudaError_t LaunchMxfp8RaggedK(const mxfp8::RaggedKProblem& problem,
                               const mxfp8::RaggedKOperands& operands, cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_K_CUDA_H_
