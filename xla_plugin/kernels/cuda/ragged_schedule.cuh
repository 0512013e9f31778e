// Device code of the ragged GEMM preparation, shared by the schedule kernel
// (ragged_schedule.cu: the SIMT path) and the preparation launches of the CUTLASS paths
// (sm90/ragged_problems_sm90.cuh; sm100/blockscaled_gemm_sm100.cuh for MXFP8), which do
// this work and write CUTLASS's problem arrays in the same kernel.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_SCHEDULE_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_SCHEDULE_CUH_

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/ragged_problem.h"
#include "xla_plugin/common/workspace.h"

namespace jgg::cuda {

// Every function below is called by all threads of a block of this many threads.
inline constexpr int kScheduleThreads = 256;

// Exclusive prefix sum of one value per thread across the block; `total` gets
// the sum of all values. Warp shuffles, then a scan of the warp sums.
__device__ inline int64_t BlockExclusiveScan(int64_t value, int64_t* total) {
  constexpr int kWarps = kScheduleThreads / 32;
  __shared__ int64_t warp_sums[kWarps];
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
    int64_t w = lane < kWarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < kWarps; d *= 2) {
      const int64_t up = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += up;
    }
    if (lane < kWarps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int64_t exclusive = (warp == 0 ? 0 : warp_sums[warp - 1]) + inclusive - value;
  *total = warp_sums[kWarps - 1];
  __syncthreads();  // warp_sums is reused by the next scan
  return exclusive;
}

// The global groups of batch entry b's local window: [first, last).
struct LocalWindow {
  const int32_t* sizes;
  int64_t first, last;
};

__device__ inline LocalWindow LocalWindowOf(const int32_t* group_sizes,
                                            const int32_t* group_offset,
                                            int64_t num_global_groups, int64_t num_local_groups,
                                            int64_t b) {
  const int64_t first =
      FirstLocalGroup(group_offset == nullptr ? 0 : *group_offset, num_global_groups);
  return {group_sizes + b * num_global_groups, first,
          MinI64(num_global_groups, first + num_local_groups)};
}

// Calls at(j, row_begin[j]) for every row boundary j in [0, num_local_groups] of a batch
// entry's schedule (the same as ComputeRaggedSchedule in ragged_layout.h), by a block-wide
// scan, so hundreds of groups cost a few microseconds instead of a serial walk of dependent
// loads: row_begin[j] = min(rows, prefix sum of clamped sizes of global groups [0, first + j)).
template <class At>
__device__ inline void ForEachRowBegin(const LocalWindow& w, int64_t num_local_groups,
                                       int64_t rows, At at) {
  const int64_t chunk = CeilDiv(w.last, kScheduleThreads);
  const int64_t lo = MinI64(w.last, threadIdx.x * chunk), hi = MinI64(w.last, lo + chunk);
  int64_t local = 0;
  for (int64_t i = lo; i < hi; ++i) local += ClampedSize(w.sizes[i]);
  int64_t total = 0;
  int64_t run = BlockExclusiveScan(local, &total);
  for (int64_t i = lo; i < hi; ++i) {
    if (i >= w.first) at(i - w.first, MinI64(rows, run));
    run += ClampedSize(w.sizes[i]);
  }
  for (int64_t j = w.last - w.first + threadIdx.x; j <= num_local_groups; j += kScheduleThreads)
    at(j, MinI64(rows, total));  // boundaries at and past the last real group
}

// Row boundaries row_begin[lo .. hi] of a batch entry's schedule into `begin` (hi - lo <=
// kMaxGroups), by one block reduction: for a block that needs only those (a few problems of
// the preparation) and should not wait for the whole schedule.
template <int kMaxGroups>
__device__ inline void SliceRowBegins(const LocalWindow& w, int64_t rows, int64_t lo, int64_t hi,
                                      int64_t* begin) {
  const int64_t before_lo = MinI64(w.last, w.first + lo);  // global groups before local group lo
  int64_t sum = 0;
  for (int64_t i = threadIdx.x; i < before_lo; i += kScheduleThreads) sum += ClampedSize(w.sizes[i]);
  int64_t total = 0;
  BlockExclusiveScan(sum, &total);
  const int64_t t = threadIdx.x;
  if (t <= hi - lo) {
    int64_t row = total;
#pragma unroll
    for (int64_t j = 0; j < kMaxGroups; ++j) {
      const int64_t g = w.first + lo + j;
      if (j < t && g < w.last) row += ClampedSize(w.sizes[g]);
    }
    begin[t] = MinI64(rows, row);
  }
}

// Writes batch entry b's RaggedSchedule (ComputeRaggedSchedule in ragged_layout.h) by two
// block-wide scans. Counts tiles of `tile_rows` rows.
__device__ inline void WriteBatchSchedule(const int32_t* group_sizes, const int32_t* group_offset,
                                          int64_t num_global_groups, int64_t num_local_groups,
                                          int64_t rows, int64_t tile_rows, void* workspace,
                                          int64_t b) {
  const int64_t t = threadIdx.x;
  const RaggedSchedule s = ScheduleOfBatch(workspace, b, num_local_groups);
  const LocalWindow w =
      LocalWindowOf(group_sizes, group_offset, num_global_groups, num_local_groups, b);
  ForEachRowBegin(w, num_local_groups, rows, [&](int64_t j, int64_t row) { s.row_begin[j] = row; });
  __syncthreads();  // row_begin is read by other threads below

  // Tile boundaries: prefix sum of each local group's own tile count.
  const int64_t chunk2 = CeilDiv(num_local_groups, kScheduleThreads);
  const int64_t lo2 = MinI64(num_local_groups, t * chunk2);
  const int64_t hi2 = MinI64(num_local_groups, lo2 + chunk2);
  int64_t local = 0;
  for (int64_t j = lo2; j < hi2; ++j)
    local += CeilDiv(s.row_begin[j + 1] - s.row_begin[j], tile_rows);
  int64_t total = 0;
  int64_t run = BlockExclusiveScan(local, &total);
  for (int64_t j = lo2; j < hi2; ++j) {
    s.tile_begin[j] = run;
    run += CeilDiv(s.row_begin[j + 1] - s.row_begin[j], tile_rows);
  }
  if (t == 0) s.tile_begin[num_local_groups] = total;
}

// Rows [begin, end) of batch entry b that its local groups cover: row_begin[0] and
// row_begin[num_local_groups] of its schedule, by block reductions (for blocks that do
// not hold the schedule).
struct RowRange {
  int64_t begin, end;
};

__device__ inline RowRange CoveredRows(const LocalWindow& w, int64_t rows) {
  const int64_t chunk = CeilDiv(w.last, kScheduleThreads);
  const int64_t lo = MinI64(w.last, threadIdx.x * chunk), hi = MinI64(w.last, lo + chunk);
  int64_t before = 0, through = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t size = ClampedSize(w.sizes[i]);
    if (i < w.first) before += size;
    through += size;
  }
  int64_t total_before = 0, total_through = 0;
  BlockExclusiveScan(before, &total_before);
  BlockExclusiveScan(through, &total_through);
  return {MinI64(rows, total_before), MinI64(rows, total_through)};
}

// Zero bytes [begin, end) of a region, block `part` of `parts` taking a share: 16-byte
// stores where aligned (row ranges of 2-byte elements need not be).
__device__ inline void ZeroBytes(char* base, int64_t begin, int64_t end, int64_t part,
                                 int64_t parts) {
  const int64_t threads = parts * kScheduleThreads;
  const int64_t tid = part * kScheduleThreads + threadIdx.x;
  int64_t aligned_begin = (begin + 15) / 16 * 16, aligned_end = end / 16 * 16;
  if (aligned_begin >= aligned_end) aligned_begin = aligned_end = end;
  for (int64_t i = begin + tid; i < aligned_begin; i += threads) base[i] = 0;
  for (int64_t i = aligned_end + tid; i < end; i += threads) base[i] = 0;
  for (int64_t i = aligned_begin / 16 + tid; i < aligned_end / 16; i += threads)
    reinterpret_cast<int4*>(base)[i] = make_int4(0, 0, 0, 0);
}

// RaggedM: zeroes out[b, r, :] for the rows r of no local group (block `part` of `parts`).
__device__ inline void ZeroUncoveredRows(const RaggedMProblem& p, const RaggedOperands& o,
                                         int64_t element_bytes, int64_t b, int64_t part,
                                         int64_t parts) {
  const RowRange covered = CoveredRows(
      LocalWindowOf(o.group_sizes, o.group_offset, p.num_global_groups, p.num_local_groups, b),
      p.rows);
  const int64_t row_bytes = p.n * element_bytes;
  char* out_b = static_cast<char*>(o.out) + b * p.rows * row_bytes;
  ZeroBytes(out_b, 0, covered.begin * row_bytes, part, parts);
  ZeroBytes(out_b, covered.end * row_bytes, p.rows * row_bytes, part, parts);
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_RAGGED_SCHEDULE_CUH_
