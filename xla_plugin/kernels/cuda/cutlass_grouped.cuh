// What every CUTLASS grouped launch of ours shares, whatever the architecture (sm90/ and
// sm100/): per-problem argument arrays carved out of our workspace, the epilogue D = acc with
// no source operand, running the kernel on our workspace with CUTLASS's status as a CUDA
// error, and CUTLASS's names of our element types. Header-only; included by the
// instantiation headers after CUTLASS's.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_CUTLASS_GROUPED_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_CUTLASS_GROUPED_CUH_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "xla_plugin/common/element_types.h"
#include "xla_plugin/common/workspace.h"

namespace jgg::cuda {

// CUTLASS's element type of each of ours.
template <ElementType> struct CutlassElement;
template <> struct CutlassElement<ElementType::kBF16> { using type = cutlass::bfloat16_t; };
template <> struct CutlassElement<ElementType::kF16> { using type = cutlass::half_t; };
template <> struct CutlassElement<ElementType::kF32> { using type = float; };

// Points each field at `count` elements of `region`, one after another, 16-byte aligned.
template <class... Fields>
void CarveArrays(char* region, int64_t count, Fields*&... fields) {
  auto take = [&](auto*& field) {
    field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(region);
    region += (count * sizeof(*field) + 15) / 16 * 16;
  };
  (take(fields), ...);
}

// Bytes per problem that bound what CarveArrays takes for arrays of these element types:
// their sizes plus up to 16 bytes of alignment before each array after the first.
template <class... Elements>
constexpr int64_t CarvedBytesPerProblem() {
  return (static_cast<int64_t>(sizeof(Elements)) + ...) + 16 * (sizeof...(Elements) - 1);
}

inline cudaError_t FromCutlass(cutlass::Status status) {
  return status == cutlass::Status::kSuccess ? cudaSuccess : cudaErrorNotSupported;
}

// D = accumulator for every problem (alpha 1, beta 0, no C operand).
template <class Arguments, class D, class StrideD>
void SetPlainEpilogue(Arguments& args, D** d, StrideD* stride_d) {
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = stride_d;
}

// Checks `args` and sets up `gemm` to run them with CUTLASS's workspace in ours
// (kCutlassWorkspaceBytes at `workspace`); no host sync, nothing launched.
template <class Gemm>
cudaError_t InitializeCutlass(Gemm& gemm, const typename Gemm::Arguments& args, void* workspace,
                              cudaStream_t stream) {
  if (Gemm::get_workspace_size(args) > static_cast<size_t>(kCutlassWorkspaceBytes))
    return cudaErrorMemoryAllocation;  // the static bound in workspace.h is too small
  if (cudaError_t e = FromCutlass(gemm.can_implement(args)); e != cudaSuccess) return e;
  return FromCutlass(gemm.initialize(args, workspace, stream));
}

// Runs `args` with CUTLASS's workspace in ours (kCutlassWorkspaceBytes); no host sync.
template <class Gemm>
cudaError_t RunCutlass(const typename Gemm::Arguments& args, void* workspace,
                       cudaStream_t stream) {
  Gemm gemm;
  if (cudaError_t e = InitializeCutlass(gemm, args, workspace, stream); e != cudaSuccess)
    return e;
  return FromCutlass(gemm.run(stream));
}

}  // namespace jgg::cuda

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_CUTLASS_GROUPED_CUH_
