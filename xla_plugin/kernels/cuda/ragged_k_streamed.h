// Wgrad of groups with few rows, streamed. For a group of m <= 8 rows,
// out[g, b] = lhs_g^T . rhs_g costs m FMAs per output element, so its time is
// writing the P x N gradient: a tensor-core tile spends it in its epilogue, one
// tile at a time. This kernel keeps the group's rows of rhs in registers and
// streams the output rows with 16-byte evict-first stores. It also writes the
// zeros of empty groups; the tensor-core path takes the groups it leaves.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_K_STREAMED_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_K_STREAMED_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda {

// The most rows a streamed group may have (its rhs rows live in registers).
inline constexpr int kStreamedMaxRows = 8;

// Writes out[g, b] for every (local group g, batch entry b) of at most
// `max_rows` rows (0 <= max_rows <= kStreamedMaxRows) and leaves the others
// untouched. Preconditions (the tensor-core path's): 16-bit inputs, N a
// multiple of 8, 16-byte aligned rhs and out; the schedule's row boundaries are in
// the workspace.
// With `beside_gemm`, the kernel is launched as a programmatic dependent of the
// grid before it, which must be the tensor-core GEMM of the same call: that GEMM
// lets it launch once its preparation is complete (sm90/grouped_gemm_sm90.cuh), so
// its blocks take the SMs the GEMM's last CTAs leave idle.
cudaError_t LaunchRaggedKStreamed(const RaggedKProblem& problem, const RaggedOperands& operands,
                                  int max_rows, bool beside_gemm, cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_K_STREAMED_H_
