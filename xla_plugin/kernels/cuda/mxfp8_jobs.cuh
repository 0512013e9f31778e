// The jobs of the grouped MXFP8 quantize / dequantize kernels (mxfp8_kernels.cuh and
// mxfp8_wide_kernels.cuh): what a call's jobs are, which CTA does each, and the scale bytes
// that no group's data tile writes.
//
// Job: a tile of 32 rows (one colwise block) x tile_cols columns of one region (a group, or the
// zero tail; see common/mxfp8_layout.h), or a chunk of scale bytes to zero. Tiles never span two
// groups (tiles restart at every group boundary), which is what makes any group size valid.
// The grid is one wave (as many CTAs as fit on the GPU); CTA c does jobs c and c + ctas, then
// takes the rest one after another from a job counter that the handler zeroes (so CTAs on less
// loaded SMs take more), finding each job's group by a warp-wide count over the groups' prefix
// sums, computed once per CTA with block-wide scans of the device group sizes (no separate setup
// launch; without a counter, each CTA does every ctas-th job, locating 16 at a time). The scale
// bytes that hold no real scale (128x4 tile padding, the unused tail of the worst-case buffer)
// are zeroed by the CTAs that own them: one launch per call.
//
// Device code only, so that tests/test_mxfp8_emulated.py can run it on the CPU under a SIMT
// emulator.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_JOBS_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_JOBS_CUH_

#include <cstdint>

#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_problem.h"

namespace jgg::cuda::mxfp8_kernels {

using mxfp8::Fp8Format;
using mxfp8::GroupedLayout;
using mxfp8::GroupedShape;
using mxfp8::kBlockSize;
using mxfp8::Region;
using mxfp8::ScaleMatrix;

constexpr int kTileRows = 32;             // one colwise block
constexpr int kMaxThreads = 128;          // small CTAs: fine-grained column tiles
// Register caps of __launch_bounds__: 4 CTAs per SM (<= 128 registers) keep 128 KB of loads in
// flight per SM; without a cap ptxas takes up to 186 registers (3 CTAs).
constexpr int kMinCtasPerSm = 4;
// Strip "both" kernels: 168 registers, 246 bytes spilled (bf16, ptxas 2026-11-29).
constexpr int kMinCtasPerSmBoth = 3;
constexpr int kStripBytes = 8;            // input bytes per thread and row (quantize)
constexpr int kDequantVec = 4;            // fp8 bytes per thread and row (dequantize)
constexpr int64_t kTailChunkBytes = 16384;  // scale bytes one CTA zeroes past the groups
// Wide tiles (mxfp8_wide_kernels.cuh): 4 warps of 8 rows each, 16-byte chunks per lane and row.
constexpr int kWideThreads = kMaxThreads;
constexpr int kWideRows = kTileRows / (kWideThreads / 32);
// Dequantize reads 16 fp8 codes per lane and row, or 8 where 512-column tiles would leave lanes
// idle that 256-column tiles fill (768 columns).
constexpr int kWideDequantChunk = 16;
constexpr int kWideDequantHalfChunk = 8;
// Wide kernels copy each job into one of two shared-memory stages (mxfp8_wide_kernels.cuh), a
// chunk per lane and row: 32 KB of dynamic shared memory in 16-byte chunks, 16 KB in 8-byte ones.
constexpr int kWideStageChunks = kWideRows * kWideThreads;
constexpr int WideStagesBytes(int chunk_bytes) { return 2 * kWideStageChunks * chunk_bytes; }

struct Grid {
  GroupedShape shape;
  int64_t tile_cols;    // columns per CTA tile: blockDim.x * elements per thread strip
  int64_t data_tiles;   // jobs [0, data_tiles) are data tiles, the rest scale tail chunks
  int64_t jobs;         // data tiles + tail chunks
  int64_t ctas;         // CTAs launched: CTA c does jobs c, c + ctas, c + 2 * ctas, ...
  int64_t scale_bytes;  // of each orientation's buffer
  bool aligned;         // every base pointer is 16-byte aligned
  bool wide;            // wide tiles (mxfp8_wide_kernels.cuh), else 8-byte strips
  int threads;          // per CTA
};

// The launch makes as many CTAs as fit on the GPU at once (one wave: no last partial wave), and
// each CTA locates its jobs kJobsPerLocate at a time with one pass of prefix sums over the
// group sizes, spreading that cost over several tiles.
constexpr int kJobsPerLocate = 16;

// Small launches (mxfp8_small_kernels.cuh): no job counter; each warp converts one strip of a
// data tile (its warp job): the tile's rows split among the lanes in batches of kSmallBatch,
// and the lanes of a batch over a strip of the tile's 32 chunks. A tile of up to 8 rows is one
// strip of all 32 chunks, of up to 16 rows two strips of 16 chunks, else four strips of 8.
// CTAs [0, SmallDataCtas) do the warp jobs; quantize's further CTAs zero scale words,
// kSmallScaleWordsPerThread 16-byte words of each scale buffer per thread. Built for
// kMinCtasPerSm CTAs per SM (<= 128 registers; unbounded, ptxas took 139-191 and a decode
// batch's CTAs ran in two or three waves).
constexpr int kSmallThreads = kMaxThreads;  // 4 warps, a warp job each
constexpr int kSmallWarps = kSmallThreads / 32;
constexpr int kSmallBatch = 8;  // rows per lane, whose loads it has in flight at once
constexpr int kSmallScaleWordsPerThread = 4;
__host__ __device__ inline int64_t SmallDataCtas(const Grid& grid) {
  return CeilDiv(grid.data_tiles, kSmallWarps);  // data_tiles: the warp jobs, in small grids
}
// Strips of a tile of `rows` rows (1..32), and of a region's tiles (`rows` rows in all):
// ceil(rows / 8), one more where the last tile has 17 to 24 rows.
__host__ __device__ constexpr int TileStrips(int64_t rows) {
  return rows <= kSmallBatch ? 1 : rows <= 2 * kSmallBatch ? 2 : kTileRows / kSmallBatch;
}
__host__ __device__ constexpr int64_t RegionStrips(int64_t rows) {
  return rows / kTileRows * TileStrips(kTileRows) +
         (rows % kTileRows == 0 ? 0 : TileStrips(rows % kTileRows));
}
// The most strips `regions` regions of `extent` rows in all can have: the most 8-row tiles,
// plus one for each region of 17 rows or more.
__host__ __device__ inline int64_t MaxSumOfStrips(int64_t extent, int64_t regions) {
  return mxfp8::MaxSumOfTiles(extent, regions, kSmallBatch) +
         MinI64(regions, extent / (2 * kSmallBatch + 1));
}

// What one job of a CTA does, identical for all its threads (lives in shared memory).
struct TileJob {
  Region region;
  int64_t row_tile, col_tile;      // tile coordinates inside the region's capacity
  int64_t tail_begin, tail_end;    // scale bytes to zero instead
  bool has_tile;
};

// ceil(a / b) and a / b for a >= 0, b > 0: 32-bit division whenever the operands fit (always,
// in practice). A 64-bit division is a long software routine, and the locate runs several
// per group and thread.
__device__ inline int64_t DivFast(int64_t a, int64_t b) {
  if ((a | b) >> 31 == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}
__device__ inline int64_t CeilDivFast(int64_t a, int64_t b) { return DivFast(a + b - 1, b); }

__device__ inline int64_t RegionColTiles(const Region& r, int64_t tile_cols) {
  return CeilDivFast(r.cap_cols, tile_cols);
}
__device__ inline int64_t RegionTiles(const Region& r, int64_t tile_cols) {
  return CeilDiv(r.cap_rows, kTileRows) * RegionColTiles(r, tile_cols);
}

__device__ inline void SetTile(TileJob& job, const Region& r, int64_t local, int64_t tile_cols) {
  const int64_t col_tiles = RegionColTiles(r, tile_cols);
  job.region = r;
  job.row_tile = DivFast(local, col_tiles);
  job.col_tile = local - job.row_tile * col_tiles;
  job.has_tile = true;
}

// Inclusive prefix sums of N values over the CTA's threads; `total` receives the sums over all
// of them. N values share one pair of barriers.
template <int N>
__device__ inline void BlockInclusiveSums(int64_t (&v)[N], int64_t (&total)[N]) {
  __shared__ int64_t warp_sums[kMaxThreads / 32][N];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const int64_t up = __shfl_up_sync(0xFFFFFFFFu, v[n], d);
      if (lane >= d) v[n] += up;
    }
  }
  if (lane == 31) {
#pragma unroll
    for (int n = 0; n < N; ++n) warp_sums[warp][n] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    int64_t before = 0;
    total[n] = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
      const int64_t s = warp_sums[w][n];
      total[n] += s;
      if (w < warp) before += s;
    }
    v[n] += before;
  }
  __syncthreads();
}

// Job `first + k` of this CTA, and how many of its jobs from `first` on one locate covers.
__device__ inline int64_t JobIndex(const Grid& grid, int64_t first, int k) {
  return static_cast<int64_t>(blockIdx.x) + (first + k) * grid.ctas;
}
__device__ inline int JobCount(const Grid& grid, int64_t first) {
  const int64_t mine = CeilDiv(grid.jobs - static_cast<int64_t>(blockIdx.x), grid.ctas);
  return static_cast<int>(MinI64(kJobsPerLocate, mine - first > 0 ? mine - first : 0));
}

__device__ inline void ClearJob(TileJob& job) {
  job.has_tile = false;
  job.tail_begin = job.tail_end = 0;
}

// Ragged layouts: group g spans [min(E, S_g - n_g), min(E, S_g)) of the ragged extent E, S the
// prefix sum of the clamped sizes n_g; its tiles and scale bytes follow as two more prefix sums
// (one round of barriers). The thread holding a job's group writes that job. All threads must
// call (barriers).
__device__ inline void LocateRaggedJobs(const Grid& grid, const int32_t* group_sizes,
                                        int64_t first, int count, TileJob* jobs) {
  const GroupedShape& s = grid.shape;
  const int64_t extent = mxfp8::RaggedExtent(s);
  if (threadIdx.x < count) ClearJob(jobs[threadIdx.x]);
  __syncthreads();
  int64_t size_before = 0, tiles_before = 0, bytes_before = 0;
  for (int64_t chunk = 0; chunk < s.num_groups; chunk += blockDim.x) {
    const int64_t g = chunk + threadIdx.x;
    const int64_t size = g < s.num_groups ? mxfp8::ClampSize(group_sizes[g], extent) : 0;
    int64_t size_end[1] = {size}, size_total[1];
    BlockInclusiveSums<1>(size_end, size_total);
    size_end[0] += size_before;
    const int64_t begin = MinI64(extent, size_end[0] - size), end = MinI64(extent, size_end[0]);
    const Region region = mxfp8::RaggedRegion(s, begin, end, 0, /*is_group=*/true);
    const int64_t tiles = RegionTiles(region, grid.tile_cols);
    const int64_t bytes = mxfp8::RaggedGroupScaleBytes(s, end - begin);
    int64_t ends[2] = {tiles, bytes}, totals[2];
    BlockInclusiveSums<2>(ends, totals);
    const int64_t tiles_end = tiles_before + ends[0], bytes_end = bytes_before + ends[1];
    for (int k = 0; k < count && tiles > 0; ++k) {
      const int64_t job = JobIndex(grid, first, k);
      if (job >= tiles_end - tiles && job < tiles_end) {
        SetTile(jobs[k], region, job - (tiles_end - tiles), grid.tile_cols);
        jobs[k].region.scale_offset = bytes_end - bytes;
      }
    }
    size_before += size_total[0];
    tiles_before += totals[0];
    bytes_before += totals[1];
  }
  if (threadIdx.x < count) {
    const int k = threadIdx.x;
    const int64_t job = JobIndex(grid, first, k);
    const Region tail = mxfp8::RaggedRegion(s, MinI64(extent, size_before), extent, bytes_before,
                                            /*is_group=*/false);
    if (job >= tiles_before && job < tiles_before + RegionTiles(tail, grid.tile_cols)) {
      SetTile(jobs[k], tail, job - tiles_before, grid.tile_cols);
    } else if (job >= grid.data_tiles) {
      jobs[k].tail_begin = bytes_before + (job - grid.data_tiles) * kTailChunkBytes;
      jobs[k].tail_end = MinI64(grid.scale_bytes, jobs[k].tail_begin + kTailChunkBytes);
    }
  }
  __syncthreads();
}

// Fixed-slot layouts: plain division; tail chunks zero the unused end of each slot.
__device__ inline void LocateSlotJob(const Grid& grid, const int32_t* group_sizes, int64_t cta,
                              TileJob& job) {
  const GroupedShape& s = grid.shape;
  ClearJob(job);
  if (cta < grid.data_tiles) {
    const int64_t per_slot = CeilDiv(s.rows, kTileRows) * CeilDivFast(s.cols, grid.tile_cols);
    const int64_t slot = DivFast(cta, per_slot);
    SetTile(job, mxfp8::SlotRegion(s, group_sizes, slot), cta - slot * per_slot, grid.tile_cols);
    return;
  }
  const int64_t slot_bytes = mxfp8::GroupScaleBytes(s.rows, s.cols);
  const int64_t chunks_per_slot = CeilDiv(slot_bytes, kTailChunkBytes);
  const int64_t chunk = cta - grid.data_tiles;
  const Region r = mxfp8::SlotRegion(s, group_sizes, chunk / chunks_per_slot);
  const int64_t slot_end = r.scale_offset + slot_bytes;
  job.tail_begin = r.scale_offset + mxfp8::GroupScaleBytes(r.rows, r.cols) +
                   (chunk % chunks_per_slot) * kTailChunkBytes;
  job.tail_end = MinI64(slot_end, job.tail_begin + kTailChunkBytes);
}

// Fills jobs[k] with this CTA's job first + k for k < the count returned (0: no jobs left);
// all threads must call (barriers).
__device__ inline int LocateJobs(const Grid& grid, const int32_t* group_sizes, int64_t first,
                                 TileJob* jobs) {
  const int count = JobCount(grid, first);
  if (count == 0) return 0;
  if (grid.shape.layout == GroupedLayout::kVaryingFirst ||
      grid.shape.layout == GroupedLayout::kVaryingLast) {
    LocateRaggedJobs(grid, group_sizes, first, count, jobs);
    return count;
  }
  if (threadIdx.x < count) {
    LocateSlotJob(grid, group_sizes, JobIndex(grid, first, threadIdx.x), jobs[threadIdx.x]);
  }
  __syncthreads();
  return count;
}

// Inclusive prefix sums over the groups of a ragged layout (clamped sizes, then the tiles and
// scale bytes of each group), computed once per CTA into shared memory so that locating any
// job is a count over them (GroupOfTile). Ragged calls with more groups take the static path.
constexpr int kCachedGroups = 512;
struct GroupPrefix {
  int64_t size_end[kCachedGroups];
  int64_t tiles_end[kCachedGroups];
  int64_t bytes_end[kCachedGroups];
};

__host__ __device__ inline bool RaggedLayout(const GroupedShape& s) {
  return s.layout == GroupedLayout::kVaryingFirst || s.layout == GroupedLayout::kVaryingLast;
}

// Whether a launch with this job counter (null: none) hands out jobs dynamically.
__host__ __device__ inline bool DynamicJobs(const Grid& grid, const void* counter) {
  return counter != nullptr && (!RaggedLayout(grid.shape) || grid.shape.num_groups <= kCachedGroups);
}

// All threads must call (barriers).
__device__ inline void BuildGroupPrefix(const Grid& grid, const int32_t* group_sizes,
                                        GroupPrefix& prefix) {
  const GroupedShape& s = grid.shape;
  const int64_t extent = mxfp8::RaggedExtent(s);
  int64_t before[3] = {0, 0, 0};
  for (int64_t chunk = 0; chunk < s.num_groups; chunk += blockDim.x) {
    const int64_t g = chunk + threadIdx.x;
    const int64_t size = g < s.num_groups ? mxfp8::ClampSize(group_sizes[g], extent) : 0;
    int64_t size_end[1] = {size}, size_total[1];
    BlockInclusiveSums<1>(size_end, size_total);
    size_end[0] += before[0];
    const int64_t begin = MinI64(extent, size_end[0] - size), end = MinI64(extent, size_end[0]);
    const Region region = mxfp8::RaggedRegion(s, begin, end, 0, /*is_group=*/true);
    int64_t ends[2] = {RegionTiles(region, grid.tile_cols),
                       mxfp8::RaggedGroupScaleBytes(s, end - begin)};
    int64_t totals[2];
    BlockInclusiveSums<2>(ends, totals);
    if (g < s.num_groups) {
      prefix.size_end[g] = size_end[0];
      prefix.tiles_end[g] = before[1] + ends[0];
      prefix.bytes_end[g] = before[2] + ends[1];
    }
    before[0] += size_total[0];
    before[1] += totals[0];
    before[2] += totals[1];
  }
  __syncthreads();
}

// The group holding data tile `job` (< the groups' tiles): how many groups end at or before it,
// counted by the whole warp over slices of 128 groups, 4 per lane, with one reduction each. Its
// loads do not wait on each other, where a binary search waits on one per halving: 7 for 128
// groups cost an activation's "both" quantize 7% at 3 CTAs per SM (ncu, H200, 2026-11-29).
// Whole warps must call, with the same job (no barrier).
__device__ inline int GroupOfTile(const GroupPrefix& prefix, int groups, int64_t job) {
  constexpr int kPerLane = 4, kSlice = 32 * kPerLane;
  const int lane = threadIdx.x & 31;
  int before = 0;
  for (int base = 0; base < groups; base += kSlice) {
    unsigned ended = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int g = base + 32 * i + lane;
      ended += g < groups && prefix.tiles_end[g] <= job ? 1u : 0u;
    }
    const int slice_ended = static_cast<int>(__reduce_add_sync(0xFFFFFFFFu, ended));
    before += slice_ended;
    if (slice_ended < kSlice) break;  // prefix sums grow: the job's group is in this slice
  }
  return before;
}

// Job `job` of a ragged layout from the cached prefix sums (whole warps with the same job, no
// barrier).
__device__ inline TileJob LocateCachedRaggedJob(const Grid& grid, const GroupPrefix& prefix,
                                                int64_t job) {
  const GroupedShape& s = grid.shape;
  const int64_t extent = mxfp8::RaggedExtent(s);
  const int64_t groups = s.num_groups;
  TileJob out;
  ClearJob(out);
  const int64_t tiles_total = groups > 0 ? prefix.tiles_end[groups - 1] : 0;
  const int64_t size_total = groups > 0 ? prefix.size_end[groups - 1] : 0;
  const int64_t bytes_total = groups > 0 ? prefix.bytes_end[groups - 1] : 0;
  if (job < tiles_total) {
    const int lo = GroupOfTile(prefix, static_cast<int>(groups), job);
    const int64_t size_before = lo > 0 ? prefix.size_end[lo - 1] : 0;
    const int64_t tiles_before = lo > 0 ? prefix.tiles_end[lo - 1] : 0;
    const Region region = mxfp8::RaggedRegion(s, MinI64(extent, size_before),
                                              MinI64(extent, prefix.size_end[lo]), 0,
                                              /*is_group=*/true);
    SetTile(out, region, job - tiles_before, grid.tile_cols);
    out.region.scale_offset = lo > 0 ? prefix.bytes_end[lo - 1] : 0;
    return out;
  }
  const Region tail = mxfp8::RaggedRegion(s, MinI64(extent, size_total), extent, bytes_total,
                                          /*is_group=*/false);
  if (job < tiles_total + RegionTiles(tail, grid.tile_cols)) {
    SetTile(out, tail, job - tiles_total, grid.tile_cols);
  } else if (job >= grid.data_tiles) {
    out.tail_begin = bytes_total + (job - grid.data_tiles) * kTailChunkBytes;
    out.tail_end = MinI64(grid.scale_bytes, out.tail_begin + kTailChunkBytes);
  }
  return out;
}

// Runs do_job(job, round, more) for every job of the call. CTA c's first two jobs are c and
// c + ctas, so no counter round trip comes before its first loads (per-CTA timer stamps put the
// two trips at 0.5 us of a ragged call's start); each later job goes to whichever CTA asks next
// from `counter` (zero at launch; it hands out jobs 2 * ctas on), so CTAs on less loaded SMs
// take more and all end together. Job indices are asked for two rounds ahead, and
// prefetch(next, round + 1) runs before do_job(job, round) (more: a next job was prefetched),
// so a kernel can have the next job's loads in flight while it converts the current one. All
// threads must call.
template <typename Prefetch, typename DoJob>
__device__ inline void ForEachDynamicJob(const Grid& grid, const int32_t* group_sizes,
                                         unsigned long long* counter, Prefetch prefetch,
                                         DoJob do_job) {
  __shared__ GroupPrefix prefix;
  __shared__ int64_t fetched[3];  // index of round r in slot r % 3, from round 2 on
  const bool ragged = RaggedLayout(grid.shape);
  if (ragged) BuildGroupPrefix(grid, group_sizes, prefix);
  const auto locate = [&](int64_t index) {
    TileJob job;
    if (ragged) {
      job = LocateCachedRaggedJob(grid, prefix, index);
    } else {
      LocateSlotJob(grid, group_sizes, index, job);
    }
    return job;
  };
  // Indices grow from round to round: once one is past the end, so are all later ones.
  const int64_t first_index = blockIdx.x, dynamic_base = 2 * grid.ctas;
  if (first_index >= grid.jobs) return;
  TileJob job = locate(first_index);
  prefetch(job, 0);
  for (int round = 0;; ++round) {
    const int64_t next_index = round == 0 ? first_index + grid.ctas : fetched[(round + 1) % 3];
    unsigned long long later = 0;
    if (threadIdx.x == 0) later = atomicAdd(counter, 1ull);
    const bool more = next_index < grid.jobs;  // the same for every thread
    TileJob next;
    if (more) {
      next = locate(next_index);
      prefetch(next, round + 1);
    }
    do_job(job, round, more);
    if (threadIdx.x == 0) fetched[(round + 2) % 3] = dynamic_base + static_cast<int64_t>(later);
    __syncthreads();  // publishes round + 2's index; the slot written was last read a round ago
    if (!more) return;
    job = next;
  }
}

// The CTA's static share of the jobs (c, c + ctas, ...), located kJobsPerLocate at a time:
// prefetch(job, 0) then do_job(job, 0, false) for each. All threads must call.
template <typename Prefetch, typename DoJob>
__device__ inline void ForEachStaticJob(const Grid& grid, const int32_t* group_sizes,
                                        Prefetch prefetch, DoJob do_job) {
  __shared__ TileJob jobs[kJobsPerLocate];
  for (int64_t first = 0;; first += kJobsPerLocate) {
    const int count = LocateJobs(grid, group_sizes, first, jobs);
    if (count == 0) return;
    for (int k = 0; k < count; ++k) {
      const TileJob job = jobs[k];
      prefetch(job, 0);
      do_job(job, 0, false);
    }
    __syncthreads();  // every thread is done with jobs[] before the next locate rewrites it
  }
}

// Every job of the call through prefetch / do_job (see ForEachDynamicJob): dynamically when
// the launch passes a zeroed `counter` (and a ragged call has at most kCachedGroups groups),
// else the CTA's static share. All threads of the CTA must call.
template <typename Prefetch, typename DoJob>
__device__ inline void ForEachPrefetchedJob(const Grid& grid, const int32_t* group_sizes,
                                            unsigned long long* counter, Prefetch prefetch,
                                            DoJob do_job) {
  if (DynamicJobs(grid, counter)) {
    ForEachDynamicJob(grid, group_sizes, counter, prefetch, do_job);
  } else {
    ForEachStaticJob(grid, group_sizes, prefetch, do_job);
  }
}

// Runs do_job(job) for each job of the call (no prefetch). All threads must call.
template <typename DoJob>
__device__ inline void ForEachJob(const Grid& grid, const int32_t* group_sizes,
                                  unsigned long long* counter, DoJob do_job) {
  ForEachPrefetchedJob(
      grid, group_sizes, counter, [](const TileJob&, int) {},
      [&](const TileJob& job, int, bool) { do_job(job); });
}

__device__ inline void ZeroScaleBytes(uint8_t* scales, int64_t begin, int64_t end, bool aligned) {
  if (scales == nullptr || begin >= end) return;
  // Offsets and sizes are multiples of 512 bytes: whole 16-byte stores when the base allows.
  if (aligned && begin % 16 == 0 && end % 16 == 0) {
    for (int64_t i = begin + 16 * threadIdx.x; i < end; i += 16 * blockDim.x) {
      *reinterpret_cast<uint4*>(scales + i) = make_uint4(0, 0, 0, 0);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) scales[i] = 0;
}

// Zeroes the padding of a group's padded scale matrix that this tile owns: the tile of the last
// (extent) column tile owns the padded columns of its rows, the tile of the last row tile the
// padded rows under its columns. Real scales are written by the tile holding their data.
__device__ inline void ZeroOwnedScalePadding(const Region& r, int64_t row_tile, int64_t col_tile,
                                      int64_t tile_cols, bool colwise, bool swizzled,
                                      uint8_t* scales) {
  if (scales == nullptr || r.rows == 0 || r.cols == 0) return;
  const int64_t row_tiles = CeilDiv(r.rows, kTileRows), col_tiles = CeilDiv(r.cols, tile_cols);
  if (row_tile >= row_tiles || col_tile >= col_tiles) return;
  const bool last_row = row_tile == row_tiles - 1, last_col = col_tile == col_tiles - 1;
  if (!last_row && !last_col) return;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, colwise);
  // Scale rows / columns per tile: rowwise 32 rows x tile_cols/32 blocks, colwise 1 x tile_cols.
  const int64_t rows_per_tile = colwise ? 1 : kTileRows;
  const int64_t cols_per_tile = colwise ? tile_cols : tile_cols / kBlockSize;
  const int64_t i0 = row_tile * rows_per_tile, j0 = col_tile * cols_per_tile;
  const int64_t i1 = last_row ? m.padded_rows : i0 + rows_per_tile;
  const int64_t j1 = last_col ? m.padded_cols : j0 + cols_per_tile;
  // Thread k zeroes elements k, k + blockDim.x, ... of the [i1 - i0, width] block, stepping its
  // row and column rather than dividing each index by the width (a decode batch's quantize spent
  // a quarter of its instructions in those divisions: ncu, H100, 2026-11-25). Both extents are
  // at most a tile's scale rows or columns plus one 128x4 tile's padding: 32-bit.
  const int32_t width = static_cast<int32_t>(j1 - j0), rows = static_cast<int32_t>(i1 - i0);
  if (width <= 0 || rows <= 0) return;
  const int32_t step_rows = static_cast<int32_t>(blockDim.x) / width;
  const int32_t step_cols = static_cast<int32_t>(blockDim.x) - step_rows * width;
  int32_t row = static_cast<int32_t>(threadIdx.x) / width;
  int32_t col = static_cast<int32_t>(threadIdx.x) - row * width;
  while (row < rows) {
    const int64_t i = i0 + row, j = j0 + col;
    if (i >= m.rows || j >= m.cols) {
      scales[r.scale_offset + mxfp8::ScaleIndex(m, colwise, swizzled, i, j)] = 0;
    }
    row += step_rows;
    col += step_cols;
    if (col >= width) {
      col -= width;
      ++row;
    }
  }
}
}  // namespace jgg::cuda::mxfp8_kernels

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_JOBS_CUH_
