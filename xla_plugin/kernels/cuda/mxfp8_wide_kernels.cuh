// Grouped MXFP8 quantize / dequantize with wide tiles: the kernels for every call whose rows
// are whole 16-byte chunks at aligned addresses (WideTiles in mxfp8_launch_config.cuh; the others take
// mxfp8_kernels.cuh's 8-byte strips).
//
// Same jobs as the strip kernels (32-row tiles of one region, taken from the job counter, scale
// padding zeroed by the owning tile), a different thread shape: each warp covers a row segment
// of 32 x 16 bytes (bf16/f16: 256 columns, f32: 128; dequantize: 512 fp8 bytes, or 32 x 8 where
// that fills the tiles better) and each lane 8 rows of it, all 8 loads issued before the first
// use. 16-byte loads halve the load instructions of 8-byte strips, and a 32-element block spans
// only 4 lanes (bf16) so a row's amax takes 2 shuffle rounds. At most 128 registers (4 CTAs per
// SM; ptxas: 80-128, 2026-11-24), but for bf16 "both" (WideQuantizeCtasPerSm).
// Colwise amax: per lane over its 8 rows, then across the 4 warps through 2 KB of shared
// memory, so no tile is stashed and "both" converts each row to both orientations from one
// unpacking of its elements.
// Loads are cp.async copies (16 or 8 bytes) into two shared-memory stages: while a CTA converts
// one job, the next job's copies are in flight (ForEachDynamicJob), so an SM's bytes in flight
// do not drop between jobs. Each lane reads back only the chunks it copied: no barrier guards
// the stages. At launch each CTA prefetches its first job's rows into L2 (PrefetchFirstRound),
// so DRAM works while the CTAs locate their first jobs.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_WIDE_KERNELS_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_WIDE_KERNELS_CUH_

#include "xla_plugin/kernels/cuda/mxfp8_kernels.cuh"

namespace jgg::cuda::mxfp8_kernels {

constexpr int kWideMinCtasPerSm = 4;  // <= 128 registers

// CTAs per SM a wide quantize kernel is built for. bf16 rowwise + colwise spills 64 bytes
// within 128 registers; built for 3 CTAs it spills nothing (168 registers since its one
// conversion loop for both orientations, ptxas 2026-11-29) and ran 2-7% faster on the anchor
// shapes (H100, 2026-11-25; f16's kernel does not spill at 4).
template <typename In, bool kRow, bool kCol>
constexpr int WideQuantizeCtasPerSm() {
  return kRow && kCol && std::is_same_v<In, __nv_bfloat16> ? 3 : kWideMinCtasPerSm;
}

// CTAs per SM a wide dequantize kernel is built for: 8-byte chunks (16 KB of stages, 72-78
// registers at this bound) ran the qwen3 weight ([128, 2048, 768]) 10% faster at 6 than at 4;
// 16-byte chunks ran 9-10% slower at 5 (96 registers) than at 4 (99) on the mixtral rows (H200,
// 2026-11-29).
template <int kVec>
constexpr int WideDequantizeCtasPerSm() {
  return kVec == kWideDequantHalfChunk ? 6 : kWideMinCtasPerSm;
}

// A stage's slot for one lane's chunk of one row.
template <int kChunkBytes>
using StageSlot = std::conditional_t<kChunkBytes == 16, uint4, uint2>;

// One lane's 16-byte chunk of kWideRows rows of a wide tile (the fields as for strips; rows
// count from the lane's first row, row_tile * 32 + warp * kWideRows).
__device__ inline StripSpan MakeWideSpan(const Grid& grid, const TileJob& job, int chunk) {
  const Region& r = job.region;
  StripSpan t;
  t.stride = grid.shape.cols;
  const int64_t row0 = job.row_tile * kTileRows + (threadIdx.x / 32) * kWideRows;
  t.col0 = job.col_tile * grid.tile_cols + (threadIdx.x % 32) * chunk;
  t.base = r.elem_offset + row0 * t.stride + t.col0;
  t.data_cols = r.cols - t.col0;
  t.cap_cols = r.cap_cols - t.col0;  // a whole chunk or none: cols % chunk == 0
  const auto rows_below = [](int64_t n) {
    return n <= 0 ? 0 : n >= kWideRows ? kWideRows : static_cast<int>(n);
  };
  t.data_rows = t.data_cols > 0 ? rows_below(r.rows - row0) : 0;
  t.cap_rows = t.cap_cols > 0 ? rows_below(r.cap_rows - row0) : 0;
  t.vector = true;
  return t;
}

// --- asynchronous copies into shared memory (plain copies under the CPU emulator) ---

// Copies the first src_bytes (0..kBytes) of the kBytes chunk at gmem (aligned to kBytes) to smem
// and zeroes the rest of the chunk. cp.async.cg moves 16-byte chunks only; 8-byte ones take .ca.
template <int kBytes>
__device__ inline void CopyChunkAsync(StageSlot<kBytes>* smem, const void* gmem, int src_bytes) {
  static_assert(kBytes == 16 || kBytes == 8);
#ifdef __CUDA_ARCH__
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(src_bytes)
                 : "memory");
  }
#else
  uint8_t* d = reinterpret_cast<uint8_t*>(smem);
  for (int k = 0; k < kBytes; ++k) {
    d[k] = k < src_bytes ? static_cast<const uint8_t*>(gmem)[k] : 0;
  }
#endif
}

__device__ inline void CommitCopies() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits for this thread's copies but those of the newest `kPending` commits.
template <int kPending>
__device__ inline void WaitCopies() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// The two stages, [stage][row][thread] chunks (dynamic shared memory of the launch,
// WideStagesBytes of its chunk size), 128-byte aligned: dynamic shared memory starts where the
// kernel's static shared memory ends, and when 16 more bytes of that (13840, not 13824) moved
// the stages off a 128-byte boundary, the rowwise quantize and dequantize kernels ran 6-13%
// slower, their L2 hit rates 10-25 points higher (each warp's 512-byte row of copies then spans
// five 128-byte lines of shared memory); aligned, they ran as before (H200, 2026-11-29).
__device__ inline uint4* WideStages() {
#ifdef JGG_SIMT_EMULATION
  static uint4 stages[WideStagesBytes(16) / 16];
  return stages;
#else
  extern __shared__ __align__(128) uint4 wide_stages[];
  return wide_stages;
#endif
}

template <int kChunkBytes>
__device__ inline StageSlot<kChunkBytes>* StageOf(int round) {
  return reinterpret_cast<StageSlot<kChunkBytes>*>(WideStages()) + (round & 1) * kWideStageChunks;
}

// Starts the copies of this lane's chunks of `job` (kChunkBytes each: 16 or 8; elements of
// elem_bytes) into `stage` as one commit group; rows and columns
// outside the data are zero-filled. kFullTilePath: a FullTile job's copies skip the per-row
// bounds (quantize: part of a 16% cut in its instructions; dequantize ran 0.6-1% slower with
// it, so it keeps the bounded path: H200, 2026-11-28).
template <int kChunkBytes, bool kFullTilePath>
__device__ inline void IssueWideChunks(const Grid& grid, const void* data, int elem_bytes,
                                       const TileJob& job, StageSlot<kChunkBytes>* stage) {
  if (job.has_tile) {
    const StripSpan t = MakeWideSpan(grid, job, kChunkBytes / elem_bytes);
    const uint8_t* base = static_cast<const uint8_t*>(data) + t.base * elem_bytes;
    if (kFullTilePath && FullTile(grid, job)) {
      const int64_t row_bytes = t.stride * elem_bytes;
#pragma unroll
      for (int i = 0; i < kWideRows; ++i) {
        CopyChunkAsync<kChunkBytes>(stage + i * kWideThreads + threadIdx.x, base, kChunkBytes);
        base += row_bytes;
      }
      CommitCopies();
      return;
    }
    const int64_t data_bytes = t.data_cols * elem_bytes;
    const int src_bytes = data_bytes >= kChunkBytes ? kChunkBytes
                          : data_bytes > 0          ? static_cast<int>(data_bytes)
                                                    : 0;
#pragma unroll
    for (int i = 0; i < kWideRows; ++i) {
      const bool in = i < t.data_rows;
      CopyChunkAsync<kChunkBytes>(stage + i * kWideThreads + threadIdx.x,
                                  in ? base + i * t.stride * elem_bytes : data,
                                  in ? src_bytes : 0);
    }
  }
  CommitCopies();
}

// Pulls the call's first round of jobs into L2 while the CTAs build their group prefix sums and
// locate their first jobs, so that DRAM is busy from the launch on: CTA c prefetches the c-th
// tile-sized span of the input with one bulk (TMA) prefetch of its last thread, which nothing
// waits on. CTA c's first job is tile c in row-major tile order, so the span holds its rows
// (give or take the rows that groups' partial tiles shift).
__device__ inline void PrefetchFirstRound(const Grid& grid, const void* data, int elem_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x != blockDim.x - 1) return;
  const int64_t span = kTileRows * grid.tile_cols * elem_bytes;  // a multiple of 16 bytes
  const int64_t end = mxfp8::DataElements(grid.shape) * elem_bytes;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * span;
  const int64_t bytes = (MinI64(end, begin + span) - begin) & ~int64_t{15};
  if (bytes <= 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(
                   static_cast<const uint8_t*>(data) + begin),
               "r"(static_cast<uint32_t>(bytes))
               : "memory");
#endif
}

// Waits for the current job's copies (the next job's, when prefetched, stay in flight).
__device__ inline void WaitForJob(bool next_in_flight) {
  if (next_in_flight) {
    WaitCopies<1>();
  } else {
    WaitCopies<0>();
  }
}

// A 16- or 8-byte chunk as packed words.
template <int kBytes>
__device__ inline void LeadingWords(const StageSlot<kBytes>& v, uint32_t (&w)[kBytes / 4]) {
  static_assert(kBytes == 16 || kBytes == 8);
  w[0] = v.x;
  w[1] = v.y;
  if constexpr (kBytes == 16) {
    w[2] = v.z;
    w[3] = v.w;
  }
}

// kBytes (16 or 8) of read-only global memory at p, aligned to their size, as packed words.
template <int kBytes>
__device__ inline void LoadReadOnlyWords(const uint8_t* p, uint32_t (&w)[kBytes / 4]) {
  if constexpr (kBytes == 16) {
    LeadingWords<16>(__ldg(reinterpret_cast<const uint4*>(p)), w);
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x;
    w[1] = v.y;
  }
}

// Stores kWords packed words at p (aligned to their size).
template <int kWords>
__device__ inline void StoreWords(void* p, const uint32_t* w) {
  if constexpr (kWords == 1) {
    *static_cast<uint32_t*>(p) = w[0];
  } else if constexpr (kWords == 2) {
    *static_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
#pragma unroll
    for (int i = 0; i < kWords; i += 4) {
      static_cast<uint4*>(p)[i / 4] = make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]);
    }
  }
}

// --- a chunk's colwise scales (one block row of a group, kVec columns) ------------------------

// The colwise scale bytes of kVec columns from their maxima (column k in byte k % 4 of
// scale_words[k / 4]) and the factors that scale the columns' elements.
template <Fp8Format kFormat, int kVec>
__device__ inline void ColumnScaleBytes(const float (&col_max)[kVec],
                                        uint32_t (&scale_words)[kVec / 4], float (&factor)[kVec]) {
#pragma unroll
  for (int k = 0; k < kVec / 4; ++k) scale_words[k] = 0;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const uint8_t e = ScaleExponentOf<kFormat>(col_max[k]);
    scale_words[k / 4] |= static_cast<uint32_t>(e) << (8 * (k % 4));
    factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
  }
}

// Writes the scale bytes (kVec packed in `scale_words`) of the chunk's data columns (the
// first data_cols) in block row `block_row` of a group's colwise scales.
template <int kVec>
__device__ inline void StoreChunkColumnScales(uint8_t* scales, const ScaleMatrix& m,
                                              bool swizzled, int64_t block_row, int64_t col0,
                                              int64_t data_cols, const uint32_t* scale_words) {
  if (!swizzled && data_cols >= kVec) {  // compact: the chunk's scales are contiguous
    StoreWords<kVec / 4>(scales + mxfp8::ScaleIndex(m, true, false, block_row, col0), scale_words);
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (k < data_cols) {
      scales[mxfp8::ScaleIndex(m, true, swizzled, block_row, col0 + k)] =
          static_cast<uint8_t>(scale_words[k / 4] >> (8 * (k % 4)));
    }
  }
}

// The scale bytes of the chunk's data columns in block row `block_row` (none unless `load`),
// finished for dequantize.
template <typename Out, Fp8Format kFormat, int kVec>
__device__ inline ColumnScales<Out, kFormat, kVec> LoadChunkColumnScales(
    const uint8_t* scales, const ScaleMatrix& m, bool swizzled, int64_t block_row, int64_t col0,
    int64_t data_cols, bool load) {
  ColumnScales<Out, kFormat, kVec> cols;
  if (load) {
    if (!swizzled && data_cols >= kVec) {
      LoadReadOnlyWords<kVec>(scales + mxfp8::ScaleIndex(m, true, false, block_row, col0),
                              cols.e_words);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (k < data_cols) {
          cols.Set(k, __ldg(scales + mxfp8::ScaleIndex(m, true, swizzled, block_row, col0 + k)));
        }
      }
    }
  }
  cols.Finish();
  return cols;
}

// --- quantize ---------------------------------------------------------------------------------

// max(acc, |word|) per packed element, a NaN ignored (as fmaxf ignores it).
template <typename In>
__device__ inline uint32_t PackedAbsMax(uint32_t acc, uint32_t word) {
  if constexpr (sizeof(In) == 4) {
    return __float_as_uint(fmaxf(__uint_as_float(acc), fabsf(__uint_as_float(word))));
  } else {
    return AbsMaxPair<In>(acc, word);
  }
}

// max(acc, m) per packed element of two maxima (neither negative nor NaN): no |.| to take.
template <typename In>
__device__ inline uint32_t PackedMax(uint32_t acc, uint32_t m) {
  if constexpr (sizeof(In) == 4) {
    return __float_as_uint(fmaxf(__uint_as_float(acc), __uint_as_float(m)));
  } else {
    using Pair = std::conditional_t<std::is_same_v<In, __nv_bfloat16>, __nv_bfloat162, __half2>;
    const Pair r = __hmax2(*reinterpret_cast<const Pair*>(&acc), *reinterpret_cast<const Pair*>(&m));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// Colwise maxima of this lane's chunk columns over the tile's 32 rows: packed |x| maxima over its
// own rows, then over the 4 warps through shared memory (two barriers: all threads call).
template <typename In>
__device__ inline void TileColumnMaxima(const uint32_t (&w)[kWideRows][4],
                                        float (&col_max)[16 / sizeof(In)]) {
  __shared__ uint32_t partial[kWideThreads / 32][4][32];  // [warp][word][lane]
  uint32_t acc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    acc[k] = 0;
#pragma unroll
    for (int i = 0; i < kWideRows; ++i) acc[k] = PackedAbsMax<In>(acc[k], w[i][k]);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < 4; ++k) partial[warp][k][lane] = acc[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    acc[k] = 0;
#pragma unroll
    for (int u = 0; u < kWideThreads / 32; ++u) acc[k] = PackedMax<In>(acc[k], partial[u][k][lane]);
  }
  __syncthreads();  // `partial` is free for the next job
  UnpackValues<In>(acc, col_max);
}

// kFull (FullTile: every row and chunk of the tile is data): the compiler drops the per-row
// bounds, a compare and a branch around every row's conversion. "Both" finds the column scales
// first and then converts each row to both orientations from one unpacking of its elements.
template <typename In, bool kRow, bool kCol, Fp8Format kFormat, bool kFull>
__device__ void QuantizeWideTile(const Grid& grid, const mxfp8::QuantizeOperands& o,
                                 bool swizzled, const TileJob& job, const uint4* stage) {
  constexpr int kVec = 16 / sizeof(In);  // elements per chunk
  constexpr int kOutWords = kVec / 4;    // fp8 words per chunk
  constexpr int kLanesPerBlock = kBlockSize / kVec;
  const Region& r = job.region;
  const StripSpan t = MakeWideSpan(grid, job, kVec);
  // Rows of this lane that hold data / lie inside the capacity.
  const int data_rows = kFull ? kWideRows : t.data_rows;
  const int cap_rows = kFull ? kWideRows : t.cap_rows;
  uint32_t w[kWideRows][4];
#pragma unroll
  for (int i = 0; i < kWideRows; ++i) {
    LeadingWords<16>(stage[i * kWideThreads + threadIdx.x], w[i]);
  }

  float col_factor[kVec];
  if constexpr (kCol) {
    float col_max[kVec];
    TileColumnMaxima<In>(w, col_max);
    uint32_t scale_bytes[kOutWords];
    ColumnScaleBytes<kFormat, kVec>(col_max, scale_bytes, col_factor);
    // Warp 0 writes the tile's scale row (one block row of the group).
    const int64_t data_cols = kFull ? kVec : t.data_cols;
    const bool has_block = kFull || job.row_tile * kTileRows < r.rows;
    if (threadIdx.x < 32 && has_block && data_cols > 0) {
      StoreChunkColumnScales<kVec>(o.col_scales + r.scale_offset,
                                   mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/true),
                                   swizzled, job.row_tile, t.col0, data_cols, scale_bytes);
    }
  }

  // Rowwise scales: rows of a lane lie in one 32-row group, 16 bytes apart swizzled. The output
  // pointers step a row at a time (null for an orientation the call does not write).
  uint8_t* __restrict__ row_scale = nullptr;
  int64_t row_scale_step = 0;
  if constexpr (kRow) {
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/false);
    const int64_t row0 = job.row_tile * kTileRows + (threadIdx.x / 32) * kWideRows;
    row_scale = o.row_scales + r.scale_offset +
                mxfp8::ScaleIndex(m, false, swizzled, row0, t.col0 / kBlockSize);
    row_scale_step = swizzled ? 16 : m.padded_cols;
  }
  const bool writes_row_scale = threadIdx.x % kLanesPerBlock == 0;
  uint8_t* __restrict__ row_out = kRow ? o.row_data + t.base : nullptr;
  uint8_t* __restrict__ col_out = kCol ? o.col_data + t.base : nullptr;
#pragma unroll
  for (int i = 0; i < kWideRows; i += 2) {
    float amax[2];
    if constexpr (kRow) PairRowAmax<In, kLanesPerBlock, 4>(w[i], w[i + 1], amax);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      uint8_t e = 0;
      if constexpr (kRow) {
        e = ScaleExponentOf<kFormat>(amax[u]);
        if (writes_row_scale && i + u < data_rows) *row_scale = e;
        row_scale += row_scale_step;
      }
      if (i + u < cap_rows) {
        float v[kVec];  // one unpacking for both orientations
        UnpackValues<In>(w[i + u], v);
        uint32_t bytes[kOutWords];
        if constexpr (kRow) {
          float row_factor[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) row_factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
          QuantizeValues<kFormat, kVec>(v, row_factor, bytes);
          StoreWords<kOutWords>(row_out, bytes);
        }
        if constexpr (kCol) {
          QuantizeValues<kFormat, kVec>(v, col_factor, bytes);
          StoreWords<kOutWords>(col_out, bytes);
        }
      }
      if constexpr (kRow) row_out += t.stride;
      if constexpr (kCol) col_out += t.stride;
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
__global__ void __launch_bounds__(kWideThreads, (WideQuantizeCtasPerSm<In, kRow, kCol>()))
    QuantizeWideKernel(Grid grid, mxfp8::QuantizeOperands o, bool swizzled) {
  PrefetchFirstRound(grid, o.x, sizeof(In));
  ForEachPrefetchedJob(
      grid, o.group_sizes, o.job_counter,
      [&](const TileJob& job, int round) {
        IssueWideChunks<16, /*kFullTilePath=*/true>(grid, o.x, sizeof(In), job,
                                                    StageOf<16>(round));
      },
      [&](const TileJob& job, int round, bool next_in_flight) {
        WaitForJob(next_in_flight);
        if (job.has_tile && FullTile(grid, job)) {
          QuantizeWideTile<In, kRow, kCol, kFormat, true>(grid, o, swizzled, job,
                                                          StageOf<16>(round));
        } else if (job.has_tile) {
          QuantizeWideTile<In, kRow, kCol, kFormat, false>(grid, o, swizzled, job,
                                                           StageOf<16>(round));
        } else {
          ZeroScaleBytes(o.row_scales, job.tail_begin, job.tail_end, grid.aligned);
          ZeroScaleBytes(o.col_scales, job.tail_begin, job.tail_end, grid.aligned);
        }
      });
}

// --- dequantize -------------------------------------------------------------------------------

// The orientation of the codes a wide dequantize kernel takes: one, fixed when it is built (no
// column scales in a rowwise kernel, no per-word choice between the two), or the call's
// `colwise` argument (WideDequantizeKernelFor picks).
enum class CodeOrientation { kRowwise, kColwise, kArgument };

template <typename Out, Fp8Format kFormat, int kVec, CodeOrientation kOrientation>
__device__ void DequantizeWideTile(const Grid& grid, const mxfp8::DequantizeOperands& o,
                                   bool colwise_argument, bool swizzled, const TileJob& job,
                                   const StageSlot<kVec>* stage) {
  const bool colwise = kOrientation == CodeOrientation::kArgument
                           ? colwise_argument
                           : kOrientation == CodeOrientation::kColwise;
  constexpr int kOutWords = kVec * sizeof(Out) / 4;
  const Region& r = job.region;
  const StripSpan t = MakeWideSpan(grid, job, kVec);
  if (t.cap_rows <= 0) return;  // no barriers below
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, colwise);
  const uint8_t* __restrict__ scales = o.scales + r.scale_offset;
  const int64_t row0 = job.row_tile * kTileRows + (threadIdx.x / 32) * kWideRows;

  uint8_t row_scale[kWideRows];
  const uint8_t* __restrict__ row_scale_p =
      scales + mxfp8::ScaleIndex(m, false, swizzled, row0, t.col0 / kBlockSize);
  const int64_t row_scale_step = swizzled ? 16 : m.padded_cols;
#pragma unroll
  for (int i = 0; i < kWideRows; ++i) {
    // Rowwise: 32 / kVec lanes share a block (each loads the block's scale).
    row_scale[i] = !colwise && i < t.data_rows ? __ldg(row_scale_p + i * row_scale_step) : 0;
  }
  // Colwise: the chunk's kVec column scales of the tile's block row.
  const ColumnScales<Out, kFormat, kVec> cols = LoadChunkColumnScales<Out, kFormat, kVec>(
      scales, m, swizzled, job.row_tile, t.col0, t.data_cols, colwise && t.data_rows > 0);

  Out* __restrict__ out = static_cast<Out*>(o.out) + t.base;
#pragma unroll
  for (int i = 0; i < kWideRows; ++i) {
    if (i >= t.cap_rows) continue;
    uint32_t codes[kVec / 4];
    LeadingWords<kVec>(stage[i * kWideThreads + threadIdx.x], codes);
    uint32_t words[kOutWords];
    DequantizeTileRow<Out, kFormat, kVec>(codes, colwise, cols, row_scale[i],
                                          i < t.data_rows ? t.data_cols : 0, words);
    StoreWords<kOutWords>(out + i * t.stride, words);
  }
}

// kVec: fp8 codes per lane and row (kWideDequantChunk or kWideDequantHalfChunk).
template <typename Out, Fp8Format kFormat, int kVec, CodeOrientation kOrientation>
__global__ void __launch_bounds__(kWideThreads, WideDequantizeCtasPerSm<kVec>())
    DequantizeWideKernel(Grid grid, mxfp8::DequantizeOperands o, bool colwise, bool swizzled) {
  PrefetchFirstRound(grid, o.data, 1);
  ForEachPrefetchedJob(
      grid, o.group_sizes, o.job_counter,
      [&](const TileJob& job, int round) {
        IssueWideChunks<kVec, /*kFullTilePath=*/false>(grid, o.data, 1, job, StageOf<kVec>(round));
      },
      [&](const TileJob& job, int round, bool next_in_flight) {
        WaitForJob(next_in_flight);
        if (job.has_tile) {
          DequantizeWideTile<Out, kFormat, kVec, kOrientation>(grid, o, colwise, swizzled, job,
                                                               StageOf<kVec>(round));
        }
      });
}

// The wide dequantize kernel of kVec-code chunks for codes of this orientation. 8-byte chunks
// have a kernel per orientation (qwen3's [128, 2048, 768] weight 4% faster than with one for
// both); 16-byte chunks one for both (kernels per orientation: 2-7% slower on every anchor row;
// H200, 2026-11-29).
template <typename Out, Fp8Format kFormat, int kVec>
auto WideDequantizeKernelFor(bool colwise) {
  if constexpr (kVec == kWideDequantChunk) {
    return DequantizeWideKernel<Out, kFormat, kVec, CodeOrientation::kArgument>;
  } else {
    return colwise ? DequantizeWideKernel<Out, kFormat, kVec, CodeOrientation::kColwise>
                   : DequantizeWideKernel<Out, kFormat, kVec, CodeOrientation::kRowwise>;
  }
}

}  // namespace jgg::cuda::mxfp8_kernels

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_WIDE_KERNELS_CUH_
