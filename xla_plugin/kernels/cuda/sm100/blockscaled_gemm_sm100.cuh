// CUTLASS sm_100 block-scaled ptr-array grouped GEMM on MXFP8 operands, with device-side
// problem shapes: the Blackwell counterpart of sm90/grouped_gemm_sm90.cuh. Included only by
// instantiate_sm100.cu.
//
// The operand layouts map one to one onto CUTLASS's (GEMM (M, N, K) per group, "major" = the
// contiguous axis):
//   forward  A = x[rows g] [m_g, K] K-major     B = W[g] [K, N] N-major      D [m_g, N]
//   dgrad    A = x[rows g] [m_g, K] K-major     B = W[g] [N, K] K-major      D [m_g, N]
//   wgrad    A = x[rows g]^T  M-major           B = y[rows g]   N-major      D [K, N]
// (MMA.MXF8F6F4 takes 8-bit operands in either major). Each operand's scales are its group's
// own padded scale matrix, swizzled: the 128x4 interleave is CUTLASS's Sm1xxBlkScaledConfig
// scale layout, 128-row tiles in order with the contracted dimension's tiles fastest (checked
// on the host by BlockScaledScaleLayoutMismatches, tests/test_mxfp8_blockscaled.py). Operand
// element types (e4m3, e5m2) are runtime arguments of one instantiation.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM100_BLOCKSCALED_GEMM_SM100_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM100_BLOCKSCALED_GEMM_SM100_CUH_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "xla_plugin/common/mxfp8_blockscaled_problem.h"
#include "xla_plugin/kernels/cuda/cutlass_grouped.cuh"
#include "xla_plugin/kernels/cuda/ragged_schedule.cuh"
#include "xla_plugin/kernels/cuda/sm100/blockscaled_gemm_sm100.h"

namespace jgg::cuda::sm100 {

using namespace cute;  // NOLINT: CUTLASS's shape vocabulary (Shape, _128, ...)
using mxfp8::BlockScaledGemm;

// CUTLASS layout tags of A and B per GEMM (B is K x N: RowMajor is N-major).
template <BlockScaledGemm kGemm> struct OperandLayouts;
template <> struct OperandLayouts<BlockScaledGemm::kForward> {
  using A = cutlass::layout::RowMajor;
  using B = cutlass::layout::RowMajor;
};
template <> struct OperandLayouts<BlockScaledGemm::kDgrad> {
  using A = cutlass::layout::RowMajor;
  using B = cutlass::layout::ColumnMajor;
};
template <> struct OperandLayouts<BlockScaledGemm::kWgrad> {
  using A = cutlass::layout::ColumnMajor;
  using B = cutlass::layout::RowMajor;
};

// 128x256x128 on one SM (four 32-blocks of K per stage), no cluster: as on Hopper, CUTLASS's
// group scheduler would round every group's tile counts up to a cluster's shape.
template <BlockScaledGemm kGemm, ElementType kOut>
struct GroupedGemm {
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K)
  using Element = cutlass::mx_float8_t<cutlass::type_erased_dynamic_float8_t>;
  using D = typename CutlassElement<kOut>::type;
  using LayoutA = typename OperandLayouts<kGemm>::A;
  using LayoutB = typename OperandLayouts<kGemm>::B;
  using TileShape = Shape<_128, _256, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  static constexpr int kAlignIn = 16;  // elements: TMA's 16 bytes
  static constexpr int kAlignOut = 16 / sizeof(D);

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, cutlass::layout::RowMajor*, kAlignOut,  // no source operand C
      D, cutlass::layout::RowMajor*, kAlignOut, cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm,
      cutlass::epilogue::fusion::LinearCombination<D, float, void, float>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, Element, LayoutA*,
      kAlignIn, Element, LayoutB*, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmMxf8f6f4Sm100>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop,
                                                      CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using Mainloop = typename Kernel::CollectiveMainloop;
  using ScaleConfig = typename Mainloop::Sm1xxBlkScaledConfig;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using LayoutSFA = typename Mainloop::InternalLayoutSFA;
  using LayoutSFB = typename Mainloop::InternalLayoutSFB;
  using ArrayA = typename Mainloop::ArrayElementA;
  using ArrayB = typename Mainloop::ArrayElementB;
  using ScaleElement = typename Mainloop::ElementSF;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  // The layout BlockScaledScaleLayoutMismatches checks against ours (mxfp8_blockscaled_layout.cu).
  static_assert(std::is_same_v<ScaleConfig, cutlass::detail::Sm1xxBlockScaledConfig<
                                                static_cast<int>(mxfp8::kBlockSize)>>);
};

// CUTLASS's per-group argument arrays, carved out of our workspace.
template <class G>
struct ProblemArrays {
  typename G::Shape3* shapes;
  const typename G::ArrayA** a;
  const typename G::ArrayB** b;
  const typename G::ScaleElement** a_scales;
  const typename G::ScaleElement** b_scales;
  typename G::D** d;
  typename G::StrideA* stride_a;
  typename G::StrideB* stride_b;
  typename G::StrideD* stride_d;
  typename G::LayoutSFA* layout_a_scales;
  typename G::LayoutSFB* layout_b_scales;

  static ProblemArrays Carve(char* region, int64_t count) {
    static_assert(CarvedBytesPerProblem<typename G::Shape3, void*, void*, void*, void*, void*,
                                        typename G::StrideA, typename G::StrideB,
                                        typename G::StrideD, typename G::LayoutSFA,
                                        typename G::LayoutSFB>() <=
                      mxfp8::kBlockScaledArgumentBytes,
                  "kBlockScaledArgumentBytes is too small");
    ProblemArrays arrays;
    CarveArrays(region, count, arrays.shapes, arrays.a, arrays.b, arrays.a_scales,
                arrays.b_scales, arrays.d, arrays.stride_a, arrays.stride_b, arrays.stride_d,
                arrays.layout_a_scales, arrays.layout_b_scales);
    return arrays;
  }
};

// The ragged-GEMM view of p, for the shared schedule and zero-fill code.
__device__ inline RaggedMProblem AsRaggedM(const mxfp8::BlockScaledProblem& p) {
  return {1, p.rows, p.k, p.n, p.num_groups, p.num_groups, false, p.out_type, p.out_type};
}

__device__ inline RaggedOperands AsRaggedOperands(const mxfp8::BlockScaledOperands& o) {
  return {o.lhs, o.rhs, o.group_sizes, nullptr, o.out, o.workspace};
}

constexpr int kZeroParts = 32;

// Block 0 writes the schedule (row boundaries, 128-row scale tiles), then every group's
// arguments; the forward and dgrad zero the rows of no group in all blocks.
template <class G, BlockScaledGemm kGemm>
__global__ void __launch_bounds__(kScheduleThreads)
    PrepareBlockScaledKernel(mxfp8::BlockScaledProblem p, mxfp8::BlockScaledOperands o,
                             ProblemArrays<G> out) {
  if constexpr (kGemm != BlockScaledGemm::kWgrad) {
    ZeroUncoveredRows(AsRaggedM(p), AsRaggedOperands(o), sizeof(typename G::D), 0,
                      blockIdx.x, gridDim.x);
  }
  if (blockIdx.x != 0) return;
  WriteBatchSchedule(o.group_sizes, nullptr, p.num_groups, p.num_groups, p.rows,
                     mxfp8::kScaleTileRows, o.workspace, 0);
  __syncthreads();  // the schedule is read back below
  const RaggedSchedule s = ScheduleOfBatch(o.workspace, 0, p.num_groups);
  for (int64_t g = threadIdx.x; g < p.num_groups; g += blockDim.x) {
    const int64_t begin = s.row_begin[g];
    const mxfp8::BlockScaledGroup d =
        mxfp8::DescribeGroup(p, g, begin, s.row_begin[g + 1] - begin, s.tile_begin[g]);
    const int m = static_cast<int>(d.m), n = static_cast<int>(d.n), k = static_cast<int>(d.k);
    out.shapes[g] = typename G::Shape3{m, n, k};
    out.a[g] = reinterpret_cast<const typename G::ArrayA*>(o.lhs + d.a);
    out.b[g] = reinterpret_cast<const typename G::ArrayB*>(o.rhs + d.b);
    out.a_scales[g] = reinterpret_cast<const typename G::ScaleElement*>(o.lhs_scales + d.a_scales);
    out.b_scales[g] = reinterpret_cast<const typename G::ScaleElement*>(o.rhs_scales + d.b_scales);
    out.d[g] = static_cast<typename G::D*>(o.out) + d.d;
    out.stride_a[g] = cutlass::make_cute_packed_stride(typename G::StrideA{}, {m, k, 1});
    out.stride_b[g] = cutlass::make_cute_packed_stride(typename G::StrideB{}, {n, k, 1});
    out.stride_d[g] = cutlass::make_cute_packed_stride(typename G::StrideD{}, {m, n, 1});
    out.layout_a_scales[g] = G::ScaleConfig::tile_atom_to_shape_SFA(make_shape(m, n, k, 1));
    out.layout_b_scales[g] = G::ScaleConfig::tile_atom_to_shape_SFB(make_shape(m, n, k, 1));
  }
}

// Wgrad: out[g] = 0 for the groups without rows (their problems have no tiles). After the
// preparation launch, which wrote the schedule.
template <class O>
__global__ void __launch_bounds__(kScheduleThreads)
    ZeroEmptyGroupsKernel(mxfp8::BlockScaledProblem p, mxfp8::BlockScaledOperands o) {
  const RaggedSchedule s = ScheduleOfBatch(o.workspace, 0, p.num_groups);
  const int64_t g = blockIdx.y;
  if (s.row_begin[g + 1] != s.row_begin[g]) return;
  const int64_t bytes = p.k * p.n * static_cast<int64_t>(sizeof(O));
  ZeroBytes(static_cast<char*>(o.out) + g * bytes, 0, bytes, blockIdx.x, gridDim.x);
}

inline cute::UMMA::MXF8F6F4Format RuntimeFormat(mxfp8::Fp8Format f) {
  return f == mxfp8::Fp8Format::kE4M3 ? cute::UMMA::MXF8F6F4Format::E4M3
                                      : cute::UMMA::MXF8F6F4Format::E5M2;
}

template <BlockScaledGemm kGemm, ElementType kOut>
cudaError_t BlockScaledGrouped(const mxfp8::BlockScaledProblem& p,
                               const mxfp8::BlockScaledOperands& o, int device, int sm_count,
                               cudaStream_t stream) {
  using G = GroupedGemm<kGemm, kOut>;
  char* region = static_cast<char*>(o.workspace) + ScheduleBytes(1, p.num_groups);
  const ProblemArrays<G> arrays = ProblemArrays<G>::Carve(region, p.num_groups);
  void* cutlass_workspace = region + mxfp8::BlockScaledArgumentsBytes(p.num_groups);

  const int parts = kGemm == BlockScaledGemm::kWgrad ? 1 : kZeroParts;
  PrepareBlockScaledKernel<G, kGemm><<<parts, kScheduleThreads, 0, stream>>>(p, o, arrays);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if constexpr (kGemm == BlockScaledGemm::kWgrad) {
    const dim3 grid(kZeroParts, static_cast<unsigned>(p.num_groups));
    ZeroEmptyGroupsKernel<typename G::D><<<grid, kScheduleThreads, 0, stream>>>(p, o);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }

  typename G::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {static_cast<int>(p.num_groups), arrays.shapes, nullptr};  // device only
  args.mainloop.ptr_A = arrays.a;
  args.mainloop.dA = arrays.stride_a;
  args.mainloop.ptr_B = arrays.b;
  args.mainloop.dB = arrays.stride_b;
  args.mainloop.ptr_SFA = arrays.a_scales;
  args.mainloop.layout_SFA = arrays.layout_a_scales;
  args.mainloop.ptr_SFB = arrays.b_scales;
  args.mainloop.layout_SFB = arrays.layout_b_scales;
  args.mainloop.runtime_data_type_a = RuntimeFormat(p.lhs_format);
  args.mainloop.runtime_data_type_b = RuntimeFormat(p.rhs_format);
  SetPlainEpilogue(args, arrays.d, arrays.stride_d);
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;

  return RunCutlass<typename G::Gemm>(args, cutlass_workspace, stream);
}

}  // namespace jgg::cuda::sm100

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM100_BLOCKSCALED_GEMM_SM100_CUH_
