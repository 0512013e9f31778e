// Launch configuration of the grouped MXFP8 quantize / dequantize kernels: the grid of jobs a
// call gets (wide tiles or 8-byte strips, how many CTAs) and the kernel instantiation its types
// and modes select. Host code; the launches are in mxfp8_cuda.cu.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_LAUNCH_CONFIG_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_LAUNCH_CONFIG_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_problem.h"
#include "xla_plugin/kernels/cuda/mxfp8_jobs.cuh"

namespace jgg::cuda::mxfp8_kernels {

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

inline bool QuantizeAligned(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o) {
  return Aligned16(o.x) && (!p.rowwise || (Aligned16(o.row_data) && Aligned16(o.row_scales))) &&
         (!p.colwise || (Aligned16(o.col_data) && Aligned16(o.col_scales)));
}

inline bool DequantizeAligned(const mxfp8::DequantizeOperands& o) {
  return Aligned16(o.data) && Aligned16(o.out) && Aligned16(o.scales);
}

// Small tiles (mxfp8_small_kernels.cuh) serve calls whose rows are whole chunks at aligned
// addresses, all layouts but varying-last (its groups start at any column), ragged calls of at
// most kCachedGroups groups (16 per lane of a warp's scan), and elements and scale bytes below
// 2^31 (the warps' 32-bit sums). Which calls that they serve take them is the launcher's
// choice (mxfp8_cuda.cu: the small ones).
inline bool SmallTiles(const GroupedShape& s, int chunk_elements, bool aligned) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  return aligned && s.layout != GroupedLayout::kVaryingLast && s.cols % chunk_elements == 0 &&
         (!RaggedLayout(s) || s.num_groups <= kCachedGroups) &&
         mxfp8::DataElements(s) < kLimit && mxfp8::ScaleBufferBytes(s) < kLimit;
}

// The small launch of a call in chunks of `chunk_elements`: the strips of its data tiles (32
// rows x 32 lanes' chunks; mxfp8_jobs.cuh), one per warp (grid.data_tiles counts strips here,
// the worst case over all group sizes), then, for quantize, the CTAs that zero the scale
// buffers' padding.
inline Grid SmallGrid(const GroupedShape& s, int chunk_elements, bool scale_words) {
  Grid grid = MakeGrid(s, 32 * static_cast<int64_t>(chunk_elements), kSmallThreads,
                       /*wide=*/false, /*aligned=*/true);
  const int64_t col_tiles = CeilDiv(s.cols, grid.tile_cols);
  grid.data_tiles = col_tiles * (RaggedLayout(s)  // varying-first: the tail is one more region
                                     ? MaxSumOfStrips(s.rows, s.num_groups + 1)
                                     : s.num_groups * RegionStrips(s.rows));
  grid.jobs = grid.data_tiles;
  grid.ctas = SmallDataCtas(grid) +
              (scale_words ? CeilDiv(CeilDiv(grid.scale_bytes, 16),
                                     kSmallThreads * kSmallScaleWordsPerThread)
                           : 0);
  return grid;
}

// Elements per chunk of the small quantize tiles of a call; 0 where they do not serve it.
inline int SmallQuantizeChunk(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o,
                              int in_bytes) {
  return SmallTiles(p.shape, 16 / in_bytes, QuantizeAligned(p, o)) ? 16 / in_bytes : 0;
}

// fp8 codes per chunk of the small dequantize tiles (16, or 8 for rows of whole 8-byte
// chunks); 0 where they do not serve the call.
inline int SmallDequantizeChunk(const mxfp8::DequantizeProblem& p,
                                const mxfp8::DequantizeOperands& o) {
  const bool aligned = DequantizeAligned(o);
  if (SmallTiles(p.shape, 16, aligned)) return 16;
  return SmallTiles(p.shape, 8, aligned) ? 8 : 0;
}

// Grids of one call: wide tiles where they serve, else 8-byte strips of `vec` elements.
inline Grid QuantizeGrid(const mxfp8::QuantizeProblem& p, const mxfp8::QuantizeOperands& o,
                         int in_bytes, bool allow_wide = true) {
  const bool aligned = QuantizeAligned(p, o);
  const int chunk = 16 / in_bytes, vec = kStripBytes / in_bytes;
  if (allow_wide && WideTiles(p.shape, chunk, aligned)) {
    return MakeGrid(p.shape, 32 * chunk, kWideThreads, true, aligned);
  }
  const int64_t tile_cols = StripTileCols(p.shape.cols, vec);
  return MakeGrid(p.shape, tile_cols, static_cast<int>(tile_cols / vec), false, aligned);
}

inline Grid DequantizeGrid(const mxfp8::DequantizeProblem& p, const mxfp8::DequantizeOperands& o,
                           bool allow_wide = true) {
  const bool aligned = DequantizeAligned(o);
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

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_LAUNCH_CONFIG_CUH_
