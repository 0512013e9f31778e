// The Hopper tensor-core path of the ragged GEMMs (CUTLASS SM90 grouped GEMM).
// Each entry point is one kernel instantiation in its own .cu file.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_H_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "xla_plugin/common/element_types.h"
#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/common/ragged_problem.h"

namespace jgg::cuda::sm90 {

// One GEMM of a grouped launch, as the setup kernel computes it on the device.
struct ProblemDescription {
  int m, n, k;
  const void* a;
  const void* b;
  void* d;
};

// Where a grouped launch runs and the scratch it may use.
struct GroupedLaunch {
  int device;
  int sm_count;
  char* problem_arguments;  // workspace region for per-problem arguments
  void* cutlass_workspace;  // workspace region for CUTLASS (kCutlassWorkspaceBytes)
  char* tail_split;         // workspace region of the split last round (null: no split)
  cudaStream_t stream;
  int row_tiles_per_band;   // of the 128x256 tiles' order (group_scheduler_sm90.cuh); 0: CUTLASS's
};

// Tile configurations (grouped_gemm_sm90.cuh):
//   kCoop128x256            128x256x64 cooperative, no cluster (forward and dgrad, large groups)
//   kPingpong64x128         64x128x128 ping-pong (groups of few rows: decode, many small experts)
// Wgrad always runs 128x256x64 cooperative with a 2x1 cluster.
enum class Tile { kCoop128x256, kPingpong64x128 };

// Entry points. Each combination the dispatcher uses is one kernel instantiation, compiled
// from instantiate_sm90.cu once per variant listed in xla_plugin/BUILD (inputs bf16 or f16;
// results the input type or f32). The schedule must already be in operands.workspace. They
// return cudaErrorNotSupported when CUTLASS rejects the problem.
// Forward (B = rhs row-major [K, N]) or, with kRhsTransposed, dgrad (B read column-major).
template <ElementType kIn, ElementType kOut, Tile kTile, bool kRhsTransposed>
cudaError_t RaggedM(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l);
// Wgrad (ragged contracting dimension). Groups of at most left_rows (>= 0) rows, empty
// ones included, are left untouched for the caller to write.
template <ElementType kIn, ElementType kOut>
cudaError_t RaggedK(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l,
                    int left_rows);

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUPED_GEMM_SM90_H_
