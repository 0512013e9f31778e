// Grouped MXFP8 quantize / dequantize for small calls: a decode step's activations (a few hundred
// tokens over tens of experts, a few rows per group, 1-4 MB) up to a prefill chunk's (8-12 MB: the
// limits in mxfp8_cuda.cu). The persistent kernels (mxfp8_wide_kernels.cuh) spend about 10 us on
// such a call however few its jobs are: each warp runs a long chain of job fetches, locates,
// barriers and byte-wise padding stores (about 3,000 instructions per warp, ncu, H200, 2026-11-27),
// where a copy of the same bytes takes 1.8 us.
//
// Here one flat launch has no job counter, no persistent CTAs and no copy stages:
//   - data CTAs: each warp converts one strip of a tile (its warp job, mxfp8_jobs.cuh; a tile
//     is 32 rows of one region x 32 lanes' 16-byte chunks): each lane loads its batch of 8 rows
//     of one chunk at once; lanes of one batch reduce row blocks, lanes of one chunk column
//     blocks (shuffles). A warp writes its rows' data and the real scales they own, and nothing
//     else. Strips restart at group boundaries like tiles, and a tile of few rows is one strip
//     of all its columns, so a call's warps are about its groups' rows / 8. (A warp per tile,
//     walking its rows in batches, ran a chain of up to four times the instructions, which set
//     the time of calls with groups of 9 rows or more: a skewed decode batch.)
//   - scale CTAs (quantize): each thread owns a few 16-byte words of each scale buffer and
//     zeroes the bytes of them that hold no real scale (128x4 tile padding, the rest of a slot, the
//     unused tail of the worst-case buffer): one vector store for the usual all-padding word.
// Ragged calls place their work by the groups' prefix sums, which each warp computes itself
// in 32-bit with warp shuffles (WarpGroups): no shared memory and no CTA barrier.
// The launches are in mxfp8_cuda.cu, the grids and the small-call test in
// mxfp8_launch_config.cuh. Device code only: tests/test_mxfp8_emulated.py runs it on the CPU.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_SMALL_KERNELS_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_SMALL_KERNELS_CUH_

#include "xla_plugin/kernels/cuda/mxfp8_wide_kernels.cuh"
#include "xla_plugin/kernels/cuda/warp_group_scan.cuh"

namespace jgg::cuda::mxfp8_kernels {

// --- the groups of a ragged call, as one warp sees them ----------------------------------------
// The persistent kernels' prefix sums (BuildGroupPrefix: two block-wide scans of 64-bit values,
// four barriers) led a small call's chain of instructions. Here each warp scans the group sizes
// itself, in 32 bits (SmallTiles keeps a small call's extents, tiles and scale bytes below
// 2^31): lane l holds groups [l * per_lane, (l + 1) * per_lane). Small ragged calls are
// varying-first (the small tiles do not serve varying-last): groups are row ranges.
constexpr int kSmallGroupsPerLane = kCachedGroups / 32;

// min(limit, a + b) for 0 <= a, b <= limit: the clamping rule's running sums, which stop at the
// ragged extent (associative, so a warp scan of it is exact).
__device__ inline int32_t SaturatingAdd(int32_t a, int32_t b, int32_t limit) {
  return b > limit - a ? limit : a + b;
}

// A group starting at row `begin` with clamped size `size`: its rows (clamped to the extent),
// tile strips (warp jobs; mxfp8_jobs.cuh) and scale bytes.
struct GroupSpan {
  int32_t rows, strips, bytes;
};

__device__ inline GroupSpan SpanOf(const GroupedShape& s, int32_t begin, int32_t size) {
  const int32_t rows = SaturatingAdd(begin, size, static_cast<int32_t>(s.rows)) - begin;
  return {rows, static_cast<int32_t>(RegionStrips(rows)),
          static_cast<int32_t>(mxfp8::GroupScaleBytes(rows, s.cols))};
}

struct WarpGroups {
  int32_t size[kSmallGroupsPerLane];  // this lane's groups, clamped (set below per_lane only)
  int per_lane;
  int32_t rows_before, strips_before, bytes_before;  // over the earlier lanes' groups
  int32_t rows_total, strips_total, bytes_total;     // over all groups
};

// Every lane of the warp calls.
__device__ inline WarpGroups ScanWarpGroups(const GroupedShape& s, const int32_t* group_sizes) {
  WarpGroups w;
  const int32_t extent = static_cast<int32_t>(s.rows);
  w.per_lane = static_cast<int>((s.num_groups + 31) / 32);
  const int64_t first = static_cast<int64_t>(threadIdx.x % 32) * w.per_lane;
  int32_t rows = 0;
#pragma unroll
  for (int u = 0; u < kSmallGroupsPerLane; ++u) {
    if (u >= w.per_lane) break;  // the same for every lane; later loops stop there too
    const int64_t g = first + u;
    w.size[u] = g < s.num_groups
                    ? static_cast<int32_t>(mxfp8::ClampSize(__ldg(group_sizes + g), extent))
                    : 0;
    rows = SaturatingAdd(rows, w.size[u], extent);
  }
  const auto clamped = [extent](int32_t a, int32_t b) { return SaturatingAdd(a, b, extent); };
  const auto plus = [](int32_t a, int32_t b) { return a + b; };
  w.rows_before = WarpExclusiveScan(rows, clamped, w.rows_total);
  int32_t begin = w.rows_before, strips = 0, bytes = 0;
#pragma unroll
  for (int u = 0; u < kSmallGroupsPerLane; ++u) {
    if (u >= w.per_lane) break;  // the same for every lane
    const GroupSpan g = SpanOf(s, begin, w.size[u]);
    begin += g.rows;
    strips += g.strips;
    bytes += g.bytes;
  }
  w.strips_before = WarpExclusiveScan(strips, plus, w.strips_total);
  w.bytes_before = WarpExclusiveScan(bytes, plus, w.bytes_total);
  return w;
}

// The group holding strip `key` (by_bytes false) or scale byte `key` (true): its first row,
// rows and scale offset, and key's offset inside it (found false: no group holds it). The
// same `key` on every lane of the warp, which all call and all get the answer.
struct FoundGroup {
  int32_t begin, rows, scale_offset, offset;
  bool found;
};

__device__ inline FoundGroup FindWarpGroup(const GroupedShape& s, const WarpGroups& w,
                                           int32_t key, bool by_bytes) {
  FoundGroup mine{0, 0, 0, 0, false};
  int32_t begin = w.rows_before, strips = w.strips_before, bytes = w.bytes_before;
#pragma unroll
  for (int u = 0; u < kSmallGroupsPerLane; ++u) {
    if (u >= w.per_lane) break;
    const GroupSpan g = SpanOf(s, begin, w.size[u]);
    const int32_t lo = by_bytes ? bytes : strips;
    const int32_t hi = lo + (by_bytes ? g.bytes : g.strips);
    if (!mine.found && key >= lo && key < hi) mine = {begin, g.rows, bytes, key - lo, true};
    begin += g.rows;
    strips += g.strips;
    bytes += g.bytes;
  }
  const unsigned owners = __ballot_sync(0xFFFFFFFFu, mine.found);
  if (owners == 0) return mine;
  const int owner = __ffs(owners) - 1;
  return {__shfl_sync(0xFFFFFFFFu, mine.begin, owner), __shfl_sync(0xFFFFFFFFu, mine.rows, owner),
          __shfl_sync(0xFFFFFFFFu, mine.scale_offset, owner),
          __shfl_sync(0xFFFFFFFFu, mine.offset, owner), true};
}

// A warp job: strip `strip` of the `strips` strips of a tile.
struct SmallJob {
  TileJob tile;
  int strip, strips;
};

// Strip k of a region's strips (four per full tile, then the last tile's).
__device__ inline void SetStrip(SmallJob& job, const Region& r, int64_t k, int64_t col_tile) {
  constexpr int kFull = TileStrips(kTileRows);
  job.tile.region = r;
  job.tile.row_tile = k / kFull;
  job.tile.col_tile = col_tile;
  job.tile.has_tile = true;
  job.strip = static_cast<int>(k % kFull);
  job.strips = TileStrips(MinI64(kTileRows, r.cap_rows - job.tile.row_tile * kTileRows));
}

// Warp job `index` of the call (none past the real ones): strip index / col_tiles of the
// regions' strips in order (ragged: the groups', then the tail's), column tile index %
// col_tiles. Every lane of the warp calls with the same index.
__device__ inline SmallJob LocateSmallJob(const Grid& grid, const int32_t* group_sizes,
                                          const WarpGroups& groups, int64_t index) {
  const GroupedShape& s = grid.shape;
  SmallJob job;
  ClearJob(job.tile);
  const int64_t col_tiles = CeilDivFast(s.cols, grid.tile_cols);
  const int64_t strip = DivFast(index, col_tiles);
  const int64_t col_tile = index - strip * col_tiles;
  if (!RaggedLayout(s)) {
    const int64_t per_slot = RegionStrips(s.rows);
    const int64_t slot = DivFast(strip, per_slot);
    SetStrip(job, mxfp8::SlotRegion(s, group_sizes, slot), strip - slot * per_slot, col_tile);
    return job;
  }
  const FoundGroup g = FindWarpGroup(s, groups, static_cast<int32_t>(strip), /*by_bytes=*/false);
  if (g.found) {
    SetStrip(job, mxfp8::RaggedRegion(s, g.begin, g.begin + g.rows, g.scale_offset, true),
             g.offset, col_tile);
    return job;
  }
  const int64_t k = strip - groups.strips_total;
  if (k < RegionStrips(s.rows - groups.rows_total)) {
    SetStrip(job, mxfp8::RaggedRegion(s, groups.rows_total, s.rows, groups.bytes_total, false), k,
             col_tile);
  }
  return job;
}

// One lane's part of a warp job: its batch of the tile's rows (8 rows from row0) in the
// 16-byte chunk at columns [col0, col0 + chunk) of the region. Consecutive lanes take
// consecutive chunks of one batch; lanes 32 / strips apart share a chunk.
struct SmallSpan {
  int64_t stride;     // elements between rows
  int64_t base;       // element offset of the chunk in the lane's first row
  int64_t row0;       // region-relative
  int64_t col0;       // region-relative
  int64_t data_cols;  // chunk columns holding group data (<= 0: none; < chunk: partly)
  bool in_capacity;   // the chunk lies inside the region's capacity (whole: cols % chunk == 0)
  int data_rows, cap_rows;  // of the lane's batch
  int warp_rows;            // batch 0's cap_rows, the most of any lane: the same for the warp
  bool tile_has_data;       // the tile's first row holds data
  int lanes_per_batch;      // 32 / strips
};

// min(8, max(0, remaining)): rows of a batch with `remaining` rows from its first on.
__device__ inline int BatchRowsBelow(int64_t remaining) {
  return remaining <= 0 ? 0 : remaining < kSmallBatch ? static_cast<int>(remaining) : kSmallBatch;
}

__device__ inline SmallSpan MakeSmallSpan(const Grid& grid, const SmallJob& job, int chunk) {
  const Region& r = job.tile.region;
  const int lane = threadIdx.x % 32;
  SmallSpan t;
  t.stride = grid.shape.cols;
  t.lanes_per_batch = 32 / job.strips;
  const int64_t tile_row0 = job.tile.row_tile * kTileRows;
  t.row0 = tile_row0 + lane / t.lanes_per_batch * kSmallBatch;
  t.col0 = job.tile.col_tile * grid.tile_cols +
           (job.strip * t.lanes_per_batch + lane % t.lanes_per_batch) * chunk;
  t.base = r.elem_offset + t.row0 * t.stride + t.col0;
  t.data_cols = r.cols - t.col0;
  t.in_capacity = t.col0 < r.cap_cols;
  t.data_rows = BatchRowsBelow(r.rows - t.row0);
  t.cap_rows = BatchRowsBelow(r.cap_rows - t.row0);
  t.warp_rows = BatchRowsBelow(r.cap_rows - tile_row0);
  t.tile_has_data = r.rows > tile_row0;
  return t;
}

// Zeroes the packed In elements n.. of a 16-byte chunk (0 < n < its elements).
template <typename In>
__device__ inline void KeepLeadingElements(uint32_t (&w)[4], int64_t n) {
#pragma unroll
  for (int k = 0; k < 16 / static_cast<int>(sizeof(In)); ++k) {
    if (k < n) continue;
    if constexpr (sizeof(In) == 4) {
      w[k] = 0;
    } else {
      w[k / 2] &= k % 2 ? 0x0000FFFFu : 0xFFFF0000u;
    }
  }
}

// --- quantize ---------------------------------------------------------------------------------

// The lane's batch of rows of its chunk; 0 outside the group's data.
template <typename In>
__device__ inline void LoadSmallRows(const In* x, const SmallSpan& t,
                                     uint32_t (&w)[kSmallBatch][4]) {
#pragma unroll
  for (int i = 0; i < kSmallBatch; ++i) {
    if (i < t.data_rows && t.data_cols > 0) {
      LoadReadOnlyWords<16>(reinterpret_cast<const uint8_t*>(x + i * t.stride), w[i]);
      if (t.data_cols < 16 / static_cast<int>(sizeof(In))) {
        KeepLeadingElements<In>(w[i], t.data_cols);
      }
    } else {
      w[i][0] = w[i][1] = w[i][2] = w[i][3] = 0;
    }
  }
}

// One warp job: each lane quantizes its batch of rows of its chunk, rowwise (scales from the
// 32-element blocks of lanes of one batch) and colwise (the column maxima gathered from the
// lanes that share its chunk; batch 0's lanes write the column scales).
template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__device__ void QuantizeSmallStrip(const Grid& grid, const mxfp8::QuantizeOperands& o,
                                   bool swizzled, const SmallJob& job) {
  constexpr int kVec = 16 / sizeof(In);
  constexpr int kOutWords = kVec / 4;
  constexpr int kLanesPerBlock = kBlockSize / kVec;
  const Region& r = job.tile.region;
  const SmallSpan t = MakeSmallSpan(grid, job, kVec);
  uint32_t w[kSmallBatch][4];
  LoadSmallRows<In>(static_cast<const In*>(o.x) + t.base, t, w);

  if constexpr (kRow) {
    const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/false);
    const bool writes_scale = t.data_cols > 0 && threadIdx.x % kLanesPerBlock == 0;
#pragma unroll
    for (int i = 0; i < kSmallBatch; i += 2) {
      if (i >= t.warp_rows) break;  // the same for the whole warp: shuffles stay whole
      float amax[2];
      PairRowAmax<In, kLanesPerBlock, 4>(w[i], w[i + 1], amax);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (i + u >= t.cap_rows) continue;
        const uint8_t e = ScaleExponentOf<kFormat>(amax[u]);
        if (writes_scale && i + u < t.data_rows) {
          const int64_t index =
              mxfp8::ScaleIndex(m, false, swizzled, t.row0 + i + u, t.col0 / kBlockSize);
          o.row_scales[r.scale_offset + index] = e;
        }
        if (!t.in_capacity) continue;
        float factor[kVec];
#pragma unroll
        for (int k = 0; k < kVec; ++k) factor[k] = __uint_as_float(mxfp8::ScaleReciprocalBits(e));
        uint32_t bytes[kOutWords];
        QuantizePacked<In, kFormat, kVec>(w[i + u], factor, bytes);
        StoreWords<kOutWords>(o.row_data + t.base + (i + u) * t.stride, bytes);
      }
    }
  }

  if constexpr (kCol) {
    uint32_t col_max[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kSmallBatch; ++i) {
#pragma unroll
      for (int k = 0; k < 4; ++k) col_max[k] = PackedAbsMax<In>(col_max[k], w[i][k]);
    }
    for (int d = t.lanes_per_batch; d < 32; d <<= 1) {  // the same for the whole warp
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        col_max[k] = PackedAbsMax<In>(col_max[k], __shfl_xor_sync(0xFFFFFFFFu, col_max[k], d));
      }
    }
    float maxima[kVec], factor[kVec];
    UnpackValues<In>(col_max, maxima);
    uint32_t scale_words[kOutWords];
    ColumnScaleBytes<kFormat, kVec>(maxima, scale_words, factor);
    const bool first_batch = threadIdx.x % 32 < t.lanes_per_batch;
    if (first_batch && t.tile_has_data && t.data_cols > 0) {
      StoreChunkColumnScales<kVec>(o.col_scales + r.scale_offset,
                                   mxfp8::GroupScaleMatrix(r.rows, r.cols, /*colwise=*/true),
                                   swizzled, job.tile.row_tile, t.col0, t.data_cols, scale_words);
    }
    if (!t.in_capacity) return;
#pragma unroll
    for (int i = 0; i < kSmallBatch; ++i) {
      if (i >= t.cap_rows) break;
      uint32_t bytes[kOutWords];
      QuantizePacked<In, kFormat, kVec>(w[i], factor, bytes);
      StoreWords<kOutWords>(o.col_data + t.base + i * t.stride, bytes);
    }
  }
}

// Bit b set: byte b of the 16-byte word at byte `local` (a multiple of 16) of a [rows, cols]
// group's scale bytes holds one of its real scales (common/mxfp8_layout.h).
__device__ inline uint32_t RealScaleBytes(int64_t rows, int64_t cols, bool colwise,
                                          bool swizzled, int64_t local) {
  if (rows <= 0 || cols <= 0 || local >= mxfp8::GroupScaleBytes(rows, cols)) return 0;
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(rows, cols, colwise);
  uint32_t real = 0;
  if (swizzled) {  // SwizzledIndex inverted; colwise scales are the transposed matrix
    const int64_t real_rows = colwise ? m.cols : m.rows, real_cols = colwise ? m.rows : m.cols;
    const int64_t tiles_per_band = (colwise ? m.padded_rows : m.padded_cols) / 4;
    const int64_t tile = local / mxfp8::kScaleTileBytes;
    const int64_t band = DivFast(tile, tiles_per_band);
    const int64_t row0 = band * 128 + (local % mxfp8::kScaleTileBytes) / 16;
    const int64_t col0 = (tile - band * tiles_per_band) * 4;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (row0 + 32 * q < real_rows && col0 + c < real_cols) real |= 1u << (4 * q + c);
      }
    }
    return real;
  }
  int64_t i = DivFast(local, m.padded_cols), j = local - i * m.padded_cols;
  if (i >= m.rows) return 0;  // a padding row (most words)
  for (int b = 0; b < 16; ++b) {
    if (i < m.rows && j < m.cols) real |= 1u << b;
    if (++j == m.padded_cols) {
      j = 0;
      ++i;
    }
  }
  return real;
}

// Zeroes the bytes of the 16-byte word at byte `offset` of each requested scale buffer that
// hold no real scale; the data warps write the others. The word is byte `local` of the scales
// of a [rows, cols] group (0 x 0: of no group).
__device__ inline void ZeroScalePadding(uint8_t* row_scales, uint8_t* col_scales, int64_t offset,
                                        int64_t rows, int64_t cols, int64_t local, bool swizzled) {
  uint8_t* buffers[2] = {row_scales, col_scales};
#pragma unroll
  for (int colwise = 0; colwise < 2; ++colwise) {
    uint8_t* p = buffers[colwise];
    if (p == nullptr) continue;
    p += offset;
    const uint32_t real = RealScaleBytes(rows, cols, colwise != 0, swizzled, local);
    if (real == 0) {
      *reinterpret_cast<uint4*>(p) = make_uint4(0, 0, 0, 0);
    } else {
      for (int b = 0; b < 16; ++b) {
        if (!(real >> b & 1u)) p[b] = 0;
      }
    }
  }
}

// A scale CTA's words: at step k, warp w's lanes take the 32 words (one 512-byte scale tile,
// so within one group: groups' scale bytes are whole tiles) from
// 512 (k * kSmallWarps + w) bytes past the CTA's first. Every lane of the warp calls.
__device__ inline void ZeroSmallScaleWords(const Grid& grid, const mxfp8::QuantizeOperands& o,
                                           const WarpGroups& groups, int64_t cta,
                                           bool swizzled) {
  const GroupedShape& s = grid.shape;
  const int lane = threadIdx.x % 32;
  const int64_t cta_first = cta * kSmallThreads * kSmallScaleWordsPerThread * 16;
#pragma unroll
  for (int k = 0; k < kSmallScaleWordsPerThread; ++k) {
    const int64_t tile = cta_first + 16 * (k * kSmallThreads + (threadIdx.x - lane));
    if (tile >= grid.scale_bytes) return;  // the same for the whole warp
    int64_t rows = 0, cols = 0, local = 16 * lane;
    if (RaggedLayout(s)) {
      const FoundGroup g = FindWarpGroup(s, groups, static_cast<int32_t>(tile), /*by_bytes=*/true);
      if (g.found) {
        rows = g.rows;
        cols = s.cols;
        local += g.offset;
      }
    } else {
      const int64_t slot_bytes = mxfp8::GroupScaleBytes(s.rows, s.cols);
      const int64_t slot = DivFast(tile, slot_bytes);
      const Region r = mxfp8::SlotRegion(s, o.group_sizes, slot);
      rows = r.rows;
      cols = r.cols;
      local += tile - slot * slot_bytes;
    }
    ZeroScalePadding(o.row_scales, o.col_scales, tile + 16 * lane, rows, cols, local, swizzled);
  }
}

template <typename In, bool kRow, bool kCol, Fp8Format kFormat>
__global__ void __launch_bounds__(kSmallThreads, kMinCtasPerSm)
    QuantizeSmallKernel(Grid grid, mxfp8::QuantizeOperands o, bool swizzled) {
  WarpGroups groups;
  if (RaggedLayout(grid.shape)) groups = ScanWarpGroups(grid.shape, o.group_sizes);
  const int64_t data_ctas = SmallDataCtas(grid);
  const int64_t cta = blockIdx.x;
  if (cta >= data_ctas) {
    ZeroSmallScaleWords(grid, o, groups, cta - data_ctas, swizzled);
    return;
  }
  const int64_t index = cta * kSmallWarps + threadIdx.x / 32;  // the same for the whole warp
  if (index >= grid.data_tiles) return;
  const SmallJob job = LocateSmallJob(grid, o.group_sizes, groups, index);
  if (job.tile.has_tile) QuantizeSmallStrip<In, kRow, kCol, kFormat>(grid, o, swizzled, job);
}

// --- dequantize -------------------------------------------------------------------------------

// One warp job: each lane dequantizes its batch of rows of its chunk. kVec: fp8 codes per lane
// and row (16, or 8 where the columns are not whole 16-byte chunks).
template <typename Out, Fp8Format kFormat, int kVec>
__device__ void DequantizeSmallStrip(const Grid& grid, const mxfp8::DequantizeOperands& o,
                                     bool colwise, bool swizzled, const SmallJob& job) {
  constexpr int kOutWords = kVec * sizeof(Out) / 4;
  const Region& r = job.tile.region;
  const SmallSpan t = MakeSmallSpan(grid, job, kVec);
  if (!t.in_capacity || t.cap_rows == 0) return;  // no shuffles below
  const ScaleMatrix m = mxfp8::GroupScaleMatrix(r.rows, r.cols, colwise);
  const uint8_t* __restrict__ scales = o.scales + r.scale_offset;

  const ColumnScales<Out, kFormat, kVec> cols = LoadChunkColumnScales<Out, kFormat, kVec>(
      scales, m, swizzled, job.tile.row_tile, t.col0, t.data_cols,
      colwise && t.tile_has_data && t.data_cols > 0);

  Out* __restrict__ out = static_cast<Out*>(o.out) + t.base;
  uint32_t codes[kSmallBatch][kVec / 4];
  uint8_t e_row[kSmallBatch];
#pragma unroll
  for (int i = 0; i < kSmallBatch; ++i) {
    e_row[i] = 0;
    if (i < t.data_rows && t.data_cols > 0) {
      LoadReadOnlyWords<kVec>(o.data + t.base + i * t.stride, codes[i]);
      if (!colwise) {
        e_row[i] = __ldg(scales + mxfp8::ScaleIndex(m, false, swizzled, t.row0 + i,
                                                    t.col0 / kBlockSize));
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec / 4; ++k) codes[i][k] = 0;
    }
  }
#pragma unroll
  for (int i = 0; i < kSmallBatch; ++i) {
    if (i >= t.cap_rows) break;
    uint32_t words[kOutWords];
    DequantizeTileRow<Out, kFormat, kVec>(codes[i], colwise, cols, e_row[i],
                                          i < t.data_rows ? t.data_cols : 0, words);
    StoreWords<kOutWords>(out + i * t.stride, words);
  }
}

template <typename Out, Fp8Format kFormat, int kVec>
__global__ void __launch_bounds__(kSmallThreads, kMinCtasPerSm)
    DequantizeSmallKernel(Grid grid, mxfp8::DequantizeOperands o, bool colwise, bool swizzled) {
  WarpGroups groups;
  if (RaggedLayout(grid.shape)) groups = ScanWarpGroups(grid.shape, o.group_sizes);
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kSmallWarps + threadIdx.x / 32;
  if (index >= grid.data_tiles) return;
  const SmallJob job = LocateSmallJob(grid, o.group_sizes, groups, index);
  if (job.tile.has_tile) DequantizeSmallStrip<Out, kFormat, kVec>(grid, o, colwise, swizzled, job);
}

}  // namespace jgg::cuda::mxfp8_kernels

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_SMALL_KERNELS_CUH_
