#include "xla_plugin/kernels/cuda/ragged_schedule.h"

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/workspace.h"

namespace jgg::cuda {
namespace {

constexpr int kScheduleThreads = 256;
constexpr int kScheduleWarps = kScheduleThreads / 32;

// Exclusive prefix sum of one value per thread across the block; `total` gets
// the sum of all values. Warp shuffles, then a scan of the warp sums.
__device__ int64_t BlockExclusiveScan(int64_t value, int64_t* total) {
  __shared__ int64_t warp_sums[kScheduleWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int64_t inclusive = value;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int64_t up = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int64_t w = lane < kScheduleWarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < kScheduleWarps; d *= 2) {
      const int64_t up = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += up;
    }
    if (lane < kScheduleWarps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int64_t exclusive = (warp == 0 ? 0 : warp_sums[warp - 1]) + inclusive - value;
  *total = warp_sums[kScheduleWarps - 1];
  __syncthreads();  // warp_sums is reused by the next scan
  return exclusive;
}

// One block per batch entry; the same schedule as ComputeRaggedSchedule
// (ragged_layout.h) by two block-wide scans, so hundreds of groups cost a few
// microseconds instead of a serial walk of dependent loads.
__global__ void __launch_bounds__(kScheduleThreads) ScheduleKernel(
    const int32_t* group_sizes, const int32_t* group_offset, int64_t num_global_groups,
    int64_t num_local_groups, int64_t rows, int64_t tile_rows, void* workspace) {
  const int64_t b = blockIdx.x, t = threadIdx.x;
  const int32_t* sizes = group_sizes + b * num_global_groups;
  const RaggedSchedule s = ScheduleOfBatch(workspace, b, num_local_groups);
  const int64_t first = FirstLocalGroup(group_offset == nullptr ? 0 : *group_offset,
                                        num_global_groups);
  const int64_t last = MinI64(num_global_groups, first + num_local_groups);

  // Row boundaries: min(rows, prefix sum of clamped sizes of global groups [0, first + j)).
  const int64_t chunk = CeilDiv(last, kScheduleThreads);
  const int64_t lo = MinI64(last, t * chunk), hi = MinI64(last, lo + chunk);
  int64_t local = 0;
  for (int64_t i = lo; i < hi; ++i) local += ClampedSize(sizes[i]);
  int64_t total = 0;
  int64_t run = BlockExclusiveScan(local, &total);
  for (int64_t i = lo; i < hi; ++i) {
    if (i >= first) s.row_begin[i - first] = MinI64(rows, run);
    run += ClampedSize(sizes[i]);
  }
  for (int64_t j = last - first + t; j <= num_local_groups; j += kScheduleThreads)
    s.row_begin[j] = MinI64(rows, total);  // boundaries at and past the last real group
  __syncthreads();  // row_begin is read by other threads below

  // Tile boundaries: prefix sum of each local group's own tile count.
  const int64_t chunk2 = CeilDiv(num_local_groups, kScheduleThreads);
  const int64_t lo2 = MinI64(num_local_groups, t * chunk2);
  const int64_t hi2 = MinI64(num_local_groups, lo2 + chunk2);
  local = 0;
  for (int64_t j = lo2; j < hi2; ++j) local += CeilDiv(s.row_begin[j + 1] - s.row_begin[j], tile_rows);
  run = BlockExclusiveScan(local, &total);
  for (int64_t j = lo2; j < hi2; ++j) {
    s.tile_begin[j] = run;
    run += CeilDiv(s.row_begin[j + 1] - s.row_begin[j], tile_rows);
  }
  if (t == 0) s.tile_begin[num_local_groups] = total;
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

constexpr int kFillThreads = 256, kFillBlocks = 32;

}  // namespace

cudaError_t LaunchRaggedSchedule(int64_t batch, int64_t num_global_groups,
                                 int64_t num_local_groups, int64_t rows, int64_t tile_rows,
                                 const RaggedOperands& o, cudaStream_t stream) {
  ScheduleKernel<<<batch, kScheduleThreads, 0, stream>>>(o.group_sizes, o.group_offset, num_global_groups,
                                           num_local_groups, rows, tile_rows, o.workspace);
  return cudaGetLastError();
}

cudaError_t LaunchZeroUncoveredRows(const RaggedMProblem& p, const RaggedOperands& o,
                                    cudaStream_t stream) {
  ZeroUncoveredRowsKernel<<<dim3(kFillBlocks, p.batch), kFillThreads, 0, stream>>>(
      p, static_cast<char*>(o.out), ElementBytes(p.out_type), o.workspace);
  return cudaGetLastError();
}

}  // namespace jgg::cuda
