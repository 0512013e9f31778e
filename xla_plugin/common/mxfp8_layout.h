// Where the groups of a grouped MXFP8 tensor and their scales live, whatever the device holds
// in the group sizes (SPEC sections 3 and 4). Shared by the CPU and CUDA kernels.
//
// A grouped tensor is a list of 2-D group matrices, each quantized exactly as if alone: blocks
// of 32 restart at every group boundary, so any group sizes are valid. Layouts (x as seen by the
// kernels; group_sizes int32 on the device):
//   kSameDims     x [G, R, C]: group g is x[g]                     (group_sizes unused)
//   kVaryingFirst x [R, C], group_sizes [G]: group g = rows [begin_g, end_g), all C columns
//   kVaryingLast  x [R, C], group_sizes [G]: group g = columns [begin_g, end_g), all R rows
//   kVaryingBoth  x [G, R, C], group_sizes [G, 2] = (rows_g, cols_g): group g is the top-left
//                 x[g, :rows_g, :cols_g] of its slot (R, C are static per-group capacities)
// Clamping: negative sizes count as 0; running sums stop at the ragged extent; varying-both
// extents are clamped to the slot. Elements of no group are written as 0 in every output.
//
// Scales: a group matrix [r, c] has a rowwise scale matrix [r, ceil(c/32)] and a colwise one
// [ceil(r/32), c], each padded to whole 128x4 tiles, as if that group were a tensor alone:
//   rowwise [128 * ceil(r/128), 4 * ceil(c/128)]    (element (row i, block j))
//   colwise [4 * ceil(r/128), 128 * ceil(c/128)]    (element (block i, column j))
// Both hold GroupScaleBytes(r, c) = 512 * ceil(r/128) * ceil(c/128) bytes, stored row-major
// ("compact") or in the cuBLAS/CUTLASS 128x4 interleave ("swizzled"; colwise scales are swizzled
// as the transposed [column, block] matrix, the way a GEMM reads that operand). Group g's bytes
// start at its scale offset: g * GroupScaleBytes(R, C) for kSameDims and kVaryingBoth (fixed
// slots), the device prefix sum of the earlier groups' sizes for kVaryingFirst / kVaryingLast.
// The buffer is sized at trace time for the worst case (ScaleBufferBytes); every byte of it
// that holds no real scale (tile padding, the rest of a slot, the tail) is 0.
#ifndef JGG_XLA_PLUGIN_COMMON_MXFP8_LAYOUT_H_
#define JGG_XLA_PLUGIN_COMMON_MXFP8_LAYOUT_H_

#include <cstdint>

#include "xla_plugin/common/ragged_layout.h"

namespace jgg::mxfp8 {

enum class GroupedLayout : int32_t {
  kSameDims = 0,
  kVaryingFirst = 1,
  kVaryingLast = 2,
  kVaryingBoth = 3,
};

constexpr int64_t kBlockSize = 32;       // elements per E8M0 scale
constexpr int64_t kScaleTileRows = 128;  // the 128x4 tile of the swizzled layout
constexpr int64_t kScaleTileCols = 4;
constexpr int64_t kScaleTileBytes = kScaleTileRows * kScaleTileCols;

// Static description of a call (x's dims, see above).
struct GroupedShape {
  GroupedLayout layout;
  int64_t num_groups;
  int64_t rows, cols;
};

JGG_HOST_DEVICE inline int64_t GroupScaleBytes(int64_t rows, int64_t cols) {
  return kScaleTileBytes * CeilDiv(rows, kScaleTileRows) * CeilDiv(cols, kScaleTileRows);
}

// Largest sum over groups of ceil(size_g / tile) when sizes are >= 0 and sum to at most
// `extent`: each non-empty group (at most min(groups, extent) of them) adds at most tile - 1
// elements of padding.
JGG_HOST_DEVICE inline int64_t MaxSumOfTiles(int64_t extent, int64_t num_groups, int64_t tile) {
  return (extent + (tile - 1) * MinI64(num_groups, extent)) / tile;
}

// Bytes of one orientation's scale buffer, the worst case over all group sizes.
JGG_HOST_DEVICE inline int64_t ScaleBufferBytes(const GroupedShape& s) {
  switch (s.layout) {
    case GroupedLayout::kSameDims:
    case GroupedLayout::kVaryingBoth:
      return s.num_groups * GroupScaleBytes(s.rows, s.cols);
    case GroupedLayout::kVaryingFirst:
      return kScaleTileBytes * CeilDiv(s.cols, kScaleTileRows) *
             MaxSumOfTiles(s.rows, s.num_groups, kScaleTileRows);
    case GroupedLayout::kVaryingLast:
      return kScaleTileBytes * CeilDiv(s.rows, kScaleTileRows) *
             MaxSumOfTiles(s.cols, s.num_groups, kScaleTileRows);
  }
  return 0;
}

// Elements of x (and of each data output).
JGG_HOST_DEVICE inline int64_t DataElements(const GroupedShape& s) {
  const bool stacked = s.layout == GroupedLayout::kSameDims || s.layout == GroupedLayout::kVaryingBoth;
  return (stacked ? s.num_groups : 1) * s.rows * s.cols;
}

// One rectangle of the data arrays (row stride = shape.cols): its capacity
// [cap_rows, cap_cols] is written; its top-left [rows, cols] is a group quantized alone, the
// rest of the capacity is 0. Regions of no group (the tail past the last group) have an empty
// extent and no scales.
struct Region {
  int64_t elem_offset;
  int64_t cap_rows, cap_cols;
  int64_t rows, cols;
  int64_t scale_offset;  // byte offset of the group's scales (both orientations)
};

JGG_HOST_DEVICE inline int64_t ClampSize(int32_t size, int64_t limit) {
  return size < 0 ? 0 : MinI64(size, limit);
}

// Group g of the fixed-slot layouts (kSameDims, kVaryingBoth).
JGG_HOST_DEVICE inline Region SlotRegion(const GroupedShape& s, const int32_t* group_sizes,
                                         int64_t g) {
  int64_t rows = s.rows, cols = s.cols;
  if (s.layout == GroupedLayout::kVaryingBoth) {
    rows = ClampSize(group_sizes[2 * g], s.rows);
    cols = ClampSize(group_sizes[2 * g + 1], s.cols);
  }
  return {g * s.rows * s.cols, s.rows, s.cols, rows, cols, g * GroupScaleBytes(s.rows, s.cols)};
}

// The part [begin, end) of the ragged dimension (kVaryingFirst: rows, kVaryingLast: columns);
// a group when `is_group`, the zero tail otherwise.
JGG_HOST_DEVICE inline Region RaggedRegion(const GroupedShape& s, int64_t begin, int64_t end,
                                           int64_t scale_offset, bool is_group) {
  const int64_t n = end - begin;
  if (s.layout == GroupedLayout::kVaryingFirst) {
    return {begin * s.cols, n, s.cols, is_group ? n : 0, is_group ? s.cols : 0, scale_offset};
  }
  return {begin, s.rows, n, is_group ? s.rows : 0, is_group ? n : 0, scale_offset};
}

JGG_HOST_DEVICE inline int64_t RaggedExtent(const GroupedShape& s) {
  return s.layout == GroupedLayout::kVaryingFirst ? s.rows : s.cols;
}

// Scale bytes of a ragged group spanning `n` of the ragged dimension.
JGG_HOST_DEVICE inline int64_t RaggedGroupScaleBytes(const GroupedShape& s, int64_t n) {
  return s.layout == GroupedLayout::kVaryingFirst ? GroupScaleBytes(n, s.cols)
                                                  : GroupScaleBytes(s.rows, n);
}

// Every region of a call in order (groups, then for ragged layouts the tail), with the
// scale offsets; `visit(region)` is called once per region. Serial: the CPU path. The CUDA
// kernels compute the same regions with block-wide prefix sums of the same quantities.
template <typename Visit>
JGG_HOST_DEVICE void ForEachRegion(const GroupedShape& s, const int32_t* group_sizes, Visit visit) {
  if (s.layout == GroupedLayout::kSameDims || s.layout == GroupedLayout::kVaryingBoth) {
    for (int64_t g = 0; g < s.num_groups; ++g) visit(SlotRegion(s, group_sizes, g));
    return;
  }
  const int64_t extent = RaggedExtent(s);
  int64_t begin = 0, scale_offset = 0;
  for (int64_t g = 0; g < s.num_groups; ++g) {
    const int64_t end = MinI64(extent, begin + ClampSize(group_sizes[g], extent));
    visit(RaggedRegion(s, begin, end, scale_offset, true));
    scale_offset += RaggedGroupScaleBytes(s, end - begin);
    begin = end;
  }
  visit(RaggedRegion(s, begin, extent, scale_offset, false));
}

// 128x4 interleave (cuBLAS / CUTLASS block-scaled operands): element (r, c) of a scale matrix
// with `padded_cols` columns (a multiple of 4).
JGG_HOST_DEVICE inline int64_t SwizzledIndex(int64_t r, int64_t c, int64_t padded_cols) {
  return ((r / 128) * (padded_cols / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
         c % 4;
}

// Dims of a group's padded scale matrix for one orientation.
struct ScaleMatrix {
  int64_t rows, cols;  // real extent: rowwise [r, ceil(c/32)], colwise [ceil(r/32), c]
  int64_t padded_rows, padded_cols;
};

JGG_HOST_DEVICE inline ScaleMatrix GroupScaleMatrix(int64_t rows, int64_t cols, bool colwise) {
  const int64_t row_tiles = CeilDiv(rows, kScaleTileRows), col_tiles = CeilDiv(cols, kScaleTileRows);
  if (!colwise) {
    return {rows, CeilDiv(cols, kBlockSize), row_tiles * kScaleTileRows, col_tiles * kScaleTileCols};
  }
  return {CeilDiv(rows, kBlockSize), cols, row_tiles * kScaleTileCols, col_tiles * kScaleTileRows};
}

// Byte offset inside a group's scale region of scale-matrix element (i, j).
JGG_HOST_DEVICE inline int64_t ScaleIndex(const ScaleMatrix& m, bool colwise, bool swizzled,
                                          int64_t i, int64_t j) {
  if (!swizzled) return i * m.padded_cols + j;
  // Colwise scales are read by a GEMM as the transposed operand: swizzle [column, block].
  return colwise ? SwizzledIndex(j, i, m.padded_rows) : SwizzledIndex(i, j, m.padded_cols);
}

}  // namespace jgg::mxfp8

#endif  // JGG_XLA_PLUGIN_COMMON_MXFP8_LAYOUT_H_
