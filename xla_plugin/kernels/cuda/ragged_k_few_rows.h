// Wgrad for groups of very few rows (decode-like routing): each output
// element is a short sum of products, so the kernel is bound by storing the
// weight gradient; it streams 16-byte stores instead of running MMA tiles that
// would be almost entirely padding.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_K_FEW_ROWS_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_K_FEW_ROWS_H_

#include <cuda_runtime_api.h>

#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda {

// Whether the kernel takes this call: 16-bit inputs, N a multiple of 8, 16-byte
// aligned rhs and out (8-element vectors never straddle a row).
bool RaggedKFewRowsSupported(const RaggedKProblem& problem, const RaggedOperands& operands);

// The schedule must already be in operands.workspace. Writes every output
// element (empty groups get 0).
cudaError_t LaunchRaggedKFewRows(const RaggedKProblem& problem, const RaggedOperands& operands,
                                 cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_K_FEW_ROWS_H_
