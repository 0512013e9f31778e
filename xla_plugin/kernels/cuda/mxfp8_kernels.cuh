// Grouped MXFP8 quantize / dequantize on Hopper: memory-bound streaming kernels.
//
// Work unit: a CTA tile of 32 rows (one colwise block) x tile_cols columns of one region (a
// group, or the zero tail; see common/mxfp8_layout.h). Each thread owns a 16-byte column strip
// (8 bf16/f16 or 4 f32 values) of all 32 rows, read with one 16-byte load per row, so:
//   rowwise: a 32-element block spans 32 / 8 = 4 (or 8) neighbouring lanes: amax by xor-shuffle;
//   colwise: a thread holds whole 32x1 blocks of its columns: amax in registers;
//   both:    one pass over the input from DRAM does both (see QuantizeTile).
// Tiles never span two groups (tiles restart at every group boundary), which is what makes any
// group size valid. Each CTA finds its tile with block-wide prefix sums over the device group
// sizes (a few hundred cycles, overlapped with other CTAs' streaming) instead of a separate
// setup launch, and the scale bytes that hold no real scale (128x4 tile padding, the unused
// tail of the worst-case buffer) are zeroed by the CTAs that own them: one launch per call.
// Elements use the hardware cvt.rn.satfinite (bit-identical to common/mxfp8_math.h's
// integer rounding, which the CPU path uses; the tests compare both with one NumPy reference).
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

namespace jgg::cuda::mxfp8_kernels {

using mxfp8::Fp8Format;
using mxfp8::GroupedLayout;
using mxfp8::GroupedShape;
using mxfp8::kBlockSize;
using mxfp8::Region;
using mxfp8::ScaleMatrix;

constexpr int kTileRows = 32;             // one colwise block
constexpr int kMaxThreads = 128;          // 3-4 CTAs per SM keep enough loads in flight
constexpr int64_t kTailChunkBytes = 16384;  // scale bytes one CTA zeroes past the groups

struct Grid {
  GroupedShape shape;
  int64_t tile_cols;    // columns per CTA tile: blockDim.x * elements per 16 bytes
  int64_t data_tiles;   // CTAs [0, data_tiles) handle data tiles, the rest scale tail chunks
  int64_t scale_bytes;  // of each orientation's buffer
  bool aligned;         // every base pointer is 16-byte aligned
};

// What one CTA does, identical for all its threads (lives in shared memory).
struct TileJob {
  Region region;
  int64_t row_tile, col_tile;      // tile coordinates inside the region's capacity
  int64_t tail_begin, tail_end;    // scale bytes to zero instead
  bool has_tile;
};

__device__ inline int64_t RegionColTiles(const Region& r, int64_t tile_cols) {
  return CeilDiv(r.cap_cols, tile_cols);
}
__device__ inline int64_t RegionTiles(const Region& r, int64_t tile_cols) {
  return CeilDiv(r.cap_rows, kTileRows) * RegionColTiles(r, tile_cols);
}

__device__ inline void SetTile(TileJob& job, const Region& r, int64_t local, int64_t tile_cols) {
  const int64_t col_tiles = RegionColTiles(r, tile_cols);
  job.region = r;
  job.row_tile = local / col_tiles;
  job.col_tile = local % col_tiles;
  job.has_tile = true;
}

// Inclusive prefix sum over the CTA's threads; `total` receives the sum over all of them.
__device__ inline int64_t BlockInclusiveSum(int64_t v, int64_t* warp_sums, int64_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int64_t up = __shfl_up_sync(0xFFFFFFFFu, v, d);
    if (lane >= d) v += up;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  int64_t before = 0;
  total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
    const int64_t s = warp_sums[w];
    total += s;
    if (w < warp) before += s;
  }
  __syncthreads();
  return v + before;
}

// Ragged layouts: group g spans [min(E, S_g - n_g), min(E, S_g)) of the ragged extent E, S the
// prefix sum of the clamped sizes n_g; its tiles and scale bytes follow as two more prefix sums.
// The thread holding the CTA's group writes the job. All threads must call (barriers).
__device__ inline void LocateRaggedJob(const Grid& grid, const int32_t* group_sizes, int64_t cta,
                                TileJob& job) {
  __shared__ int64_t warp_sums[kMaxThreads / 32];
  const GroupedShape& s = grid.shape;
  const int64_t extent = mxfp8::RaggedExtent(s);
  if (threadIdx.x == 0) {
    job.has_tile = false;
    job.tail_begin = job.tail_end = 0;
  }
  __syncthreads();
  int64_t size_before = 0, tiles_before = 0, bytes_before = 0;
  for (int64_t chunk = 0; chunk < s.num_groups; chunk += blockDim.x) {
    const int64_t g = chunk + threadIdx.x;
    const int64_t size = g < s.num_groups ? mxfp8::ClampSize(group_sizes[g], extent) : 0;
    int64_t size_total, tiles_total, bytes_total;
    const int64_t size_end = size_before + BlockInclusiveSum(size, warp_sums, size_total);
    const int64_t begin = MinI64(extent, size_end - size), end = MinI64(extent, size_end);
    const Region region = mxfp8::RaggedRegion(s, begin, end, 0, /*is_group=*/true);
    const int64_t tiles = RegionTiles(region, grid.tile_cols);
    const int64_t bytes = mxfp8::RaggedGroupScaleBytes(s, end - begin);
    const int64_t tiles_end = tiles_before + BlockInclusiveSum(tiles, warp_sums, tiles_total);
    const int64_t bytes_end = bytes_before + BlockInclusiveSum(bytes, warp_sums, bytes_total);
    if (cta >= tiles_end - tiles && cta < tiles_end) {
      SetTile(job, region, cta - (tiles_end - tiles), grid.tile_cols);
      job.region.scale_offset = bytes_end - bytes;
    }
    size_before += size_total;
    tiles_before += tiles_total;
    bytes_before += bytes_total;
  }
  if (threadIdx.x == 0) {
    const Region tail = mxfp8::RaggedRegion(s, MinI64(extent, size_before), extent, bytes_before,
                                            /*is_group=*/false);
    if (cta >= tiles_before && cta < tiles_before + RegionTiles(tail, grid.tile_cols)) {
      SetTile(job, tail, cta - tiles_before, grid.tile_cols);
    } else if (cta >= grid.data_tiles) {
      job.tail_begin = bytes_before + (cta - grid.data_tiles) * kTailChunkBytes;
      job.tail_end = MinI64(grid.scale_bytes, job.tail_begin + kTailChunkBytes);
    }
  }
  __syncthreads();
}

// Fixed-slot layouts: plain division; tail chunks zero the unused end of each slot.
__device__ inline void LocateSlotJob(const Grid& grid, const int32_t* group_sizes, int64_t cta,
                              TileJob& job) {
  const GroupedShape& s = grid.shape;
  job.has_tile = false;
  job.tail_begin = job.tail_end = 0;
  if (cta < grid.data_tiles) {
    const int64_t per_slot = CeilDiv(s.rows, kTileRows) * CeilDiv(s.cols, grid.tile_cols);
    SetTile(job, mxfp8::SlotRegion(s, group_sizes, cta / per_slot), cta % per_slot,
            grid.tile_cols);
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

__device__ inline void LocateJob(const Grid& grid, const int32_t* group_sizes, TileJob& job) {
  const int64_t cta = blockIdx.x;
  if (grid.shape.layout == GroupedLayout::kVaryingFirst ||
      grid.shape.layout == GroupedLayout::kVaryingLast) {
    LocateRaggedJob(grid, group_sizes, cta, job);
    return;
  }
  if (threadIdx.x == 0) LocateSlotJob(grid, group_sizes, cta, job);
  __syncthreads();
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
  const int64_t width = j1 - j0;
  for (int64_t t = threadIdx.x; t < (i1 - i0) * width; t += blockDim.x) {
    const int64_t i = i0 + t / width, j = j0 + t % width;
    if (i < m.rows && j < m.cols) continue;
    scales[r.scale_offset + mxfp8::ScaleIndex(m, colwise, swizzled, i, j)] = 0;
  }
}

// --- 16-byte strips of input elements ------------------------------------------------------

__device__ inline uint32_t Word(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}
__device__ inline void SetWordBits(uint4& v, int w, uint32_t bits) {
  if (w == 0) v.x |= bits; else if (w == 1) v.y |= bits; else if (w == 2) v.z |= bits; else v.w |= bits;
}

template <typename T>
struct Strip {
  static constexpr int kCount = 16 / sizeof(T);
  static constexpr int kBits = 8 * sizeof(T);
  static __device__ uint32_t Bits(const uint4& v, int k) {
    if constexpr (kBits == 32) return Word(v, k);
    return (Word(v, k / 2) >> (16 * (k % 2))) & 0xFFFFu;
  }
  static __device__ float Get(const uint4& v, int k) {
    const uint32_t bits = Bits(v, k);
    if constexpr (std::is_same_v<T, float>) return __uint_as_float(bits);
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(bits << 16);
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
  // The first `count` elements at `p` (the rest 0): one 16-byte load when whole and aligned.
  static __device__ uint4 Load(const T* p, int64_t count, bool vector) {
    if (count >= kCount && vector) return __ldg(reinterpret_cast<const uint4*>(p));
    uint4 v = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      if (k < count) {
        uint32_t bits;
        if constexpr (kBits == 32) {
          bits = __ldg(reinterpret_cast<const uint32_t*>(p) + k);
        } else {
          bits = __ldg(reinterpret_cast<const unsigned short*>(p) + k);
        }
        SetWordBits(v, (k * kBits) / 32, bits << ((k * kBits) % 32));
      }
    }
    return v;
  }
};

// Stores n <= 8 fp8 bytes (packed little-endian in `bytes`) at p: one store when whole/aligned.
template <int kCount>
__device__ inline void StoreBytes(uint8_t* p, uint64_t bytes, int64_t count, bool vector) {
  if (count >= kCount && vector) {
    if constexpr (kCount == 8) {
      *reinterpret_cast<uint2*>(p) = make_uint2(static_cast<uint32_t>(bytes), static_cast<uint32_t>(bytes >> 32));
    } else {
      *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(bytes);
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
// exactly (no ftz), so this equals mxfp8::ScaleExponent's integer rounding.
template <Fp8Format kFormat>
__device__ inline uint8_t ScaleExponentOf(float amax) {
  const uint32_t s = __float_as_uint(__fmul_rn(amax, MaxNormRcp<kFormat>())) & 0x7FFFFFFFu;
  if (s > 0x7F800000u) return mxfp8::kScaleNaN;
  if (s == 0x7F800000u) return mxfp8::kScaleInf;
  uint32_t exponent = s >> 23;
  const uint32_t mantissa = s & 0x7FFFFFu;
  if (mantissa > 0 && exponent != 0xFE && !(exponent == 0 && mantissa <= 0x400000u)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// Two elements scaled by their blocks' factors, as two fp8 bytes (first in the low byte).
template <Fp8Format kFormat>
__device__ inline uint32_t QuantizePair(float a, float b, float factor_a, float factor_b) {
  constexpr __nv_fp8_interpretation_t kKind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  uint32_t pair = __nv_cvt_float2_to_fp8x2(
      make_float2(__fmul_rn(a, factor_a), __fmul_rn(b, factor_b)), __NV_SATFINITE, kKind);
  // The library's NaN is 0x7F whatever the sign or payload (the CPU path writes the same).
  if (isnan(a)) pair = (pair & 0xFF00u) | 0x7Fu;
  if (isnan(b)) pair = (pair & 0x00FFu) | 0x7F00u;
  return pair;
}

// --- quantize ---------------------------------------------------------------------------------

// Rows are streamed in batches of 8 (8 x 16-byte loads in flight per thread, 32 registers):
// pass 1 does the rowwise work and folds every row into the column maxima; pass 2 (colwise
// only) reads the tile again, now from L1/L2, and converts with the column scales. Holding all
// 32 rows in registers instead needs 255 registers and spills.
constexpr int kRowsInFlight = 8;

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__device__ void QuantizeTile(const Grid& grid, const mxfp8::QuantizeOperands& o, bool swizzled,
                             const TileJob& job) {
  using S = Strip<In>;
  constexpr int kVec = S::kCount;
  constexpr int kLanesPerBlock = kBlockSize / kVec;
  const Region& r = job.region;
  const int64_t stride = grid.shape.cols;
  const int64_t row0 = job.row_tile * kTileRows;
  const int64_t col0 = job.col_tile * grid.tile_cols + threadIdx.x * kVec;  // region-relative
  const int64_t data_cols = r.cols - col0, cap_cols = r.cap_cols - col0;
  const bool vector = grid.aligned && r.elem_offset % kVec == 0 && stride % kVec == 0;
  const int64_t base = r.elem_offset + row0 * stride + col0;
  // Distinct buffers (XLA never aliases an operand with a result here): lets the compiler
  // batch the loads of several rows ahead of the stores.
  const In* __restrict__ x = static_cast<const In*>(o.x) + base;
  uint8_t* __restrict__ row_data = o.row_data;
  uint8_t* __restrict__ col_data = o.col_data;
  // Rows outside the group (and columns, via data_cols) read as 0: they quantize to 0 and
  // cannot raise a block's amax.
  auto load_row = [&](int i) {
    return (row0 + i < r.rows && data_cols > 0) ? S::Load(x + i * stride, data_cols, vector)
                                                 : make_uint4(0, 0, 0, 0);
  };
  const bool store_data = cap_cols > 0;

  float col_max[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) col_max[k] = 0.0f;
  const ScaleMatrix row_m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/false);
  const bool writes_row_scale = threadIdx.x % kLanesPerBlock == 0 && data_cols > 0;

  #pragma unroll 1  // one batch of loads in flight at a time: bounded registers

  for (int i0 = 0; i0 < kTileRows; i0 += kRowsInFlight) {
    uint4 rows[kRowsInFlight];  // all loads of a batch issue before any use
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) rows[u] = load_row(i0 + u);
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int i = i0 + u;
      const uint4& v = rows[u];
      if constexpr (kCol) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) col_max[k] = fmaxf(col_max[k], fabsf(S::Get(v, k)));
      }
      if constexpr (kRow) {
        float amax = 0.0f;
#pragma unroll
        for (int k = 0; k < kVec; ++k) amax = fmaxf(amax, fabsf(S::Get(v, k)));
#pragma unroll
        for (int d = 1; d < kLanesPerBlock; d <<= 1) {
          amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, d));
        }
        const uint8_t e = ScaleExponentOf<kFormat>(amax);
        if (writes_row_scale && row0 + i < r.rows) {
          o.row_scales[r.scale_offset +
                       mxfp8::ScaleIndex(row_m, false, swizzled, row0 + i, col0 / kBlockSize)] = e;
        }
        if (store_data && row0 + i < r.cap_rows) {
          const float factor = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
          uint64_t bytes = 0;
#pragma unroll
          for (int k = 0; k < kVec; k += 2) {
            bytes |= static_cast<uint64_t>(QuantizePair<kFormat>(S::Get(v, k), S::Get(v, k + 1),
                                                                 factor, factor))
                     << (8 * k);
          }
          StoreBytes<kVec>(row_data + base + i * stride, bytes, cap_cols, vector);
        }
      }
    }
  }

  if constexpr (kCol) {
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/true);
    float factor[kVec];
    uint64_t scale_bytes = 0;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const uint8_t e = ScaleExponentOf<kFormat>(col_max[k]);
      scale_bytes |= static_cast<uint64_t>(e) << (8 * k);
      factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
    }
    if (row0 < r.rows && data_cols > 0) {
      // Compact scales of kVec neighbouring columns are contiguous and aligned (offsets are
      // multiples of 512, rows of 128): one store; swizzled ones are 16 bytes apart.
      if (!swizzled) {
        StoreBytes<kVec>(
            o.col_scales + r.scale_offset + mxfp8::ScaleIndex(m, true, false, job.row_tile, col0),
            scale_bytes, data_cols, grid.aligned);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (k < data_cols) {
            o.col_scales[r.scale_offset +
                         mxfp8::ScaleIndex(m, true, true, job.row_tile, col0 + k)] =
                static_cast<uint8_t>(scale_bytes >> (8 * k));
          }
        }
      }
    }
    if (store_data) {
      #pragma unroll 1  // one batch of loads in flight at a time: bounded registers
      for (int i0 = 0; i0 < kTileRows; i0 += kRowsInFlight) {
        uint4 rows[kRowsInFlight];
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) rows[u] = load_row(i0 + u);
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) {
          if (row0 + i0 + u >= r.cap_rows) continue;
          uint64_t bytes = 0;
#pragma unroll
          for (int k = 0; k < kVec; k += 2) {
            bytes |= static_cast<uint64_t>(QuantizePair<kFormat>(S::Get(rows[u], k),
                                                                 S::Get(rows[u], k + 1), factor[k],
                                                                 factor[k + 1]))
                     << (8 * k);
          }
          StoreBytes<kVec>(col_data + base + (i0 + u) * stride, bytes, cap_cols, vector);
        }
      }
    }
  }

  if constexpr (kRow) {
    ZeroOwnedScalePadding(r, job.row_tile, job.col_tile, grid.tile_cols, false, swizzled,
                          o.row_scales);
  }
  if constexpr (kCol) {
    ZeroOwnedScalePadding(r, job.row_tile, job.col_tile, grid.tile_cols, true, swizzled,
                          o.col_scales);
  }
}

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__global__ void __launch_bounds__(kMaxThreads)
    QuantizeKernel(Grid grid, mxfp8::QuantizeOperands o, bool swizzled) {
  __shared__ TileJob shared_job;
  LocateJob(grid, o.group_sizes, shared_job);
  const TileJob job = shared_job;
  if (job.has_tile) {
    QuantizeTile<In, kRow, kCol, kFormat>(grid, o, swizzled, job);
    return;
  }
  ZeroScaleBytes(o.row_scales, job.tail_begin, job.tail_end, grid.aligned);
  ZeroScaleBytes(o.col_scales, job.tail_begin, job.tail_end, grid.aligned);
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

template <Fp8Format kFormat>
__device__ inline float2 Fp8PairToFloat2(uint32_t pair) {
  constexpr __nv_fp8_interpretation_t kKind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kKind);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

template <typename Out, Fp8Format kFormat>
__device__ void DequantizeTile(const Grid& grid, const mxfp8::DequantizeOperands& o, bool colwise,
                               bool swizzled, const TileJob& job) {
  constexpr int kVec = 16 / sizeof(Out);  // one 16-byte store per row
  constexpr int kWords = 16 / 4;
  const Region& r = job.region;
  const int64_t stride = grid.shape.cols;
  const int64_t row0 = job.row_tile * kTileRows;
  const int64_t col0 = job.col_tile * grid.tile_cols + threadIdx.x * kVec;
  const int64_t data_cols = r.cols - col0, cap_cols = r.cap_cols - col0;
  if (cap_cols <= 0) return;
  const bool vector = grid.aligned && r.elem_offset % kVec == 0 && stride % kVec == 0;
  const int64_t base = r.elem_offset + row0 * stride + col0;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, colwise);

  float col_scale[kVec];  // the colwise scales of this thread's columns (one block row)
#pragma unroll
  for (int k = 0; k < kVec; ++k) col_scale[k] = 1.0f;
  if (colwise) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const bool real = row0 < r.rows && k < data_cols;
      const uint8_t e = real ? o.scales[r.scale_offset +
                                        mxfp8::ScaleIndex(m, true, swizzled, job.row_tile, col0 + k)]
                             : 0;
      col_scale[k] = __uint_as_float(mxfp8::ScaleBits(e));
    }
  }
  // Distinct buffers (XLA never aliases an operand with a result here): lets the compiler
  // batch the loads of several rows ahead of the stores.
  const uint8_t* __restrict__ data = o.data;
  Out* __restrict__ out = static_cast<Out*>(o.out);
  // The first `count` fp8 bytes of row i (the rest 0), and its rowwise scale factor.
  auto load_row = [&](int i, uint64_t& q, float& row_scale) {
    q = 0;
    row_scale = 1.0f;
    if (!(row0 + i < r.rows && data_cols > 0)) return;
    const uint8_t* p = data + base + i * stride;
    if (data_cols >= kVec && vector) {
      if constexpr (kVec == 8) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
        q = static_cast<uint64_t>(v.y) << 32 | v.x;
      } else {
        q = __ldg(reinterpret_cast<const uint32_t*>(p));
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (k < data_cols) q |= static_cast<uint64_t>(__ldg(p + k)) << (8 * k);
      }
    }
    if (!colwise) {
      row_scale = __uint_as_float(mxfp8::ScaleBits(__ldg(
          o.scales + r.scale_offset +
          mxfp8::ScaleIndex(m, false, swizzled, row0 + i, col0 / kBlockSize))));
    }
  };
  #pragma unroll 1  // one batch of loads in flight at a time: bounded registers
  for (int i0 = 0; i0 < kTileRows; i0 += kRowsInFlight) {
    uint64_t q[kRowsInFlight];  // all loads of a batch issue before any use
    float row_scale[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) load_row(i0 + u, q[u], row_scale[u]);
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int i = i0 + u;
      if (row0 + i >= r.cap_rows) continue;
      const bool real_row = row0 + i < r.rows && data_cols > 0;
      uint32_t words[kWords] = {0, 0, 0, 0};
#pragma unroll
      for (int k = 0; k < kVec; k += 2) {
        const float2 v = Fp8PairToFloat2<kFormat>(static_cast<uint32_t>(q[u] >> (8 * k)) & 0xFFFFu);
        const float s0 = colwise ? col_scale[k] : row_scale[u];
        const float s1 = colwise ? col_scale[k + 1] : row_scale[u];
        const bool in0 = real_row && k < data_cols, in1 = real_row && k + 1 < data_cols;
        const uint32_t b0 = in0 ? OutBits<Out>(__fmul_rn(v.x, s0)) : 0u;
        const uint32_t b1 = in1 ? OutBits<Out>(__fmul_rn(v.y, s1)) : 0u;
        if constexpr (sizeof(Out) == 4) {
          words[k] = b0;
          words[k + 1] = b1;
        } else {
          words[k / 2] = b0 | (b1 << 16);
        }
      }
      Out* row_out = out + base + i * stride;
      if (cap_cols >= kVec && vector) {
        *reinterpret_cast<uint4*>(row_out) = make_uint4(words[0], words[1], words[2], words[3]);
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
}

template <typename Out, Fp8Format kFormat>
__global__ void __launch_bounds__(kMaxThreads)
    DequantizeKernel(Grid grid, mxfp8::DequantizeOperands o, bool colwise, bool swizzled) {
  __shared__ TileJob shared_job;
  LocateJob(grid, o.group_sizes, shared_job);
  const TileJob job = shared_job;
  if (job.has_tile) DequantizeTile<Out, kFormat>(grid, o, colwise, swizzled, job);
}

// --- launch configuration -----------------------------------------------------------------------

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The CTA shape: 16-byte strips across the columns, at most kMaxThreads, at least a warp; the
// number of data tiles is the worst case over all group sizes (CTAs past the real tiles exit).
inline Grid MakeGrid(const GroupedShape& s, int vec, bool aligned) {
  Grid grid{};
  grid.shape = s;
  grid.scale_bytes = mxfp8::ScaleBufferBytes(s);
  grid.aligned = aligned;
  const int64_t warps = CeilDiv(CeilDiv(s.cols, vec), 32);
  grid.tile_cols = MinI64(kMaxThreads, 32 * (warps > 0 ? warps : 1)) * vec;
  const int64_t row_tiles = CeilDiv(s.rows, kTileRows), col_tiles = CeilDiv(s.cols, grid.tile_cols);
  switch (s.layout) {
    case GroupedLayout::kSameDims:
    case GroupedLayout::kVaryingBoth:
      grid.data_tiles = s.num_groups * row_tiles * col_tiles;
      break;
    case GroupedLayout::kVaryingFirst:  // the tail counts as one more group
      grid.data_tiles = mxfp8::MaxSumOfTiles(s.rows, s.num_groups + 1, kTileRows) * col_tiles;
      break;
    case GroupedLayout::kVaryingLast:
      grid.data_tiles = row_tiles * mxfp8::MaxSumOfTiles(s.cols, s.num_groups + 1, grid.tile_cols);
      break;
  }
  return grid;
}

// CTAs after the data tiles that zero the scale bytes no group uses.
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

// Grids of one call (the worst case over group sizes; CTAs past the real tiles exit).
inline Grid QuantizeGrid(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o,
                         int vec) {
  const bool aligned = Aligned16(o.x) &&
                       (!p.rowwise || (Aligned16(o.row_data) && Aligned16(o.row_scales))) &&
                       (!p.colwise || (Aligned16(o.col_data) && Aligned16(o.col_scales)));
  return MakeGrid(p.shape, vec, aligned);
}

inline Grid DequantizeGrid(const mxfp8::DequantizeProblem& p, const mxfp8::DequantizeOperands& o,
                           int vec) {
  return MakeGrid(p.shape, vec, Aligned16(o.data) && Aligned16(o.out));
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
