#include "xla_plugin/kernels/cuda/ragged_schedule.h"

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/workspace.h"

namespace jgg::cuda {
namespace {

// One thread per batch entry: a serial prefix sum over the groups (a few
// microseconds for hundreds of groups; a single launch either way).
__global__ void ScheduleKernel(const int32_t* group_sizes, const int32_t* group_offset,
                               int64_t num_global_groups, int64_t num_local_groups, int64_t rows,
                               int64_t tile_rows, void* workspace) {
  const int64_t b = blockIdx.x;
  ComputeRaggedSchedule(group_sizes + b * num_global_groups, num_global_groups,
                        group_offset == nullptr ? 0 : *group_offset, num_local_groups, rows,
                        tile_rows, ScheduleOfBatch(workspace, b, num_local_groups));
}

int64_t ElementBytes(ElementType t) { return t == ElementType::kF32 ? 4 : 2; }

// Zero bytes [begin, end) of a region with a grid-stride loop of 16-byte stores
// where aligned (row ranges of 2-byte elements need not be).
__device__ void ZeroBytes(char* base, int64_t begin, int64_t end) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t aligned_begin = (begin + 15) / 16 * 16, aligned_end = end / 16 * 16;
  if (aligned_begin >= aligned_end) aligned_begin = aligned_end = end;
  for (int64_t i = begin + tid; i < aligned_begin; i += threads) base[i] = 0;
  for (int64_t i = aligned_end + tid; i < end; i += threads) base[i] = 0;
  for (int64_t i = aligned_begin / 16 + tid; i < aligned_end / 16; i += threads)
    reinterpret_cast<int4*>(base)[i] = make_int4(0, 0, 0, 0);
}

__global__ void ZeroUncoveredRowsKernel(RaggedMProblem p, char* out, int64_t element_bytes,
                                        const void* workspace) {
  const int64_t b = blockIdx.y;
  const RaggedSchedule s = ScheduleOfBatch(const_cast<void*>(workspace), b, p.num_local_groups);
  const int64_t row_bytes = p.n * element_bytes;
  char* out_b = out + b * p.rows * row_bytes;
  ZeroBytes(out_b, 0, s.row_begin[0] * row_bytes);
  ZeroBytes(out_b, s.row_begin[p.num_local_groups] * row_bytes, p.rows * row_bytes);
}

__global__ void ZeroEmptyGroupsKernel(RaggedKProblem p, char* out, int64_t element_bytes,
                                      const void* workspace) {
  const int64_t g = blockIdx.y / p.batch, b = blockIdx.y % p.batch;
  const RaggedSchedule s = ScheduleOfBatch(const_cast<void*>(workspace), b, p.num_local_groups);
  if (s.row_begin[g + 1] != s.row_begin[g]) return;
  const int64_t matrix_bytes = p.p * p.n * element_bytes;
  ZeroBytes(out + (g * p.batch + b) * matrix_bytes, 0, matrix_bytes);
}

constexpr int kFillThreads = 256, kFillBlocks = 32;

}  // namespace

cudaError_t LaunchRaggedSchedule(int64_t batch, int64_t num_global_groups,
                                 int64_t num_local_groups, int64_t rows, int64_t tile_rows,
                                 const RaggedOperands& o, cudaStream_t stream) {
  ScheduleKernel<<<batch, 1, 0, stream>>>(o.group_sizes, o.group_offset, num_global_groups,
                                           num_local_groups, rows, tile_rows, o.workspace);
  return cudaGetLastError();
}

cudaError_t LaunchZeroUncoveredRows(const RaggedMProblem& p, const RaggedOperands& o,
                                    cudaStream_t stream) {
  ZeroUncoveredRowsKernel<<<dim3(kFillBlocks, p.batch), kFillThreads, 0, stream>>>(
      p, static_cast<char*>(o.out), ElementBytes(p.out_type), o.workspace);
  return cudaGetLastError();
}

cudaError_t LaunchZeroEmptyGroups(const RaggedKProblem& p, const RaggedOperands& o,
                                  cudaStream_t stream) {
  ZeroEmptyGroupsKernel<<<dim3(kFillBlocks, p.num_local_groups * p.batch), kFillThreads, 0,
                          stream>>>(p, static_cast<char*>(o.out), ElementBytes(p.out_type),
                                    o.workspace);
  return cudaGetLastError();
}

}  // namespace jgg::cuda
