// How the canonical ragged GEMMs become CUTLASS grouped problems: one problem
// per (local group, batch entry), computed on the device from the schedule.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_

#include <type_traits>

#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/sm90/grouped_gemm_sm90.cuh"

namespace jgg::cuda::sm90 {

// RaggedM: problem (g, b) is lhs[b, rows of g] [m_g, K] . rhs[g, b] -> out[b, rows of g].
// A row-major; B row-major [K, N] or, with rhs_transposed, column-major [N, K].
template <class T, class O>
struct RaggedMProblems {
  RaggedMProblem p;
  const T* lhs;
  const T* rhs;
  O* out;
  void* workspace;

  __device__ ProblemDescription operator()(int64_t index) const {
    const int64_t g = index / p.batch, b = index % p.batch;
    const RaggedSchedule s = ScheduleOfBatch(workspace, b, p.num_local_groups);
    const int64_t begin = s.row_begin[g], rows = s.row_begin[g + 1] - begin;
    return {static_cast<int>(rows), static_cast<int>(p.n), static_cast<int>(p.k),
            lhs + (b * p.rows + begin) * p.k, rhs + (g * p.batch + b) * p.k * p.n,
            out + (b * p.rows + begin) * p.n};
  }
};

// RaggedK: problem (g, b) is lhs[b, rows of g]^T [P, m_g] . rhs[b, rows of g] [m_g, N]
// -> out[g, b] [P, N]. A is lhs read column-major in place. A group of at most
// `left_rows` rows gets an empty problem (M = 0: no tiles) and is written by the
// caller: empty groups always are, since a GEMM with K = 0 has no defined
// epilogue in CUTLASS.
template <class T, class O>
struct RaggedKProblems {
  RaggedKProblem p;
  const T* lhs;
  const T* rhs;
  O* out;
  void* workspace;
  int left_rows;

  __device__ ProblemDescription operator()(int64_t index) const {
    const int64_t g = index / p.batch, b = index % p.batch;
    const RaggedSchedule s = ScheduleOfBatch(workspace, b, p.num_local_groups);
    const int64_t begin = s.row_begin[g], rows = s.row_begin[g + 1] - begin;
    const int m = rows <= left_rows ? 0 : static_cast<int>(p.p);
    return {m, static_cast<int>(p.n), static_cast<int>(rows), lhs + (b * p.rows + begin) * p.p,
            rhs + (b * p.rows + begin) * p.n, out + (g * p.batch + b) * p.p * p.n};
  }
};

template <class G, class Problem, class P, class... Extra>
cudaError_t RunRagged(const P& p, const RaggedOperands& o, const GroupedLaunch& launch,
                      Extra... extra) {
  using T = typename G::A;
  using O = typename G::D;
  const Problem problems{p, static_cast<const T*>(o.lhs), static_cast<const T*>(o.rhs),
                         static_cast<O*>(o.out), o.workspace, extra...};
  return RunGrouped<G>(p.num_local_groups * p.batch, problems, launch);
}

template <ElementType> struct CutlassElement;
template <> struct CutlassElement<ElementType::kBF16> { using type = cutlass::bfloat16_t; };
template <> struct CutlassElement<ElementType::kF16> { using type = cutlass::half_t; };
template <> struct CutlassElement<ElementType::kF32> { using type = float; };

template <Tile> struct TileConfigOf;
template <> struct TileConfigOf<Tile::kCoop128x256> { using type = Cooperative128x256; };
template <> struct TileConfigOf<Tile::kCoop128x256Cluster2x1> {
  using type = Cooperative128x256Cluster2x1;
};
template <> struct TileConfigOf<Tile::kPingpong64x128> { using type = Pingpong64x128; };

// B is the weight: row-major [K, N] for the forward, column-major (the forward's weight read
// transposed in place) for dgrad.
template <ElementType kIn, ElementType kOut, Tile kTile, bool kRhsTransposed>
cudaError_t RaggedM(const RaggedMProblem& p, const RaggedOperands& o, const GroupedLaunch& l) {
  using LayoutB = std::conditional_t<kRhsTransposed, cutlass::layout::ColumnMajor,
                                     cutlass::layout::RowMajor>;
  using G = GroupedGemm<typename TileConfigOf<kTile>::type, typename CutlassElement<kIn>::type,
                        typename CutlassElement<kOut>::type, cutlass::layout::RowMajor, LayoutB>;
  return RunRagged<G, RaggedMProblems<typename G::A, typename G::D>>(p, o, l);
}

template <ElementType kIn, ElementType kOut, Tile kTile>
cudaError_t RaggedK(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l,
                    int left_rows) {
  using G = GroupedGemm<typename TileConfigOf<kTile>::type, typename CutlassElement<kIn>::type,
                        typename CutlassElement<kOut>::type, cutlass::layout::ColumnMajor,
                        cutlass::layout::RowMajor>;
  return RunRagged<G, RaggedKProblems<typename G::A, typename G::D>>(p, o, l, left_rows);
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_
