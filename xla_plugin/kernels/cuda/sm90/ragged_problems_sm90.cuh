// How the canonical ragged GEMMs become CUTLASS grouped problems: one problem
// per (local group, batch entry), computed on the device from the group sizes in
// the launch before the GEMM (which also writes the schedule and, for RaggedM,
// zeroes the rows of no group).
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_

#include <type_traits>

#include "xla_plugin/common/workspace.h"
#include "xla_plugin/kernels/cuda/ragged_schedule.cuh"
#include "xla_plugin/kernels/cuda/sm90/grouped_gemm_sm90.cuh"

namespace jgg::cuda::sm90 {

// The problems of the ragged GEMMs, in the protocol of PrepareProblemsKernel
// (grouped_gemm_sm90.cuh): problem g * batch + b is local group g of batch entry b.
template <class Problem>
struct RaggedProblems {
  static constexpr int kPrepareThreads = kScheduleThreads;
  Problem p;
  RaggedOperands o;

  __host__ __device__ int64_t batch() const { return p.batch; }
  __host__ __device__ int64_t groups() const { return p.num_local_groups; }

 protected:
  // Row boundaries only (RaggedSchedule::tile_begin counts 1-row tiles): CUTLASS tiles
  // each problem itself.
  __device__ void WriteSchedule(int64_t b) const {
    WriteBatchSchedule(o.group_sizes, o.group_offset, p.num_global_groups, p.num_local_groups,
                       p.rows, /*tile_rows=*/1, o.workspace, b);
  }
  __device__ RaggedSchedule Schedule(int64_t b) const {
    return ScheduleOfBatch(o.workspace, b, p.num_local_groups);
  }
};

// RaggedM: problem (g, b) is lhs[b, rows of g] [m_g, K] . rhs[g, b] -> out[b, rows of g].
// A row-major; B row-major [K, N] or, with rhs_transposed, column-major [N, K]. Rows of
// no group are zeroed here, by all kZeroParts blocks of the batch entry.
template <class T, class O>
struct RaggedMProblems : RaggedProblems<RaggedMProblem> {
  static constexpr int kZeroParts = 32;

  int prepare_parts() const { return kZeroParts; }

  __device__ void PrepareBatch(int64_t b, int64_t part, int64_t parts) const {
    if (part == 0) this->WriteSchedule(b);
    ZeroUncoveredRows(this->p, this->o, sizeof(O), b, part, parts);
  }

  __device__ ProblemDescription operator()(int64_t index) const {
    const RaggedMProblem& p = this->p;
    const int64_t g = index / p.batch, b = index % p.batch;
    const RaggedSchedule s = this->Schedule(b);
    const int64_t begin = s.row_begin[g], rows = s.row_begin[g + 1] - begin;
    return {static_cast<int>(rows), static_cast<int>(p.n), static_cast<int>(p.k),
            static_cast<const T*>(this->o.lhs) + (b * p.rows + begin) * p.k,
            static_cast<const T*>(this->o.rhs) + (g * p.batch + b) * p.k * p.n,
            static_cast<O*>(this->o.out) + (b * p.rows + begin) * p.n};
  }
};

// RaggedK: problem (g, b) is lhs[b, rows of g]^T [P, m_g] . rhs[b, rows of g] [m_g, N]
// -> out[g, b] [P, N]. A is lhs read column-major in place. A group of at most
// `left_rows` rows gets an empty problem (M = 0: no tiles) and is written by the
// caller: empty groups always are, since a GEMM with K = 0 has no defined
// epilogue in CUTLASS.
template <class T, class O>
struct RaggedKProblems : RaggedProblems<RaggedKProblem> {
  int left_rows;

  int prepare_parts() const { return 1; }

  __device__ void PrepareBatch(int64_t b, int64_t, int64_t) const { this->WriteSchedule(b); }

  __device__ ProblemDescription operator()(int64_t index) const {
    const RaggedKProblem& p = this->p;
    const int64_t g = index / p.batch, b = index % p.batch;
    const RaggedSchedule s = this->Schedule(b);
    const int64_t begin = s.row_begin[g], rows = s.row_begin[g + 1] - begin;
    const int m = rows <= left_rows ? 0 : static_cast<int>(p.p);
    return {m, static_cast<int>(p.n), static_cast<int>(rows),
            static_cast<const T*>(this->o.lhs) + (b * p.rows + begin) * p.p,
            static_cast<const T*>(this->o.rhs) + (b * p.rows + begin) * p.n,
            static_cast<O*>(this->o.out) + (g * p.batch + b) * p.p * p.n};
  }
};

template <Tile> struct TileConfigOf;
template <> struct TileConfigOf<Tile::kCoop128x256> { using type = Cooperative128x256; };
template <> struct TileConfigOf<Tile::kCoop128x256WideEpilogue> {
  using type = Cooperative128x256WideEpilogue;
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
  return RunGrouped<G>(RaggedMProblems<typename G::A, typename G::D>{{p, o}}, l);
}

template <ElementType kIn, ElementType kOut>
cudaError_t RaggedK(const RaggedKProblem& p, const RaggedOperands& o, const GroupedLaunch& l,
                    int left_rows) {
  using G = GroupedGemm<Cooperative128x256Cluster2x1, typename CutlassElement<kIn>::type,
                        typename CutlassElement<kOut>::type, cutlass::layout::ColumnMajor,
                        cutlass::layout::RowMajor>;
  return RunGrouped<G>(RaggedKProblems<typename G::A, typename G::D>{{p, o}, left_rows}, l);
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_RAGGED_PROBLEMS_SM90_CUH_
