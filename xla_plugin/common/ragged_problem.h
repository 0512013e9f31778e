// The two canonical ragged GEMMs every backend implements. The Python layer
// maps any jax.lax.ragged_dot_general call onto one of them (permuting only
// what a kernel cannot read in place).
//
//   RaggedM (ragged non-contracting; forward and dgrad):
//     lhs [B, M, K] . rhs[g] -> out [B, M, N], rows of group g use rhs[g, b],
//     rhs [G, B, K, N] or, with rhs_transposed, [G, B, N, K] (dgrad reads the
//     forward's weights in place). Rows of no local group are written as 0.
//   RaggedK (ragged contracting; wgrad):
//     lhs [B, R, P], rhs [B, R, N] -> out [G, B, P, N],
//     out[g, b] = lhs[b, rows of g]^T . rhs[b, rows of g]; empty groups give 0.
//
// group_sizes is [B, num_global_groups] int32 on the device; group_offset
// (one int32 on the device) names the global group of local group 0.
#ifndef JGG_XLA_PLUGIN_COMMON_RAGGED_PROBLEM_H_
#define JGG_XLA_PLUGIN_COMMON_RAGGED_PROBLEM_H_

#include <cstdint>

#include "xla_plugin/common/element_types.h"

namespace jgg {

struct RaggedMProblem {
  int64_t batch, rows, k, n;
  int64_t num_local_groups, num_global_groups;
  bool rhs_transposed;
  ElementType in_type, out_type;
};

struct RaggedKProblem {
  int64_t batch, rows, p, n;
  int64_t num_local_groups, num_global_groups;
  ElementType in_type, out_type;
};

// Device (or host) pointers of one call.
struct RaggedOperands {
  const void* lhs;
  const void* rhs;
  const int32_t* group_sizes;
  const int32_t* group_offset;
  void* out;
  void* workspace;
  int64_t workspace_bytes = 0;  // its size (workspace.h: the optional tail split region)
};

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_COMMON_RAGGED_PROBLEM_H_
