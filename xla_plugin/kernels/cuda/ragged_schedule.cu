#include "xla_plugin/kernels/cuda/ragged_schedule.h"

#include "xla_plugin/kernels/cuda/ragged_schedule.cuh"

namespace jgg::cuda {
namespace {

// One block per batch entry.
__global__ void __launch_bounds__(kScheduleThreads) ScheduleKernel(
    const int32_t* group_sizes, const int32_t* group_offset, int64_t num_global_groups,
    int64_t num_local_groups, int64_t rows, int64_t tile_rows, void* workspace) {
  WriteBatchSchedule(group_sizes, group_offset, num_global_groups, num_local_groups, rows,
                     tile_rows, workspace, blockIdx.x);
}

}  // namespace

cudaError_t LaunchRaggedSchedule(int64_t batch, int64_t num_global_groups,
                                 int64_t num_local_groups, int64_t rows, int64_t tile_rows,
                                 const RaggedOperands& o, cudaStream_t stream) {
  ScheduleKernel<<<batch, kScheduleThreads, 0, stream>>>(
      o.group_sizes, o.group_offset, num_global_groups, num_local_groups, rows, tile_rows,
      o.workspace);
  return cudaGetLastError();
}

}  // namespace jgg::cuda
