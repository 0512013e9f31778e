// The ragged-layout rule shared by every backend: which rows of the ragged
// dimension belong to which group, whatever the device holds in group_sizes.
//
// Rule (SPEC section 3), identical on CPU and CUDA:
//   * a negative size counts as 0;
//   * a running sum past the ragged extent is clamped at the extent;
//   * group_offset is clamped to [0, num_global_groups]; local groups past the
//     global count are empty.
// So every group owns a contiguous, in-bounds row range [begin, end), ranges
// of consecutive groups touch, and rows outside the local groups' span belong
// to no local group (the forward writes 0 there, wgrad ignores them).
#ifndef JGG_XLA_PLUGIN_COMMON_RAGGED_LAYOUT_H_
#define JGG_XLA_PLUGIN_COMMON_RAGGED_LAYOUT_H_

#include <cstdint>

#if defined(__CUDACC__)
#define JGG_HOST_DEVICE __host__ __device__
#else
#define JGG_HOST_DEVICE
#endif

namespace jgg {

JGG_HOST_DEVICE inline int64_t MinI64(int64_t a, int64_t b) { return a < b ? a : b; }
JGG_HOST_DEVICE inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Where the local groups of one batch entry sit inside the ragged dimension.
// Stored as `num_local_groups + 1` boundaries: group j owns rows
// [row_begin[j], row_begin[j + 1]). row_begin[0] > 0 when group_offset skips
// earlier groups; row_begin[num_local_groups] < extent when the sizes sum to
// less than the extent.
//
// `tile_begin` is the same prefix sum counted in tiles of `tile_rows` rows
// (each group rounds up on its own, so a tile never spans two groups); it lets
// a kernel map a flat tile index to its group with a binary search.
struct RaggedSchedule {
  int64_t* row_begin;   // [num_local_groups + 1]
  int64_t* tile_begin;  // [num_local_groups + 1]
};

// A negative size counts as 0.
JGG_HOST_DEVICE inline int64_t ClampedSize(int32_t size) { return size > 0 ? size : 0; }

// Global index of local group 0: the offset clamped to [0, num_global_groups].
JGG_HOST_DEVICE inline int64_t FirstLocalGroup(int32_t group_offset, int64_t num_global_groups) {
  return MinI64(group_offset < 0 ? 0 : group_offset, num_global_groups);
}

// Clamping the running sum at every step equals clamping the plain prefix sum
// once (sizes are non-negative), which is what lets the CUDA schedule kernel
// use a parallel scan: row boundary = min(extent, sum of clamped sizes before).
//
// Fills `schedule` for one batch entry from that entry's `num_global_groups`
// sizes, sequentially: the CPU handler's version and the reference of the
// parallel CUDA one.
JGG_HOST_DEVICE inline void ComputeRaggedSchedule(
    const int32_t* group_sizes, int64_t num_global_groups, int32_t group_offset,
    int64_t num_local_groups, int64_t extent, int64_t tile_rows,
    RaggedSchedule schedule) {
  const int64_t first = FirstLocalGroup(group_offset, num_global_groups);
  int64_t row = 0;
  for (int64_t g = 0; g < first; ++g) row = MinI64(extent, row + ClampedSize(group_sizes[g]));
  int64_t tile = 0;
  for (int64_t j = 0; j < num_local_groups; ++j) {
    schedule.row_begin[j] = row;
    schedule.tile_begin[j] = tile;
    const int64_t g = first + j;
    const int64_t end =
        MinI64(extent, row + (g < num_global_groups ? ClampedSize(group_sizes[g]) : 0));
    tile += CeilDiv(end - row, tile_rows);
    row = end;
  }
  schedule.row_begin[num_local_groups] = row;
  schedule.tile_begin[num_local_groups] = tile;
}

// Largest number of row tiles a schedule can hold: each group adds at most one
// partial tile on top of the ceil(extent / tile_rows) full ones.
JGG_HOST_DEVICE inline int64_t MaxGroupTiles(int64_t extent, int64_t num_local_groups,
                                             int64_t tile_rows) {
  return CeilDiv(extent, tile_rows) + num_local_groups;
}

// Rows outside [row_begin[0], row_begin[G]) belong to no local group. They
// split into a head [0, lo) and a tail [hi, extent); this many tiles cover
// them in the worst case.
JGG_HOST_DEVICE inline int64_t MaxUncoveredTiles(int64_t extent, int64_t tile_rows) {
  return CeilDiv(extent, tile_rows) + 2;
}

// Rows [begin, end) of uncovered tile `t` (counting head tiles, then tail
// tiles); begin == end when `t` is past the last uncovered tile.
struct RowSpan {
  int64_t begin;
  int64_t end;
};
JGG_HOST_DEVICE inline RowSpan UncoveredTile(int64_t t, int64_t lo, int64_t hi, int64_t extent,
                                             int64_t tile_rows) {
  const int64_t head_tiles = CeilDiv(lo, tile_rows);
  if (t < head_tiles) {
    return {t * tile_rows, MinI64(lo, (t + 1) * tile_rows)};
  }
  const int64_t begin = hi + (t - head_tiles) * tile_rows;
  if (begin >= extent) return {extent, extent};
  return {begin, MinI64(extent, begin + tile_rows)};
}

// Group j whose tiles contain flat tile index `tile` (tile < tile_begin[G]).
JGG_HOST_DEVICE inline int64_t GroupOfTile(const int64_t* tile_begin, int64_t num_local_groups,
                                           int64_t tile) {
  int64_t lo = 0, hi = num_local_groups - 1;
  while (lo < hi) {  // last j with tile_begin[j] <= tile
    const int64_t mid = (lo + hi + 1) / 2;
    if (tile_begin[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_RAGGED_LAYOUT_H_
