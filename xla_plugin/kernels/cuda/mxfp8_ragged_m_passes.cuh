// Where the passes of the fused MXFP8 grouped GEMM (mxfp8_ragged_m_cuda.cu) are: a block's
// work is one "slot", every group's passes of kPassRows rows in group order, then one slot
// for the rows of no group. Located by warp scans of the device group sizes (clamped as
// ragged_layout.h says), so no schedule is written to HBM.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_PASSES_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_PASSES_CUH_

#include <cstdint>

#include "xla_plugin/common/mxfp8_gemm_problem.h"
#include "xla_plugin/common/ragged_layout.h"

namespace jgg::cuda::mxfp8_ragged_m {

using mxfp8::RaggedMProblem;

constexpr int kPassRows = 8;  // group rows per pass: the mma's 8-wide operand

// A block's work: up to kPassRows rows of one group, or (tail) the rows no group covers.
struct Pass {
  int64_t group;
  int64_t row_begin;  // first output (and lhs) row
  int64_t rows;
  bool tail;
  int64_t lhs_scale_rows[kPassRows];  // of each lhs row: its scale row, -1 in no lhs group
};

__device__ inline int64_t WarpInclusiveSum(int64_t v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int64_t up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// Rows [begin, begin + rows) of the clamped group sizes (ragged_layout.h) of the 32 groups
// starting at `base`, one per lane, after `before` rows of the earlier groups; `before`
// advances past them.
struct GroupRows {
  int64_t begin, rows;
};

__device__ inline GroupRows NextGroupRows(const int32_t* sizes, int64_t num_groups,
                                          int64_t extent, int64_t base, int64_t* before) {
  const int64_t g = base + threadIdx.x % 32;
  const int64_t size = g < num_groups ? ClampedSize(sizes[g]) : 0;
  const int64_t incl = WarpInclusiveSum(size);
  const int64_t begin = MinI64(extent, *before + incl - size);
  const GroupRows r{begin, MinI64(extent, *before + incl) - begin};
  *before += __shfl_sync(0xffffffffu, incl, 31);
  return r;
}

// Warp 0: the pass of `slot` (all but its lhs scale rows), written to *pass by one lane;
// false when the slot has no work.
__device__ inline bool LocatePass(const RaggedMProblem& p, const int32_t* sizes, int64_t slot,
                           Pass* pass) {
  const int lane = threadIdx.x % 32;
  int64_t rows_before = 0, passes_before = 0;
  for (int64_t base = 0; base < p.num_groups; base += 32) {
    const GroupRows group = NextGroupRows(sizes, p.num_groups, p.rows, base, &rows_before);
    const int64_t passes = CeilDiv(group.rows, kPassRows);
    const int64_t passes_incl = WarpInclusiveSum(passes);
    const int64_t first_pass = passes_before + passes_incl - passes;
    const unsigned hit = __ballot_sync(0xffffffffu, slot >= first_pass && slot < first_pass + passes);
    if (hit != 0) {
      if (lane == __ffs(hit) - 1) {
        const int64_t in_group = (slot - first_pass) * kPassRows;
        pass->group = base + lane;
        pass->row_begin = group.begin + in_group;
        pass->rows = MinI64(kPassRows, group.rows - in_group);
        pass->tail = false;
      }
      return true;
    }
    passes_before += __shfl_sync(0xffffffffu, passes_incl, 31);
  }
  if (slot != passes_before) return false;
  const int64_t covered = MinI64(p.rows, rows_before);
  if (lane == 0) {
    pass->group = p.num_groups;
    pass->row_begin = covered;
    pass->rows = p.rows - covered;
    pass->tail = true;
  }
  return covered < p.rows;
}

// Warp 0: pass->lhs_scale_rows. A grouped lhs's groups have scale matrices of
// 128 * ceil(rows / 128) rows, one after another (mxfp8_layout.h).
__device__ inline void LocateLhsScaleRows(const RaggedMProblem& p, const int32_t* lhs_sizes,
                                   Pass* pass) {
  const int lane = threadIdx.x % 32;
  if (!p.lhs_grouped) {
    if (lane < kPassRows) pass->lhs_scale_rows[lane] = pass->row_begin + lane;
    return;
  }
  if (lane < kPassRows) pass->lhs_scale_rows[lane] = -1;
  __syncwarp();
  int64_t rows_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base < p.lhs_num_groups; base += 32) {
    const GroupRows group = NextGroupRows(lhs_sizes, p.lhs_num_groups, p.rows, base, &rows_before);
    const int64_t scale_rows = CeilDiv(group.rows, mxfp8::kScaleTileRows) * mxfp8::kScaleTileRows;
    const int64_t scale_incl = WarpInclusiveSum(scale_rows);
    for (int r = 0; r < pass->rows && r < kPassRows; ++r) {
      const int64_t row = pass->row_begin + r;
      if (row >= group.begin && row < group.begin + group.rows)
        pass->lhs_scale_rows[r] = scale_rows_before + scale_incl - scale_rows + row - group.begin;
    }
    scale_rows_before += __shfl_sync(0xffffffffu, scale_incl, 31);
  }
}

}  // namespace jgg::cuda::mxfp8_ragged_m

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_MXFP8_RAGGED_M_PASSES_CUH_
