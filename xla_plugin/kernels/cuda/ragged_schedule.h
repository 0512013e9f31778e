// The group schedule (row and tile boundaries per batch entry, into the workspace) as a
// launch of its own, for the CUDA paths that do not prepare it in their own kernels (the
// tensor-core path does: sm90/ragged_problems_sm90.cuh).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_SCHEDULE_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_SCHEDULE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda {

// Writes one RaggedSchedule per batch entry into operands.workspace, counting
// tiles of `tile_rows` rows.
cudaError_t LaunchRaggedSchedule(int64_t batch, int64_t num_global_groups,
                                 int64_t num_local_groups, int64_t rows, int64_t tile_rows,
                                 const RaggedOperands& operands, cudaStream_t stream);

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_SCHEDULE_H_
