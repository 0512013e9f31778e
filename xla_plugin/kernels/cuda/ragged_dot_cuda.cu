// Chooses the kernel for each ragged GEMM call: the Hopper tensor-core path
// (CUTLASS SM90 grouped GEMM) where it applies, the SIMT kernels elsewhere.
// The choice depends only on static shapes, dtypes, pointer alignment and the
// device, never on device data, so it is the same for every replay of a
// captured command buffer.
#include "xla_plugin/kernels/cuda/ragged_dot_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "xla_plugin/common/environment.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/device_info.h"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/ragged_dot_simt.h"
#include "xla_plugin/kernels/cuda/ragged_k_streamed.h"
#include "xla_plugin/kernels/cuda/sm90/grouped_gemm_sm90.h"

namespace jgg::cuda {
namespace {


// JGG_CUDA_KERNELS=simt forces the SIMT kernels (to test one path against the other).
bool TensorCorePathEnabled() {
  static const bool enabled = !EnvironmentSays("JGG_CUDA_KERNELS", "simt");
  return enabled;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The instantiated element types (xla_plugin/BUILD): bf16 or f16 inputs, results in the
// input type or f32 (f32 accumulation either way).
bool TensorCoreTypes(ElementType in, ElementType out) {
  return (in == ElementType::kBF16 || in == ElementType::kF16) &&
         (out == in || out == ElementType::kF32);
}

// TMA needs 16-byte aligned base pointers and leading dimensions; each group's
// first row is then aligned too when the row length is a multiple of 8 elements
// (16 bytes of 16-bit inputs, 32 of f32 results).
bool TensorCoreFriendly(const DeviceInfo& info, ElementType in, ElementType out,
                        const RaggedOperands& o, int64_t row_length_a, int64_t row_length_b,
                        int64_t num_problems) {
  return TensorCorePathEnabled() && info.major == 9 && TensorCoreTypes(in, out) &&
         row_length_a % 8 == 0 && row_length_b % 8 == 0 && Aligned16(o.lhs) &&
         Aligned16(o.rhs) && Aligned16(o.out) && num_problems <= kMaxGridYZ;
}

template <ElementType kType>
using TypeTag = std::integral_constant<ElementType, kType>;

// Calls run(TypeTag<in>{}, TypeTag<out>{}) for a pair TensorCoreTypes accepts.
template <class Run>
cudaError_t DispatchTensorCoreTypes(ElementType in, ElementType out, Run&& run) {
  const bool wide = out == ElementType::kF32;
  if (in == ElementType::kBF16) {
    return wide ? run(TypeTag<ElementType::kBF16>{}, TypeTag<ElementType::kF32>{})
                : run(TypeTag<ElementType::kBF16>{}, TypeTag<ElementType::kBF16>{});
  }
  return wide ? run(TypeTag<ElementType::kF16>{}, TypeTag<ElementType::kF32>{})
              : run(TypeTag<ElementType::kF16>{}, TypeTag<ElementType::kF16>{});
}

// Wgrad groups of at most this many rows are streamed (ragged_k_streamed.h), the
// others go to the tensor cores. JGG_WGRAD_STREAMED_ROWS=0..8 overrides it for tuning
// (0: only empty groups are streamed).
int WgradStreamedRows() {
  static const int rows = static_cast<int>(std::min<int64_t>(
      EnvironmentCount("JGG_WGRAD_STREAMED_ROWS", kStreamedMaxRows), kStreamedMaxRows));
  return rows;
}

// Whether wgrad's streamed kernel may start on the SMs the GEMM's last CTAs leave idle
// (launched as a programmatic dependent of the GEMM; the default) or only after the whole
// GEMM (JGG_WGRAD_STREAMED_BESIDE=0): for A/B runs.
bool WgradStreamedBesideGemm() {
  static const bool beside = !EnvironmentSays("JGG_WGRAD_STREAMED_BESIDE", "0");
  return beside;
}

// Tile choice by static shape: groups averaging at most 64 rows leave most of a
// 128-row tile empty and are bound by streaming weights, so they take the 64-row
// ping-pong tile; larger groups the 128x256 cooperative one. On an H200 the two tie
// at 64 rows per group and the cooperative tile is 4-14% faster from 96
// (docs/PERFORMANCE.md). JGG_SM90_SMALL_M_ROWS overrides the 64 for tuning runs (0:
// never the ping-pong tile).
bool FewRowsPerGroup(int64_t rows, int64_t num_local_groups) {
  static const int64_t threshold = EnvironmentCount("JGG_SM90_SMALL_M_ROWS", 64);
  return rows <= threshold * num_local_groups;
}

// Row tiles per band of the forward's and dgrad's 128x256 tiles (sm90/group_scheduler_sm90.cuh,
// InRowBands): sqrt(2 x SMs), where a wave of tiles reads as many bytes of A as of B (16 on
// 132 SMs). On an H200 bands of 8, 16 or 24 row tiles gained 0.4-2.0% on the Zipf anchors'
// forward and dgrad, whose hot experts span 24-140 row tiles; on wgrad (bands of its [K, N]
// output's row tiles) 16 was even or up to 0.8% slower, so wgrad keeps CUTLASS's order
// (docs/PERFORMANCE.md, 2026-12-01 fifty-third session). JGG_SM90_ROW_BAND and
// JGG_SM90_WGRAD_ROW_BAND set them for tuning runs (0: CUTLASS's order, one column of row
// tiles after another).
int RaggedMRowTilesPerBand(const DeviceInfo& info) {
  static const int64_t set = EnvironmentCount("JGG_SM90_ROW_BAND", -1);
  if (set >= 0) return static_cast<int>(std::min<int64_t>(set, kMaxInt32));
  return static_cast<int>(std::lround(std::sqrt(2.0 * info.sm_count)));
}

int RaggedKRowTilesPerBand() {
  static const int64_t set = EnvironmentCount("JGG_SM90_WGRAD_ROW_BAND", 0);
  return static_cast<int>(std::min<int64_t>(set, kMaxInt32));
}

sm90::GroupedLaunch MakeLaunch(const DeviceInfo& info, const RaggedOperands& o, int64_t batch,
                               int64_t groups, int row_tiles_per_band, cudaStream_t stream) {
  return {info.device,
          info.sm_count,
          ProblemArgumentsRegion(o.workspace, batch, groups),
          CutlassWorkspaceRegion(o.workspace, batch, groups),
          TailSplitRegion(o.workspace, o.workspace_bytes, batch, groups),
          stream,
          row_tiles_per_band};
}

}  // namespace

cudaError_t LaunchRaggedM(const RaggedMProblem& p, const RaggedOperands& o, cudaStream_t stream) {
  if (p.batch == 0 || p.rows == 0 || p.n == 0) return cudaSuccess;
  if (p.batch > kMaxGridYZ || p.rows > kMaxInt32 || p.k > kMaxInt32 || p.n > kMaxInt32)
    return cudaErrorInvalidConfiguration;
  DeviceInfo info;
  if (cudaError_t e = QueryDevice(&info); e != cudaSuccess) return e;
  if (p.k == 0 || !TensorCoreFriendly(info, p.in_type, p.out_type, o, p.k, p.n,
                                      p.batch * p.num_local_groups))
    return LaunchRaggedMSimt(p, o, stream);
  // One launch before the GEMM zeroes the rows of no group and describes the problems
  // (sm90/ragged_problems_sm90.cuh).
  const sm90::GroupedLaunch launch = MakeLaunch(info, o, p.batch, p.num_local_groups,
                                                RaggedMRowTilesPerBand(info), stream);
  const bool small = FewRowsPerGroup(p.rows, p.num_local_groups);
  return DispatchTensorCoreTypes(p.in_type, p.out_type, [&](auto in, auto out) {
    constexpr ElementType kIn = decltype(in)::value, kOut = decltype(out)::value;
    using sm90::Tile;
    auto run = [&](auto tile) {
      constexpr Tile kTile = decltype(tile)::value;
      return p.rhs_transposed ? sm90::RaggedM<kIn, kOut, kTile, true>(p, o, launch)
                              : sm90::RaggedM<kIn, kOut, kTile, false>(p, o, launch);
    };
    if (small) return run(std::integral_constant<Tile, Tile::kPingpong64x128>{});
    return run(std::integral_constant<Tile, Tile::kCoop128x256>{});
  });
}

cudaError_t LaunchRaggedK(const RaggedKProblem& p, const RaggedOperands& o, cudaStream_t stream) {
  if (p.batch == 0 || p.num_local_groups == 0 || p.p == 0 || p.n == 0) return cudaSuccess;
  if (p.batch > kMaxGridYZ || p.num_local_groups > kMaxGridYZ || p.rows > kMaxInt32 ||
      p.p > kMaxInt32 || p.n > kMaxInt32)
    return cudaErrorInvalidConfiguration;
  DeviceInfo info;
  if (cudaError_t e = QueryDevice(&info); e != cudaSuccess) return e;
  if (p.rows == 0 || !TensorCoreFriendly(info, p.in_type, p.out_type, o, p.p, p.n,
                                         p.batch * p.num_local_groups))
    return LaunchRaggedKSimt(p, o, stream);
  // The GEMM's preparation launch writes the row boundaries the streamed kernel reads; the
  // GEMM lets the streamed kernel launch once that preparation is complete.
  const int streamed_rows = WgradStreamedRows();
  const sm90::GroupedLaunch launch = MakeLaunch(info, o, p.batch, p.num_local_groups,
                                                RaggedKRowTilesPerBand(), stream);
  if (cudaError_t e = DispatchTensorCoreTypes(p.in_type, p.out_type, [&](auto in, auto out) {
        return sm90::RaggedK<decltype(in)::value, decltype(out)::value>(p, o, launch,
                                                                        streamed_rows);
      });
      e != cudaSuccess)
    return e;
  return LaunchRaggedKStreamed(p, o, streamed_rows, WgradStreamedBesideGemm(), stream);
}

}  // namespace jgg::cuda
