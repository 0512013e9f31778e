// Where the passes of the fused MXFP8 grouped GEMM (mxfp8_ragged_m_cuda.cu) are: a block's
// work is one "slot", each group's slots in group order, then one slot for the rows of no
// group. Located by warp scans of the device group sizes (warp_group_scan.cuh).
//
// A group of r rows has T = ceil(r / 8) row tiles (the mma's 8-wide operand) and takes T slots
// of each 128-column block: as passes of the kernel's largest R (4, 2 or 1) row tiles, then at
// most one smaller pass of each, the last one holding the partial tile. A pass of R row tiles
// is R slots, each computing its 8R rows for 128 / R of the block's columns, so a slot's mma
// count is the same whatever R, and the rows of a large group load and convert each weight
// byte once per 8R rows instead of once per 8.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_PASSES_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_PASSES_CUH_

#include <cstdint>

#include "xla_plugin/common/mxfp8_gemm_problem.h"
#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/warp_group_scan.cuh"

namespace jgg::cuda::mxfp8_ragged_m {

using mxfp8::RaggedMProblem;

constexpr int kTileRows = 8;                           // rows of a row tile
constexpr int kMaxRowTiles = 4;                        // row tiles of the largest pass
constexpr int kMaxPassRows = kTileRows * kMaxRowTiles;

// A block's work: up to 8 * row_tiles rows of one group (its columns: chunk `chunk` of
// 128 / row_tiles of the block's 128), or (tail) the rows no group covers.
struct Pass {
  int64_t group;
  int64_t row_begin;  // first output (and lhs) row
  int64_t rows;
  int row_tiles;      // 1, 2 or 4
  int chunk;          // 0 .. row_tiles - 1
  bool tail;
  // The scale row of row_begin in an lhs grouped by the GEMM's own sizes (LocateLhsScaleRows).
  int64_t gemm_grouped_scale_row;
  // Of each row of the pass: the byte offset of its lhs scale row, -1 in no lhs group or past
  // the pass's rows.
  int64_t lhs_scale_offsets[kMaxPassRows];
};

// Slot s (0 <= s < tiles) of a group of `tiles` row tiles, as the header says.
struct SlotInGroup {
  int64_t first_tile;
  int row_tiles, chunk;
};

__device__ inline SlotInGroup GroupSlot(int64_t tiles, int64_t s, int max_row_tiles) {
  const int64_t in_fours = max_row_tiles >= 4 ? tiles / 4 * 4 : 0;  // tiles (slots) in passes of 4
  if (s < in_fours) return {s / 4 * 4, 4, static_cast<int>(s % 4)};
  const int64_t in_twos = max_row_tiles >= 2 ? (tiles - in_fours) / 2 * 2 : 0;
  if (s < in_fours + in_twos) {
    const int64_t i = s - in_fours;
    return {in_fours + i / 2 * 2, 2, static_cast<int>(i % 2)};
  }
  return {s, 1, 0};  // the last tile where passes of 2 or 4 came first
}

// Rows of a group's lhs scale matrix: whole 128-row tiles (mxfp8_layout.h).
__device__ inline int64_t LhsScaleRows(int64_t rows) {
  return CeilDiv(rows, mxfp8::kScaleTileRows) * mxfp8::kScaleTileRows;
}

// Warp 0: the pass of `slot` (all but its lhs scale rows), written to *pass by one lane;
// false when the slot has no work. Row tiles are `tile_rows` rows (the mma kernel's 8, the
// wgmma kernel's 64 with passes of one tile), passes of at most `max_row_tiles`. Lane l looks
// at groups 4l .. 4l + 3 of each window (NextLaneGroups): one round trip for up to 128
// groups. It also finds the pass's scale row in an lhs grouped by the same sizes, so
// LocateLhsScaleRows needs no second walk there.
__device__ inline bool LocatePass(const RaggedMProblem& p, const int32_t* sizes, int64_t slot,
                                  int max_row_tiles, Pass* pass, int tile_rows = kTileRows) {
  const int lane = threadIdx.x % 32;
  int64_t rows_before = 0, slots_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base < p.num_groups; base += kWindowGroups) {
    const LaneGroups groups = NextLaneGroups(sizes, p.num_groups, base, &rows_before);
    int64_t lane_tiles = 0, lane_scale_rows = 0;  // a group's tiles are its slots
    int64_t row = groups.row;
#pragma unroll
    for (int j = 0; j < kLaneGroups; ++j) {
      const int64_t rows = GroupRowsAt(row, groups.size[j], p.rows).rows;
      lane_tiles += CeilDiv(rows, tile_rows);
      lane_scale_rows += LhsScaleRows(rows);
      row += groups.size[j];
    }
    int64_t window_slots, window_scale_rows;
    int64_t first_slot = slots_before + WarpExclusiveSum(lane_tiles, &window_slots);
    int64_t scale_row = scale_rows_before + WarpExclusiveSum(lane_scale_rows, &window_scale_rows);
    const unsigned hit =
        __ballot_sync(0xffffffffu, slot >= first_slot && slot < first_slot + lane_tiles);
    if (hit != 0) {
      if (lane == __ffs(hit) - 1) {
        row = groups.row;
        for (int j = 0; j < kLaneGroups; ++j) {  // to the group holding the slot
          const GroupRows group = GroupRowsAt(row, groups.size[j], p.rows);
          const int64_t tiles = CeilDiv(group.rows, tile_rows);
          if (slot < first_slot + tiles) {
            const SlotInGroup s = GroupSlot(tiles, slot - first_slot, max_row_tiles);
            const int64_t in_group = s.first_tile * tile_rows;
            pass->group = base + kLaneGroups * lane + j;
            pass->row_begin = group.begin + in_group;
            pass->rows = MinI64(tile_rows * s.row_tiles, group.rows - in_group);
            pass->row_tiles = s.row_tiles;
            pass->chunk = s.chunk;
            pass->tail = false;
            pass->gemm_grouped_scale_row = scale_row + in_group;
            break;
          }
          first_slot += tiles;
          scale_row += LhsScaleRows(group.rows);
          row += groups.size[j];
        }
      }
      return true;
    }
    slots_before += window_slots;
    scale_rows_before += window_scale_rows;
  }
  if (slot != slots_before) return false;
  const int64_t covered = MinI64(p.rows, rows_before);
  if (lane == 0) {
    pass->group = p.num_groups;
    pass->row_begin = covered;
    pass->rows = p.rows - covered;
    pass->row_tiles = 1;
    pass->chunk = 0;
    pass->tail = true;
    pass->gemm_grouped_scale_row = -1;
  }
  return covered < p.rows;
}

// Warp 0: offsets[r] for the rows r < pass.rows of a located (not tail) pass: the byte
// offset of that lhs row's scale row, -1 in no lhs group. A grouped lhs's groups have scale
// matrices of 128 * ceil(rows / 128) rows, one after another (mxfp8_layout.h). Where the lhs
// sizes are the GEMM's (the same buffer: dy and x of an MoE layer), the pass's rows are
// consecutive rows of one lhs group whose scale row LocatePass found. Otherwise the lanes
// scan the lhs groups 32 at a time up to the pass's end; each group holding rows of the pass
// (usually one) hands its bounds to the lanes of the rows, so the work per row is a compare,
// not a walk over every group.
__device__ inline void LocateLhsScaleRows(const RaggedMProblem& p, const int32_t* lhs_sizes,
                                          const int32_t* gemm_sizes, const Pass& pass,
                                          int64_t* offsets) {
  const int lane = threadIdx.x % 32;
  const int64_t row_begin = pass.row_begin, rows = pass.rows;
  const int64_t row_bytes = mxfp8::LhsScaleRowBytes(p);
  if (!p.lhs_grouped) {
    for (int64_t r = lane; r < rows; r += 32) offsets[r] = (row_begin + r) * row_bytes;
    return;
  }
  if (lhs_sizes == gemm_sizes && p.lhs_num_groups == p.num_groups) {
    for (int64_t r = lane; r < rows; r += 32)
      offsets[r] = (pass.gemm_grouped_scale_row + r) * row_bytes;
    return;
  }
  for (int64_t r = lane; r < rows; r += 32) offsets[r] = -1;
  __syncwarp();
  const int64_t row_end = row_begin + rows;
  int64_t rows_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base < p.lhs_num_groups && rows_before < row_end; base += 32) {
    const GroupRows group = NextGroupRows(lhs_sizes, p.lhs_num_groups, p.rows, base, &rows_before);
    const int64_t scale_rows = LhsScaleRows(group.rows);
    const int64_t scale_incl = WarpInclusiveSum(scale_rows);
    const int64_t first_scale_row = scale_rows_before + scale_incl - scale_rows;
    unsigned holding = __ballot_sync(0xffffffffu, group.rows > 0 && group.begin < row_end &&
                                                      group.begin + group.rows > row_begin);
    while (holding != 0) {
      const int j = __ffs(holding) - 1;
      holding &= holding - 1;
      const int64_t begin = __shfl_sync(0xffffffffu, group.begin, j);
      const int64_t end = begin + __shfl_sync(0xffffffffu, group.rows, j);
      const int64_t scale_row = __shfl_sync(0xffffffffu, first_scale_row, j);
      for (int64_t r = lane; r < rows; r += 32) {
        const int64_t row = row_begin + r;
        if (row >= begin && row < end) offsets[r] = (scale_row + row - begin) * row_bytes;
      }
    }
    scale_rows_before += __shfl_sync(0xffffffffu, scale_incl, 31);
  }
}

// Warp 0: pass->lhs_scale_offsets (-1 past the pass's rows too).
__device__ inline void LocateLhsScales(const RaggedMProblem& p, const int32_t* lhs_sizes,
                                       const int32_t* gemm_sizes, Pass* pass) {
  pass->lhs_scale_offsets[threadIdx.x % 32] = -1;
  __syncwarp();
  LocateLhsScaleRows(p, lhs_sizes, gemm_sizes, *pass, pass->lhs_scale_offsets);
}

// The block's share of a tail pass: zeroes its rows (those of no group) in the output
// columns [col0, col0 + block_cols).
template <typename O>
__device__ void ZeroRows(const RaggedMProblem& p, void* out, const Pass& pass, int64_t col0,
                         int64_t block_cols) {
  const int64_t cols = MinI64(block_cols, p.n - col0);
  for (int64_t t = threadIdx.x; t < pass.rows * cols; t += blockDim.x)
    static_cast<O*>(out)[(pass.row_begin + t / cols) * p.n + col0 + t % cols] = FromFloat<O>(0.0f);
}

}  // namespace jgg::cuda::mxfp8_ragged_m

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_PASSES_CUH_
