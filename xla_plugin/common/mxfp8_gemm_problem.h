// The fused MXFP8 grouped GEMMs, ragged M (the forward and dgrad orientations) and ragged K
// (wgrad, below): what they compute and where their operands' scales live. Shared by the CPU
// and CUDA kernels.
//
//   out[m, :] = deq(lhs)[m, :] . deq(rhs)[g]      for the rows m of group g,
//   out[m, :] = deq(lhs)[m, :] . deq(rhs)[g]^T    with rhs_transposed,
//
// lhs [M, K] rowwise (1x32 blocks along K); rhs [G, K, N] colwise (32x1 blocks along K: the
// forward's weight stack), or with rhs_transposed [G, N, K] rowwise (1x32 blocks along K:
// dgrad's dy . W^T, W [G, K_model, N_model] read in place); compact scales (mxfp8_layout.h).
// deq(q) = q * 2^(e - 127), exact in f32 (every finite MXFP8 value is an f32); products are
// accumulated in f32 and the sum rounded once to the result type. Group sizes clamp as for every ragged GEMM (negative
// counts as 0, running sums stop at M); rows of no group are 0.
//
// The lhs is either one [M, K] matrix ("dense") or row groups of its own ("varying_first",
// lhs_group_sizes [lhs_num_groups], which need not be the GEMM's: its groups' scale
// matrices lie one after another, and lhs rows of no lhs group are 0).
#ifndef JGG_XLA_PLUGIN_COMMON_MXFP8_GEMM_PROBLEM_H_
#define JGG_XLA_PLUGIN_COMMON_MXFP8_GEMM_PROBLEM_H_

#include <cstdint>

#include "xla_plugin/common/element_types.h"
#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/mxfp8_math.h"

namespace jgg::mxfp8 {

struct RaggedMProblem {
  int64_t rows, k, n, num_groups;  // lhs [rows, k], rhs [num_groups, k, n] (or [.., n, k])
  Fp8Format lhs_format, rhs_format;
  bool lhs_grouped;
  int64_t lhs_num_groups;  // when lhs_grouped
  ElementType out_type;
  bool rhs_transposed;
};

struct RaggedMOperands {
  const uint8_t* lhs;
  const uint8_t* lhs_scales;
  const uint8_t* rhs;
  const uint8_t* rhs_scales;
  const int32_t* group_sizes;      // [num_groups]
  const int32_t* lhs_group_sizes;  // [lhs_num_groups] when lhs_grouped
  void* out;                       // [rows, n]
};

// Bytes of each operand's scale buffer, as the quantize op lays them out.
JGG_HOST_DEVICE inline int64_t LhsScaleBytes(const RaggedMProblem& p) {
  const GroupedLayout layout = p.lhs_grouped ? GroupedLayout::kVaryingFirst : GroupedLayout::kSameDims;
  return ScaleBufferBytes({layout, p.lhs_grouped ? p.lhs_num_groups : 1, p.rows, p.k});
}

JGG_HOST_DEVICE inline int64_t RhsScaleBytes(const RaggedMProblem& p) {
  return p.rhs_transposed ? ScaleBufferBytes({GroupedLayout::kSameDims, p.num_groups, p.n, p.k})
                          : ScaleBufferBytes({GroupedLayout::kSameDims, p.num_groups, p.k, p.n});
}

// Row stride of the lhs scale matrices (one byte per 32 elements of a row, padded).
JGG_HOST_DEVICE inline int64_t LhsScaleRowBytes(const RaggedMProblem& p) {
  return GroupScaleMatrix(1, p.k, /*colwise=*/false).padded_cols;
}

// Row stride of a group's rhs scale matrix: one row per 32 rows of K and one byte per
// column, or (rhs_transposed) one row per row and one byte per 32 columns.
JGG_HOST_DEVICE inline int64_t RhsScaleRowBytes(const RaggedMProblem& p) {
  return p.rhs_transposed ? GroupScaleMatrix(p.n, p.k, /*colwise=*/false).padded_cols
                          : GroupScaleMatrix(p.k, p.n, /*colwise=*/true).padded_cols;
}

JGG_HOST_DEVICE inline int64_t RhsGroupScaleBytes(const RaggedMProblem& p) {
  return p.rhs_transposed ? GroupScaleBytes(p.n, p.k) : GroupScaleBytes(p.k, p.n);
}

// The fused MXFP8 wgrad (ragged K: the contraction runs over the ragged token dimension):
//
//   out[g] = deq(lhs)[rows of g, :]^T . deq(rhs)[rows of g, :]      [K, N] for each group g,
//
// lhs [M, K] and rhs [M, N] colwise (32x1 blocks along M), each grouped along M by its own
// sizes (layout "varying_first", so blocks restart at its group boundaries; in every real use
// they are the GEMM's, but nothing depends on it): group h's colwise scale matrix,
// [4 * ceil(rows_h / 128), 128 * ceil(cols / 128)] bytes, follows the earlier groups', and
// operand rows of no operand group are 0. deq and the accumulation as above; GEMM group sizes
// clamp the same way, an empty group's result is 0 and rows of no GEMM group are not read.
struct RaggedKProblem {
  int64_t rows, k, n, num_groups;  // lhs [rows, k], rhs [rows, n], out [num_groups, k, n]
  Fp8Format lhs_format, rhs_format;
  ElementType out_type;
};

struct RaggedKOperands {
  const uint8_t* lhs;
  const uint8_t* lhs_scales;
  const uint8_t* rhs;
  const uint8_t* rhs_scales;
  const int32_t* group_sizes;      // [num_groups], the GEMM's
  const int32_t* lhs_group_sizes;  // [num_groups], lhs's own
  const int32_t* rhs_group_sizes;  // [num_groups], rhs's own
  void* out;                       // [num_groups, k, n]
};

// Bytes of a colwise operand's scale buffer ([rows, cols] grouped along rows), as the
// quantize op lays them out, and of one row of its scale matrices (one byte per column).
JGG_HOST_DEVICE inline int64_t ColwiseScaleBytes(const RaggedKProblem& p, int64_t cols) {
  return ScaleBufferBytes({GroupedLayout::kVaryingFirst, p.num_groups, p.rows, cols});
}

JGG_HOST_DEVICE inline int64_t ColwiseScaleRowBytes(int64_t cols) {
  return GroupScaleMatrix(1, cols, /*colwise=*/true).padded_cols;
}

}  // namespace jgg::mxfp8

#endif  // JGG_XLA_PLUGIN_COMMON_MXFP8_GEMM_PROBLEM_H_
