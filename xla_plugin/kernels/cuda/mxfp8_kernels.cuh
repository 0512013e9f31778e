// Grouped MXFP8 quantize / dequantize on Hopper: memory-bound streaming kernels.
//
// Job: a tile of 32 rows (one colwise block) x tile_cols columns of one region (a group, or the
// zero tail; see common/mxfp8_layout.h), or a chunk of scale bytes to zero. Each thread owns an
// 8-byte column strip (4 bf16/f16 or 2 f32 values; dequantize: 4 fp8 bytes) of all 32 rows and
// issues the 32 loads of its strip before it uses any (256 bytes in flight per thread), so:
//   rowwise: a 32-element block spans 32 / 4 = 8 (or 16) neighbouring lanes: amax by xor-shuffle
//            (two rows per shuffle, packed);
//   colwise: a thread holds whole 32x1 blocks of its columns: amax and conversion in registers;
//   both:    one read of the input from DRAM does both (the rows wait in shared memory between
//            the two passes), nothing is read twice from DRAM.
// Tiles never span two groups (tiles restart at every group boundary), which is what makes any
// group size valid. The grid is one wave (as many CTAs as fit on the GPU); a CTA takes its jobs
// one after another from a job counter that the handler zeroes (so CTAs on less loaded SMs take
// more), finding each job's group by a binary search over the groups' prefix sums, computed
// once per CTA with block-wide scans of the device group sizes (no separate setup launch;
// without a counter, each CTA does every ctas-th job, locating 16 at a time). The scale bytes
// that hold no real scale (128x4 tile padding, the unused tail of the worst-case buffer) are
// zeroed by the CTAs that own them: one launch per call. Tiles wholly inside their group (nearly all) take a path
// with no per-row bounds or scalar fallbacks: at 4 elements per thread and row, those cost more
// instructions than the conversion. Elements use the hardware cvt.rn.satfinite (bit-identical
// to common/mxfp8_math.h's integer rounding, which the CPU path uses; the tests compare both
// with one NumPy reference).
//
// Device code and launch geometry only (the launches are in mxfp8_cuda.cu), so that
// tests/test_mxfp8_emulated.py can run these exact kernels on the CPU under a SIMT emulator.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_KERNELS_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_KERNELS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_math.h"
#include "xla_plugin/common/mxfp8_problem.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"

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
constexpr int kMinCtasPerSmBoth = 3;  // 166 registers, no spills (at 128: 200 bytes spilled)
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
// job is a binary search. Ragged calls with more groups take the static path.
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

// Job `job` of a ragged layout from the cached prefix sums (any thread, no barrier).
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
    int64_t lo = 0, hi = groups - 1;  // the first group whose tiles end past the job
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (prefix.tiles_end[mid] > job) hi = mid; else lo = mid + 1;
    }
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

// Runs do_job(job, round, more) for every job of the call, each taken by whichever CTA asks for
// it next from `counter` (zero at launch): CTAs on less loaded SMs take more jobs, so all end
// together. Job indices are asked for two rounds ahead, and prefetch(next, round + 1) runs
// before do_job(job, round) (more: a next job was prefetched), so a kernel can have the next
// job's loads in flight while it converts the current one. All threads must call.
template <typename Prefetch, typename DoJob>
__device__ inline void ForEachDynamicJob(const Grid& grid, const int32_t* group_sizes,
                                         unsigned long long* counter, Prefetch prefetch,
                                         DoJob do_job) {
  __shared__ GroupPrefix prefix;
  __shared__ unsigned long long fetched[3];  // indices of rounds r, r + 1, r + 2 (mod 3)
  const bool ragged = RaggedLayout(grid.shape);
  if (ragged) BuildGroupPrefix(grid, group_sizes, prefix);
  if (threadIdx.x == 0) {
    fetched[0] = atomicAdd(counter, 1ull);
    fetched[1] = atomicAdd(counter, 1ull);
  }
  __syncthreads();
  const auto locate = [&](int64_t index) {
    TileJob job;
    if (ragged) {
      job = LocateCachedRaggedJob(grid, prefix, index);
    } else {
      LocateSlotJob(grid, group_sizes, index, job);
    }
    return job;
  };
  // Indices grow with every fetch: once one is past the end, so are all later ones.
  if (static_cast<int64_t>(fetched[0]) >= grid.jobs) return;
  TileJob job = locate(static_cast<int64_t>(fetched[0]));
  prefetch(job, 0);
  for (int round = 0;; ++round) {
    const int64_t next_index = static_cast<int64_t>(fetched[(round + 1) % 3]);
    unsigned long long later = 0;
    if (threadIdx.x == 0) later = atomicAdd(counter, 1ull);
    const bool more = next_index < grid.jobs;  // the same for every thread
    TileJob next;
    if (more) {
      next = locate(next_index);
      prefetch(next, round + 1);
    }
    do_job(job, round, more);
    if (threadIdx.x == 0) fetched[(round + 2) % 3] = later;
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

// --- 8-byte strips of elements -----------------------------------------------------------------

// Element k of T elements packed little-endian in 32-bit words, as f32 (exact).
template <typename T>
__device__ inline float PackedValue(const uint32_t* w, int k) {
  if constexpr (sizeof(T) == 4) return __uint_as_float(w[k]);
  const uint32_t bits = (w[k / 2] >> (16 * (k % 2))) & 0xFFFFu;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(bits << 16);
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// Rows of a 32-row tile that lie below `remaining` rows of the region (clamped to [0, 32]).
__device__ inline int TileRowsBelow(int64_t remaining) {
  return remaining <= 0 ? 0 : remaining >= kTileRows ? kTileRows : static_cast<int>(remaining);
}

template <typename T>
struct Strip {
  static constexpr int kCount = kStripBytes / sizeof(T);
  static constexpr int kBits = 8 * sizeof(T);
  static __device__ float Get(const uint2& v, int k) {
    const uint32_t w[2] = {v.x, v.y};
    return PackedValue<T>(w, k);
  }
  // The first `count` elements at `p` (the rest 0), element by element: ragged edges and
  // unaligned pointers (whole aligned strips take one 8-byte load instead).
  static __device__ uint2 LoadPartial(const T* p, int64_t count) {
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      if (k < count) {
        if constexpr (kBits == 32) {
          w[k] = __ldg(reinterpret_cast<const uint32_t*>(p) + k);
        } else {
          w[k / 2] |= static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p) + k))
                      << (16 * (k % 2));
        }
      }
    }
    return make_uint2(w[0], w[1]);
  }
};

// Stores n <= 4 fp8 bytes (packed little-endian in `bytes`) at p: one store when whole/aligned.
template <int kCount>
__device__ inline void StoreBytes(uint8_t* p, uint32_t bytes, int64_t count, bool vector) {
  if (count >= kCount && vector) {
    if constexpr (kCount == 4) {
      *reinterpret_cast<uint32_t*>(p) = bytes;
    } else {
      *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(bytes);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    if (k < count) p[k] = static_cast<uint8_t>(bytes >> (8 * k));
  }
}

// --- element math (hardware) ----------------------------------------------------------------

template <Fp8Format kFormat>
__device__ inline float MaxNormRcp() {
  return __uint_as_float(kFormat == Fp8Format::kE4M3 ? 0x3B124925u : 0x37924925u);
}

// TE's float_to_e8m0(amax * fl32(1/max_norm)) with the FPU: the GPU multiplies denormals
// exactly (no ftz), so this equals mxfp8::ScaleExponent's integer rounding. amax is never NaN
// here (maxima start at 0 and ignore NaN), so s is finite or +Inf, and the rounding up to a power
// of two is one add: a non-zero mantissa carries into the exponent; the clamp keeps exponent
// 0xFE and Inf at 0xFE (TE never rounds up to 0xFF), and fp32-denormal s <= 2^-127 gives 0.
template <Fp8Format kFormat>
__device__ inline uint8_t ScaleExponentOf(float amax) {
  const uint32_t s = __float_as_uint(__fmul_rn(amax, MaxNormRcp<kFormat>()));
  const uint32_t e = (s + 0x7FFFFFu) >> 23;
  return s <= 0x400000u ? 0 : static_cast<uint8_t>(e < 0xFEu ? e : 0xFEu);
}

// The library's fp8 NaN is 0x7F whatever the sign or payload (the CPU path writes the same).
// satfinite turns every finite or infinite input into a finite byte and a NaN into a NaN byte,
// so fixing the NaN bytes of 4 packed results at once replaces a test per element: a byte is
// NaN when its low 7 bits exceed the largest finite (0x7E e4m3, 0x7B e5m2), i.e. when adding
// 0x01 (0x04) carries into bit 7; such bytes become 0x7F. e4m3's only NaN bytes are 0x7F and
// 0xFF, so clearing bit 7 is the whole fix there (ncu, H100: 6% fewer instructions in the bf16
// rowwise + colwise kernel, 2-3% less time).
template <Fp8Format kFormat>
__device__ inline uint32_t CanonicalNaNBytes(uint32_t bytes) {
  constexpr uint32_t kCarry = kFormat == Fp8Format::kE4M3 ? 0x01010101u : 0x04040404u;
  const uint32_t nan = ((bytes & 0x7F7F7F7Fu) + kCarry) & 0x80808080u;  // bit 7 of NaN bytes
  if constexpr (kFormat == Fp8Format::kE4M3) return bytes & ~nan;
  return (bytes & ~nan) | (nan - (nan >> 7));                          // 0x7F in NaN bytes
}

// Elementwise max(a, |b|) of two packed pairs of 16-bit elements (a >= 0), a NaN ignored as
// fmaxf ignores it (max.bf16x2 / max.f16x2 return the other operand; two NaNs give NaN):
// maxima without unpacking the elements.
template <typename T>
__device__ inline uint32_t AbsMaxPair(uint32_t a, uint32_t b) {
  using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
  const Pair m =
      __hmax2(*reinterpret_cast<const Pair*>(&a), __habs2(*reinterpret_cast<const Pair*>(&b)));
  return *reinterpret_cast<const uint32_t*>(&m);
}

// kCount packed elements scaled by their blocks' factors, as packed fp8 bytes (element k in
// byte k of `bytes`, ceil(kCount / 4) words).
template <typename In, Fp8Format kFormat, int kCount>
__device__ inline void QuantizePacked(const uint32_t* w, const float* factor, uint32_t* bytes) {
  constexpr __nv_fp8_interpretation_t kKind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
#pragma unroll
  for (int b = 0; b < (kCount + 3) / 4; ++b) bytes[b] = 0;
#pragma unroll
  for (int k = 0; k < kCount; k += 2) {
    const uint32_t pair = __nv_cvt_float2_to_fp8x2(
        make_float2(__fmul_rn(PackedValue<In>(w, k), factor[k]),
                    __fmul_rn(PackedValue<In>(w, k + 1), factor[k + 1])),
        __NV_SATFINITE, kKind);
    bytes[k / 4] |= pair << (8 * (k % 4));
  }
#pragma unroll
  for (int b = 0; b < (kCount + 3) / 4; ++b) bytes[b] = CanonicalNaNBytes<kFormat>(bytes[b]);
}

// The strip's elements scaled by their blocks' factors, as packed fp8 bytes.
template <typename In, Fp8Format kFormat>
__device__ inline uint32_t QuantizeStrip(const uint2& v, const float* factor) {
  const uint32_t w[2] = {v.x, v.y};
  uint32_t bytes[1];
  QuantizePacked<In, kFormat, Strip<In>::kCount>(w, factor, bytes);
  return bytes[0];
}

// --- quantize ---------------------------------------------------------------------------------

// Where one thread's strip of a tile lives. kFull (whole tile inside the region's data and
// capacity, vector access): the compiler drops every per-row bound and scalar path, which
// otherwise cost more instructions than the conversion itself; the choice is per CTA, so that
// shuffles stay in one code path per warp.
struct StripSpan {
  int64_t stride;     // elements between rows
  int64_t base;       // element offset of the strip's first element
  int64_t col0;       // region-relative column of the strip
  int64_t data_cols;  // strip columns (from col0) holding group data, and inside the capacity
  int64_t cap_cols;
  int data_rows;      // tile rows holding group data (the rest read as 0) / inside the capacity
  int cap_rows;
  bool vector;        // whole-strip accesses are aligned
};

template <int kVec>
__device__ inline StripSpan MakeStripSpan(const Grid& grid, const TileJob& job) {
  const Region& r = job.region;
  StripSpan t;
  t.stride = grid.shape.cols;
  const int64_t row0 = job.row_tile * kTileRows;
  t.col0 = job.col_tile * grid.tile_cols + threadIdx.x * kVec;
  t.base = r.elem_offset + row0 * t.stride + t.col0;
  t.data_cols = r.cols - t.col0;
  t.cap_cols = r.cap_cols - t.col0;
  t.data_rows = t.data_cols > 0 ? TileRowsBelow(r.rows - row0) : 0;
  t.cap_rows = t.cap_cols > 0 ? TileRowsBelow(r.cap_rows - row0) : 0;
  t.vector = grid.aligned && r.elem_offset % kVec == 0 && t.stride % kVec == 0;
  return t;
}

// The same for every thread of the CTA: the whole tile holds data and is written with vectors.
__device__ inline bool FullTile(const Grid& grid, const TileJob& job) {
  const Region& r = job.region;
  const int64_t row_end = (job.row_tile + 1) * kTileRows;
  const int64_t col_end = (job.col_tile + 1) * grid.tile_cols;
  return grid.aligned && r.elem_offset % 4 == 0 && grid.shape.cols % 4 == 0 &&
         row_end <= r.rows && row_end <= r.cap_rows && col_end <= r.cols && col_end <= r.cap_cols;
}

// Amax over their 32-element blocks of two rows, each kWords packed words of In per lane (the
// lanes of a block exchange by xor-shuffle; full-warp shuffles). 16-bit elements: both rows
// travel in one packed word, halving the shuffles; NaN is ignored as fmaxf ignores it.
template <typename In, int kLanesPerBlock, int kWords>
__device__ inline void PairRowAmax(const uint32_t (&a)[kWords], const uint32_t (&b)[kWords],
                                   float (&amax)[2]) {
  if constexpr (sizeof(In) == 4) {
    const uint32_t* rows[2] = {a, b};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      amax[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kWords; ++k) amax[u] = fmaxf(amax[u], fabsf(__uint_as_float(rows[u][k])));
#pragma unroll
      for (int d = 1; d < kLanesPerBlock; d <<= 1) {
        amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xFFFFFFFFu, amax[u], d));
      }
    }
  } else {
    uint32_t ma = 0, mb = 0;
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      ma = AbsMaxPair<In>(ma, a[k]);
      mb = AbsMaxPair<In>(mb, b[k]);
    }
    // (row a, row b) of the even and of the odd columns
    uint32_t m = AbsMaxPair<In>((ma & 0xFFFFu) | (mb << 16), (ma >> 16) | (mb & 0xFFFF0000u));
#pragma unroll
    for (int d = 1; d < kLanesPerBlock; d <<= 1) {
      m = AbsMaxPair<In>(m, __shfl_xor_sync(0xFFFFFFFFu, m, d));
    }
    amax[0] = PackedValue<In>(&m, 0);
    amax[1] = PackedValue<In>(&m, 1);
  }
}

// All 32 rows of a thread's strip are loaded before any is used: the loads of the whole tile
// are in flight at once and both orientations convert from the same registers.
template <typename In, bool kRow, bool kCol, Fp8Format kFormat, bool kFull>
__device__ void QuantizeStrips(const mxfp8::QuantizeOperands& o, bool swizzled,
                               const TileJob& job, const StripSpan& t, uint32_t* stash) {
  using S = Strip<In>;
  constexpr int kVec = S::kCount;
  constexpr int kLanesPerBlock = kBlockSize / kVec;
  const Region& r = job.region;
  const int data_rows = kFull ? kTileRows : t.data_rows;
  const int cap_rows = kFull ? kTileRows : t.cap_rows;
  const bool vector = kFull || t.vector;
  const int64_t stride = t.stride;
  // Distinct buffers (XLA never aliases an operand with a result here): lets the compiler
  // keep all loads ahead of the stores.
  const In* __restrict__ x = static_cast<const In*>(o.x) + t.base;

  uint2 v[kTileRows];
  if (kFull || (vector && t.data_cols >= kVec)) {
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      v[i] = i < data_rows ? __ldg(reinterpret_cast<const uint2*>(x + i * stride))
                           : make_uint2(0, 0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      v[i] = i < data_rows ? S::LoadPartial(x + i * stride, t.data_cols) : make_uint2(0, 0);
    }
  }

  // Colwise scales first (packed maxima over the registers), then the rowwise pass, then the
  // colwise conversions.
  float col_factor[kVec];
  if constexpr (kCol) {
    float col_max[kVec];
    if constexpr (S::kBits == 16) {
      uint32_t acc[2] = {0, 0};  // packed |x| maxima of columns (0, 1) and (2, 3)
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
        acc[0] = AbsMaxPair<In>(acc[0], v[i].x);
        acc[1] = AbsMaxPair<In>(acc[1], v[i].y);
      }
#pragma unroll
      for (int k = 0; k < kVec; ++k) col_max[k] = S::Get(make_uint2(acc[0], acc[1]), k);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) col_max[k] = 0.0f;
#pragma unroll
      for (int i = 0; i < kTileRows; ++i) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) col_max[k] = fmaxf(col_max[k], fabsf(S::Get(v[i], k)));
      }
    }
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/true);
    uint32_t scale_bytes = 0;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const uint8_t e = ScaleExponentOf<kFormat>(col_max[k]);
      scale_bytes |= static_cast<uint32_t>(e) << (8 * k);
      col_factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
    }
    if (data_rows > 0) {
      // Compact scales of kVec neighbouring columns are contiguous and aligned (offsets are
      // multiples of 512, rows of 128): one store; swizzled ones are 16 bytes apart.
      if (!swizzled) {
        StoreBytes<kVec>(
            o.col_scales + r.scale_offset + mxfp8::ScaleIndex(m, true, false, job.row_tile, t.col0),
            scale_bytes, t.data_cols, vector);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (k < t.data_cols) {
            o.col_scales[r.scale_offset +
                         mxfp8::ScaleIndex(m, true, true, job.row_tile, t.col0 + k)] =
                static_cast<uint8_t>(scale_bytes >> (8 * k));
          }
        }
      }
    }
  }

  // "Both": the tile goes to shared memory and each pass reads its rows back from there (a
  // thread reads only its own words: no barrier), so the registers of the loads die here. Held
  // in registers, ptxas interleaves the two passes and needs 254 registers (or spills).
  constexpr bool kStash = kRow && kCol;
  if constexpr (kStash) {
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      volatile uint32_t* p = stash + 2 * i * kMaxThreads + threadIdx.x;
      p[0] = v[i].x;
      p[kMaxThreads] = v[i].y;
    }
  }
  auto row_bits = [&](int i) -> uint2 {
    if constexpr (kStash) {
      const volatile uint32_t* p = stash + 2 * i * kMaxThreads + threadIdx.x;
      return make_uint2(p[0], p[kMaxThreads]);
    } else {
      return v[i];
    }
  };

  // Rowwise scale (row0 + i, block): rows are padded_cols bytes apart compact, 16 bytes apart
  // swizzled (the 32 rows of a tile share their 128x4 tile and its row group).
  uint8_t* __restrict__ row_scale = nullptr;
  int64_t row_scale_step = 0;
  if constexpr (kRow) {
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/false);
    row_scale = o.row_scales + r.scale_offset +
                mxfp8::ScaleIndex(m, false, swizzled, job.row_tile * kTileRows,
                                  t.col0 / kBlockSize);
    row_scale_step = swizzled ? 16 : m.padded_cols;
  }
  if constexpr (kRow) {
    const bool writes_scale = threadIdx.x % kLanesPerBlock == 0 && (kFull || t.data_cols > 0);
    uint8_t* __restrict__ out = o.row_data + t.base;
#pragma unroll
    for (int i = 0; i < kTileRows; i += 2) {
      // All lanes shuffle (full-warp shuffles), whatever their rows and columns.
      const uint2 rows[2] = {row_bits(i), row_bits(i + 1)};
      float amax[2];
      const uint32_t w0[2] = {rows[0].x, rows[0].y}, w1[2] = {rows[1].x, rows[1].y};
      PairRowAmax<In, kLanesPerBlock, 2>(w0, w1, amax);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int row = i + u;
        const uint8_t e = ScaleExponentOf<kFormat>(amax[u]);
        if (writes_scale && row < data_rows) row_scale[row * row_scale_step] = e;
        if (row < cap_rows) {
          float factor[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
          StoreBytes<kVec>(out + row * stride, QuantizeStrip<In, kFormat>(rows[u], factor),
                           kFull ? kVec : t.cap_cols, vector);
        }
      }
    }
  }
  if constexpr (kCol) {
    uint8_t* __restrict__ out = o.col_data + t.base;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) {
      if (i < cap_rows) {
        StoreBytes<kVec>(out + i * stride, QuantizeStrip<In, kFormat>(row_bits(i), col_factor),
                         kFull ? kVec : t.cap_cols, vector);
      }
    }
  }
}

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__device__ void QuantizeTile(const Grid& grid, const mxfp8::QuantizeOperands& o, bool swizzled,
                             const TileJob& job) {
  // "Both": the tile's rows, word w of row i of thread t at [(2 * i + w) * kMaxThreads + t].
  __shared__ uint32_t stash[kRow && kCol ? 2 * kTileRows * kMaxThreads : 1];
  const StripSpan t = MakeStripSpan<Strip<In>::kCount>(grid, job);
  if (FullTile(grid, job)) {
    QuantizeStrips<In, kRow, kCol, kFormat, true>(o, swizzled, job, t, stash);
  } else {
    QuantizeStrips<In, kRow, kCol, kFormat, false>(o, swizzled, job, t, stash);
  }
  if constexpr (kRow) {
    ZeroOwnedScalePadding(job.region, job.row_tile, job.col_tile, grid.tile_cols, false, swizzled,
                          o.row_scales);
  }
  if constexpr (kCol) {
    ZeroOwnedScalePadding(job.region, job.row_tile, job.col_tile, grid.tile_cols, true, swizzled,
                          o.col_scales);
  }
}

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__global__ void __launch_bounds__(kMaxThreads, kRow && kCol ? kMinCtasPerSmBoth : kMinCtasPerSm)
    QuantizeKernel(Grid grid, mxfp8::QuantizeOperands o, bool swizzled) {
  ForEachJob(grid, o.group_sizes, o.job_counter, [&](const TileJob& job) {
    if (job.has_tile) {
      QuantizeTile<In, kRow, kCol, kFormat>(grid, o, swizzled, job);
    } else {
      ZeroScaleBytes(o.row_scales, job.tail_begin, job.tail_end, grid.aligned);
      ZeroScaleBytes(o.col_scales, job.tail_begin, job.tail_end, grid.aligned);
    }
  });
}

// --- dequantize -------------------------------------------------------------------------------

template <typename Out>
__device__ inline uint32_t OutBits(float y) {
  if constexpr (std::is_same_v<Out, float>) {
    return isnan(y) ? 0x7FC00000u : __float_as_uint(y);
  } else if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
    return isnan(y) ? 0x7FC0u : __bfloat16_as_ushort(__float2bfloat16_rn(y));
  } else {
    return isnan(y) ? 0x7E00u : __half_as_ushort(__float2half_rn(y));
  }
}

// One output word's ExactScaling factors: two 16-bit elements' (e0 first), or an f32's (e0).
template <typename Out, Fp8Format kFormat>
__device__ inline uint32_t FactorWord(uint32_t e0, uint32_t e1) {
  using Exact = ExactScaling<Out, kFormat>;
  if constexpr (sizeof(Out) == 4) {
    return Exact::FactorBits(e0);
  } else {
    return Exact::FactorBits(e0) | (Exact::FactorBits(e1) << 16);
  }
}

// The column side of a dequantize tile: the colwise scale bytes of its kCodes columns (one
// block row; 0 where there is no column, and for rowwise tiles), their ExactScaling factor
// words, and whether every one of them allows the exact integer path. Set(), then Finish().
template <typename Out, Fp8Format kFormat, int kCodes>
struct ColumnScales {
  static constexpr int kWords = kCodes * sizeof(Out) / 4;  // of one row's output
  uint32_t e_words[kCodes / 4] = {};  // column k's scale byte in byte k % 4 of word k / 4
  uint32_t factor[kWords];
  bool exact;

  __device__ uint32_t E(int k) const { return (e_words[k / 4] >> (8 * (k % 4))) & 0xFFu; }
  __device__ void Set(int k, uint8_t e) {
    e_words[k / 4] |= static_cast<uint32_t>(e) << (8 * (k % 4));
  }

  __device__ void Finish() {
    constexpr int kPerWord = 4 / sizeof(Out);
    exact = true;
#pragma unroll
    for (int k = 0; k < kCodes; ++k) exact = exact && ExactScaling<Out, kFormat>::InRange(E(k));
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      factor[w] = FactorWord<Out, kFormat>(E(w * kPerWord), E(w * kPerWord + kPerWord - 1));
    }
  }
};

// One row's kCodes fp8 codes (first lowest in codes[0]) as packed Out words. Exactly through
// ExactScaling when the whole row is data, its scales allow it (`scales_exact`, `factors`)
// and no code is NaN/Inf; else element by element from scale_of(k), the f32 factor of code
// k. Elements at or past `valid` (the row's data columns; 0 for a row outside the data) are 0.
template <typename Out, Fp8Format kFormat, int kCodes, typename ScaleOf>
__device__ inline void DequantizeRow(const uint32_t (&codes)[kCodes / 4], bool scales_exact,
                                     const uint32_t (&factors)[kCodes * sizeof(Out) / 4],
                                     int64_t valid, ScaleOf scale_of,
                                     uint32_t (&words)[kCodes * sizeof(Out) / 4]) {
  using Exact = ExactScaling<Out, kFormat>;
  constexpr int kWordsPer4 = sizeof(Out);  // output words per code word
  if (scales_exact && valid >= kCodes && !Exact::AnySpecial(codes)) {
#pragma unroll
    for (int c = 0; c < kCodes / 4; ++c) {
      Exact::Convert(codes[c], &factors[c * kWordsPer4], &words[c * kWordsPer4]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kCodes; k += 2) {
    const float2 v = Fp8PairToFloat2<kFormat>((codes[k / 4] >> (8 * (k % 4))) & 0xFFFFu);
    const uint32_t b0 = k < valid ? OutBits<Out>(__fmul_rn(v.x, scale_of(k))) : 0u;
    const uint32_t b1 = k + 1 < valid ? OutBits<Out>(__fmul_rn(v.y, scale_of(k + 1))) : 0u;
    if constexpr (sizeof(Out) == 4) {
      words[k] = b0;
      words[k + 1] = b1;
    } else {
      words[k / 2] = b0 | (b1 << 16);
    }
  }
}

// Row i of a dequantize tile, scaled by the tile's column scales (colwise) or by its own
// rowwise scale byte e_row; elements at or past `valid` are 0 (see DequantizeRow).
template <typename Out, Fp8Format kFormat, int kCodes>
__device__ inline void DequantizeTileRow(const uint32_t (&codes)[kCodes / 4], bool colwise,
                                         const ColumnScales<Out, kFormat, kCodes>& cols,
                                         uint32_t e_row, int64_t valid,
                                         uint32_t (&words)[kCodes * sizeof(Out) / 4]) {
  constexpr int kWords = kCodes * sizeof(Out) / 4;
  const float s_row = __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(e_row)));
  uint32_t factors[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    factors[w] = colwise ? cols.factor[w] : FactorWord<Out, kFormat>(e_row, e_row);
  }
  DequantizeRow<Out, kFormat, kCodes>(
      codes, colwise ? cols.exact : ExactScaling<Out, kFormat>::InRange(e_row), factors, valid,
      [&](int k) { return colwise ? __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(cols.E(k)))) : s_row; },
      words);
}

// Each thread converts kDequantVec fp8 bytes of all 32 rows; the loads of the tile (data and
// rowwise scales) are all issued before the first conversion.
template <typename Out, Fp8Format kFormat, bool kFull>
__device__ void DequantizeStrips(const mxfp8::DequantizeOperands& o, bool colwise, bool swizzled,
                                 const TileJob& job, const StripSpan& t) {
  constexpr int kVec = kDequantVec;
  constexpr int kWords = kVec * sizeof(Out) / 4;  // of one row's output
  const Region& r = job.region;
  const int data_rows = kFull ? kTileRows : t.data_rows;
  const int cap_rows = kFull ? kTileRows : t.cap_rows;
  const int64_t data_cols = kFull ? kVec : t.data_cols;
  const int64_t cap_cols = kFull ? kVec : t.cap_cols;
  const bool vector = kFull || t.vector;
  const int64_t stride = t.stride;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, colwise);
  // Distinct buffers (XLA never aliases an operand with a result here): lets the compiler
  // keep all loads ahead of the stores.
  const uint8_t* __restrict__ data = o.data + t.base;
  Out* __restrict__ out = static_cast<Out*>(o.out) + t.base;

  ColumnScales<Out, kFormat, kVec> cols;
  if (colwise && data_rows > 0) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (k < data_cols) {
        cols.Set(k, __ldg(o.scales + r.scale_offset +
                          mxfp8::ScaleIndex(m, true, swizzled, job.row_tile, t.col0 + k)));
      }
    }
  }
  cols.Finish();
  // Rowwise scale (row0 + i, block): rows padded_cols bytes apart compact, 16 swizzled.
  const uint8_t* __restrict__ row_scale_p =
      o.scales + r.scale_offset +
      mxfp8::ScaleIndex(m, false, swizzled, job.row_tile * kTileRows, t.col0 / kBlockSize);
  const int64_t row_scale_step = swizzled ? 16 : m.padded_cols;

  uint32_t q[kTileRows];                // the fp8 bytes of each row (0 outside the group)
  uint32_t row_scales[kTileRows / 4] = {};  // rowwise only: row i's in byte i % 4 of word i / 4
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
    q[i] = 0;
    if (i < data_rows) {
      const uint8_t* p = data + i * stride;
      if (data_cols >= kVec && vector) {
        q[i] = __ldg(reinterpret_cast<const uint32_t*>(p));
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (k < data_cols) q[i] |= static_cast<uint32_t>(__ldg(p + k)) << (8 * k);
        }
      }
      if (!colwise) {
        row_scales[i / 4] |= static_cast<uint32_t>(__ldg(row_scale_p + i * row_scale_step))
                             << (8 * (i % 4));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= cap_rows) continue;
    const uint32_t e_row = (row_scales[i / 4] >> (8 * (i % 4))) & 0xFFu;
    const uint32_t codes[1] = {q[i]};
    uint32_t words[kWords];
    DequantizeTileRow<Out, kFormat, kVec>(codes, colwise, cols, e_row,
                                          i < data_rows ? data_cols : 0, words);
    Out* row_out = out + i * stride;
    if (cap_cols >= kVec && vector) {
      if constexpr (kWords == 4) {
        *reinterpret_cast<uint4*>(row_out) = make_uint4(words[0], words[1], words[2], words[3]);
      } else {
        *reinterpret_cast<uint2*>(row_out) = make_uint2(words[0], words[1]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (k < cap_cols) {
          if constexpr (sizeof(Out) == 4) {
            reinterpret_cast<uint32_t*>(row_out)[k] = words[k];
          } else {
            reinterpret_cast<unsigned short*>(row_out)[k] =
                static_cast<unsigned short>(words[k / 2] >> (16 * (k % 2)));
          }
        }
      }
    }
  }
}

template <typename Out, Fp8Format kFormat>
__device__ void DequantizeTile(const Grid& grid, const mxfp8::DequantizeOperands& o, bool colwise,
                               bool swizzled, const TileJob& job) {
  const StripSpan t = MakeStripSpan<kDequantVec>(grid, job);
  if (t.cap_cols <= 0) return;
  if (FullTile(grid, job)) {
    DequantizeStrips<Out, kFormat, true>(o, colwise, swizzled, job, t);
  } else {
    DequantizeStrips<Out, kFormat, false>(o, colwise, swizzled, job, t);
  }
}

template <typename Out, Fp8Format kFormat>
__global__ void __launch_bounds__(kMaxThreads, kMinCtasPerSm)
    DequantizeKernel(Grid grid, mxfp8::DequantizeOperands o, bool colwise, bool swizzled) {
  ForEachJob(grid, o.group_sizes, o.job_counter, [&](const TileJob& job) {
    if (job.has_tile) DequantizeTile<Out, kFormat>(grid, o, colwise, swizzled, job);
  });
}

// --- launch configuration -----------------------------------------------------------------------

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Jobs after the data tiles that zero the scale bytes no group uses.
inline int64_t TailChunks(const Grid& grid) {
  const GroupedShape& s = grid.shape;
  switch (s.layout) {
    case GroupedLayout::kSameDims: return 0;
    case GroupedLayout::kVaryingBoth:
      return s.num_groups * CeilDiv(mxfp8::GroupScaleBytes(s.rows, s.cols), kTailChunkBytes);
    case GroupedLayout::kVaryingFirst:
    case GroupedLayout::kVaryingLast: return CeilDiv(grid.scale_bytes, kTailChunkBytes);
  }
  return 0;
}

// Columns of a strip tile: one strip per thread across the columns, at most kMaxThreads,
// whole warps, the strips split evenly (768 bf16 columns: 2 x 96 threads, not 128 + 64).
inline int64_t StripTileCols(int64_t cols, int vec) {
  const int64_t strips = CeilDiv(cols, vec), col_tiles = CeilDiv(strips, kMaxThreads);
  const int64_t warps = col_tiles > 0 ? CeilDiv(CeilDiv(strips, col_tiles), 32) : 1;
  return 32 * warps * vec;
}

// The jobs of a call tiled 32 rows x tile_cols; the number of data tiles is the worst case over
// all group sizes (jobs past the real tiles do nothing). grid.ctas is left to SetCtas.
inline Grid MakeGrid(const GroupedShape& s, int64_t tile_cols, int threads, bool wide,
                     bool aligned) {
  Grid grid{};
  grid.shape = s;
  grid.scale_bytes = mxfp8::ScaleBufferBytes(s);
  grid.aligned = aligned;
  grid.wide = wide;
  grid.threads = threads;
  grid.tile_cols = tile_cols;
  const int64_t row_tiles = CeilDiv(s.rows, kTileRows), col_tiles = CeilDiv(s.cols, tile_cols);
  switch (s.layout) {
    case GroupedLayout::kSameDims:
    case GroupedLayout::kVaryingBoth:
      grid.data_tiles = s.num_groups * row_tiles * col_tiles;
      break;
    case GroupedLayout::kVaryingFirst:  // the tail counts as one more group
      grid.data_tiles = mxfp8::MaxSumOfTiles(s.rows, s.num_groups + 1, kTileRows) * col_tiles;
      break;
    case GroupedLayout::kVaryingLast:
      grid.data_tiles = row_tiles * mxfp8::MaxSumOfTiles(s.cols, s.num_groups + 1, tile_cols);
      break;
  }
  grid.jobs = grid.data_tiles + TailChunks(grid);
  grid.ctas = grid.jobs;
  return grid;
}

// CTAs to launch when `resident` of them fit on the GPU at once (SMs x CTAs per SM): at most one
// wave. Dynamic jobs: every slot (a CTA takes jobs until none are left). Static: each CTA does
// every ctas-th job, and as few CTAs as keep the most jobs per CTA: every CTA then does the
// same number of jobs (but the last few), so none runs on alone at the end (4295 jobs on 528
// slots: 478 CTAs of 9 jobs, not 71 of 9 and 457 of 8).
inline void SetCtas(Grid& grid, int64_t resident, bool dynamic) {
  if (resident <= 0 || grid.jobs <= resident) {
    grid.ctas = grid.jobs;
    return;
  }
  grid.ctas = dynamic ? resident : CeilDiv(grid.jobs, CeilDiv(grid.jobs, resident));
}

// Wide tiles (mxfp8_wide_kernels.cuh: 16-byte chunks, one warp per row segment of 32 chunks)
// serve every call whose rows are whole chunks at aligned addresses, all layouts but
// varying-last (its groups start at any column), unless the last column tile would leave more
// than an eighth of the lanes idle (dequantize then tries 256-column tiles of 8-byte chunks: 768
// fp8 columns ran at 74% of copy in 512-column tiles, 80% on strips, 91% in 256-column tiles;
// H100, 2026-11-24).
inline bool WideTiles(const GroupedShape& s, int chunk_elements, bool aligned) {
  const int64_t tile_cols = 32 * static_cast<int64_t>(chunk_elements);
  const int64_t idle = CeilDiv(s.cols, tile_cols) * tile_cols - s.cols;
  return aligned && s.layout != GroupedLayout::kVaryingLast && s.cols % chunk_elements == 0 &&
         8 * idle <= CeilDiv(s.cols, tile_cols) * tile_cols;
}

// Grids of one call: wide tiles where they serve, else 8-byte strips of `vec` elements.
inline Grid QuantizeGrid(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o,
                         int in_bytes, bool allow_wide = true) {
  const bool aligned = Aligned16(o.x) &&
                       (!p.rowwise || (Aligned16(o.row_data) && Aligned16(o.row_scales))) &&
                       (!p.colwise || (Aligned16(o.col_data) && Aligned16(o.col_scales)));
  const int chunk = 16 / in_bytes, vec = kStripBytes / in_bytes;
  if (allow_wide && WideTiles(p.shape, chunk, aligned)) {
    return MakeGrid(p.shape, 32 * chunk, kWideThreads, true, aligned);
  }
  const int64_t tile_cols = StripTileCols(p.shape.cols, vec);
  return MakeGrid(p.shape, tile_cols, static_cast<int>(tile_cols / vec), false, aligned);
}

inline Grid DequantizeGrid(const mxfp8::DequantizeProblem& p, const mxfp8::DequantizeOperands& o,
                           bool allow_wide = true) {
  const bool aligned = Aligned16(o.data) && Aligned16(o.out) && Aligned16(o.scales);
  Grid grid;
  if (allow_wide && WideTiles(p.shape, kWideDequantChunk, aligned)) {
    grid = MakeGrid(p.shape, 32 * kWideDequantChunk, kWideThreads, true, aligned);
  } else if (allow_wide && WideTiles(p.shape, kWideDequantHalfChunk, aligned)) {
    grid = MakeGrid(p.shape, 32 * kWideDequantHalfChunk, kWideThreads, true, aligned);
  } else {
    const int64_t tile_cols = StripTileCols(p.shape.cols, kDequantVec);
    grid = MakeGrid(p.shape, tile_cols, static_cast<int>(tile_cols / kDequantVec), false, aligned);
  }
  grid.jobs = grid.ctas = grid.data_tiles;  // dequantize writes no scales
  return grid;
}

// Calls launcher.Run<In, kRow, kCol, kFormat>() for the kernel instantiation `p` needs.
template <typename In, Fp8Format kFormat, typename Launcher>
auto DispatchQuantizeModes(const mxfp8::QuantizeProblem& p, Launcher& launcher) {
  if (p.rowwise && p.colwise) return launcher.template Run<In, true, true, kFormat>();
  if (p.rowwise) return launcher.template Run<In, true, false, kFormat>();
  return launcher.template Run<In, false, true, kFormat>();
}

template <typename In, typename Launcher>
auto DispatchQuantizeFormat(const mxfp8::QuantizeProblem& p, Launcher& launcher) {
  return p.format == Fp8Format::kE4M3 ? DispatchQuantizeModes<In, Fp8Format::kE4M3>(p, launcher)
                                      : DispatchQuantizeModes<In, Fp8Format::kE5M2>(p, launcher);
}

template <typename Launcher>
auto DispatchQuantize(const mxfp8::QuantizeProblem& p, Launcher& launcher) {
  switch (p.in_type) {
    case ElementType::kBF16: return DispatchQuantizeFormat<__nv_bfloat16>(p, launcher);
    case ElementType::kF16: return DispatchQuantizeFormat<__half>(p, launcher);
    default: return DispatchQuantizeFormat<float>(p, launcher);
  }
}

// Calls launcher.Run<Out, kFormat>().
template <typename Out, typename Launcher>
auto DispatchDequantizeFormat(const mxfp8::DequantizeProblem& p, Launcher& launcher) {
  return p.format == Fp8Format::kE4M3 ? launcher.template Run<Out, Fp8Format::kE4M3>()
                                      : launcher.template Run<Out, Fp8Format::kE5M2>();
}

template <typename Launcher>
auto DispatchDequantize(const mxfp8::DequantizeProblem& p, Launcher& launcher) {
  switch (p.out_type) {
    case ElementType::kBF16: return DispatchDequantizeFormat<__nv_bfloat16>(p, launcher);
    case ElementType::kF16: return DispatchDequantizeFormat<__half>(p, launcher);
    default: return DispatchDequantizeFormat<float>(p, launcher);
  }
}

}  // namespace jgg::cuda::mxfp8_kernels

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_KERNELS_CUH_
