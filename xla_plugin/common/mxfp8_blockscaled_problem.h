// The MXFP8 grouped GEMMs of an MoE layer as block-scaled GEMMs: the form a tensor core with
// E8M0 block scales (sm_100's tcgen05 MMA) computes, reading the "swizzled" scales in place.
// One GEMM per group g, whose rows are [row_begin_g, row_begin_g+1) of the token dimension M
// (clamped prefix sums of group_sizes, as for every ragged GEMM):
//
//   kForward  out[rows g] = x[rows g] . W[g]          x [M, K] rowwise, W [G, K, N] colwise
//   kDgrad    out[rows g] = x[rows g] . W[g]^T        x [M, K] rowwise, W [G, N, K] rowwise
//   kWgrad    out[g]      = x[rows g]^T . y[rows g]   x [M, K] colwise, y [M, N] colwise
//
// (dgrad's x is dy and its K the layer's N; wgrad's x and y are x and dy, out [G, K, N]).
// Rows of out of no group (forward, dgrad) and the out[g] of empty groups (wgrad) are 0.
//
// Every token-grouped operand is quantized with the GEMM's group sizes (layout varying_first):
// group g's scales are then a padded matrix of their own (mxfp8_layout.h), which a block-scaled
// GEMM reads as one operand's scales. They start at byte 512 * ceil(cols / 128) * T_g, where T_g
// counts the 128-row scale tiles of the groups before g: the schedule's tile_begin at 128-row
// tiles. W's group g starts at g * GroupScaleBytes(its two dims).
#ifndef JGG_XLA_PLUGIN_COMMON_MXFP8_BLOCKSCALED_PROBLEM_H_
#define JGG_XLA_PLUGIN_COMMON_MXFP8_BLOCKSCALED_PROBLEM_H_

#include <cstdint>

#include "xla_plugin/common/element_types.h"
#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_math.h"
#include "xla_plugin/common/workspace.h"

namespace jgg::mxfp8 {

enum class BlockScaledGemm : int32_t { kForward = 0, kDgrad = 1, kWgrad = 2 };

struct BlockScaledProblem {
  BlockScaledGemm gemm;
  int64_t rows, k, n, num_groups;  // see above: x [rows, k]; W [G, k, n] / [G, n, k]; y [rows, n]
  Fp8Format lhs_format, rhs_format;
  ElementType out_type;
};

struct BlockScaledOperands {
  const uint8_t* lhs;         // x
  const uint8_t* lhs_scales;  // swizzled, in the orientation the GEMM contracts
  const uint8_t* rhs;         // W or y
  const uint8_t* rhs_scales;
  const int32_t* group_sizes;  // [num_groups]
  void* out;
  void* workspace;  // BlockScaledWorkspaceBytes(num_groups)
};

// One group's GEMM in the (M, N, K) of a GEMM library, with its operands' offsets: element
// offsets of A, B and D, byte offsets of A's and B's scales.
struct BlockScaledGroup {
  int64_t m, n, k;
  int64_t a, b, d;
  int64_t a_scales, b_scales;
};

// Group g spanning rows [row_begin, row_begin + rows) after `tiles_before` 128-row scale tiles.
JGG_HOST_DEVICE inline BlockScaledGroup DescribeGroup(const BlockScaledProblem& p, int64_t g,
                                                      int64_t row_begin, int64_t rows,
                                                      int64_t tiles_before) {
  const int64_t tile_bytes = kScaleTileBytes * tiles_before;
  switch (p.gemm) {
    case BlockScaledGemm::kForward:
    case BlockScaledGemm::kDgrad:
      return {rows, p.n, p.k,
              row_begin * p.k, g * p.k * p.n, row_begin * p.n,
              tile_bytes * CeilDiv(p.k, kScaleTileRows), g * GroupScaleBytes(p.k, p.n)};
    case BlockScaledGemm::kWgrad:
      // An empty group has no tiles (M = 0): a GEMM over K = 0 is the caller's zero fill.
      return {rows == 0 ? 0 : p.k, p.n, rows,
              row_begin * p.k, row_begin * p.n, g * p.k * p.n,
              tile_bytes * CeilDiv(p.k, kScaleTileRows), tile_bytes * CeilDiv(p.n, kScaleTileRows)};
  }
  return {};
}

// Bytes of each operand's scale buffer, as the quantize op lays them out.
JGG_HOST_DEVICE inline int64_t BlockScaledLhsScaleBytes(const BlockScaledProblem& p) {
  return ScaleBufferBytes({GroupedLayout::kVaryingFirst, p.num_groups, p.rows, p.k});
}

JGG_HOST_DEVICE inline int64_t BlockScaledRhsScaleBytes(const BlockScaledProblem& p) {
  if (p.gemm == BlockScaledGemm::kWgrad)
    return ScaleBufferBytes({GroupedLayout::kVaryingFirst, p.num_groups, p.rows, p.n});
  return p.num_groups * GroupScaleBytes(p.k, p.n);
}

// Workspace: the schedule (row_begin, tile_begin at 128-row tiles), the per-group argument
// arrays of the GEMM library (at most kBlockScaledArgumentBytes per group), its own workspace.
inline constexpr int64_t kBlockScaledArgumentBytes = 384;

JGG_HOST_DEVICE inline int64_t BlockScaledArgumentsBytes(int64_t num_groups) {
  return AlignUp(num_groups * kBlockScaledArgumentBytes);
}

JGG_HOST_DEVICE inline int64_t BlockScaledWorkspaceBytes(int64_t num_groups) {
  return ScheduleBytes(1, num_groups) + BlockScaledArgumentsBytes(num_groups) +
         kCutlassWorkspaceBytes;
}

}  // namespace jgg::mxfp8

#endif  // JGG_XLA_PLUGIN_COMMON_MXFP8_BLOCKSCALED_PROBLEM_H_
