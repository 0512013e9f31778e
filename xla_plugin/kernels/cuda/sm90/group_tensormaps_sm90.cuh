// TMA descriptors of every problem of a grouped GEMM, written once by the preparation kernel
// instead of by each CTA of CUTLASS's ptr-array kernel at each change of group.
//
// CUTLASS's kernel gives each CTA one descriptor per operand in global memory and rewrites it
// whenever the CTA's next tile belongs to another group: the new address, dims and strides are
// set in shared memory and copied out behind a release fence. Before overwriting D's
// descriptor a consumer warp waits until all the CTA's earlier TMA stores have completed,
// which every consumer warp of the CTA then waits on before its next MMAs. With groups of a
// few hundred rows most tiles start a new group, and that wait lies on the critical path.
//
// Here the CUTLASS workspace holds one A, one B and one D descriptor per problem (not per
// SM; room for kProblemsPerGroupedGemm problems, so larger calls run several GEMMs), written
// by the kernel that prepares the problem arrays. The collectives below derive from
// CUTLASS's and only repoint the CTA's descriptor at the next problem's, behind an acquire
// fence: nothing is rewritten or waited for in the GEMM.
#ifndef JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_TENSORMAPS_SM90_CUH_
#define JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_TENSORMAPS_SM90_CUH_

#include <cstddef>
#include <cstdint>

#include "cute/arch/copy_sm90_desc.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace jgg::cuda::sm90 {

// What CUTLASS's kernel holds as a CTA's descriptor: it keeps the value tensormaps_init
// returned and hands it to every TMA copy, so the handle reads the descriptor pointer from
// the collective, which repoints it at each change of group.
struct DescriptorHandle {
  cute::TmaDescriptor const* const* current;
  CUTLASS_DEVICE operator cute::TmaDescriptor const*() const { return *current; }
};

// The mainloop: descriptors 2p (A) and 2p + 1 (B) of the workspace belong to problem p.
template <class Base>
struct MainloopWithGroupTensormaps : Base {
  using typename Base::Arguments;
  using typename Base::Params;
  using typename Base::TensorMapStorage;

  static constexpr int kDescriptorsPerProblem = 2;

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const& shape, Arguments const&, int) {
    return kDescriptorsPerProblem * sizeof(cute::TmaDescriptor) * shape.groups();
  }

  static CUTLASS_DEVICE cute::TmaDescriptor* Descriptors(Params const& params, int problem) {
    return static_cast<cute::TmaDescriptor*>(params.tensormaps) +
           kDescriptorsPerProblem * static_cast<int64_t>(problem);
  }

  CUTLASS_DEVICE auto tensormaps_init(Params const&, TensorMapStorage&, int32_t, int32_t) {
    return cute::make_tuple(DescriptorHandle{&current_[0]}, DescriptorHandle{&current_[1]});
  }

  template <class Handles, class ProblemShape>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage&, Params const& params,
                                                Handles const&, ProblemShape, int32_t problem) {
    current_[0] = Descriptors(params, problem);
    current_[1] = current_[0] + 1;
  }

  template <class Handles>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage&, Handles const&) {}

  template <class Handles>
  CUTLASS_DEVICE void tensormaps_fence_acquire(Handles const&) {
    cute::tma_descriptor_fence_acquire(current_[0]);
    cute::tma_descriptor_fence_acquire(current_[1]);
  }

 private:
  cute::TmaDescriptor const* current_[2] = {nullptr, nullptr};
};

// The epilogue, which stores D only (no source C): descriptor p of its workspace, after
// CUTLASS's fusion workspace, belongs to problem p. CUTLASS's kernel updates the descriptor
// in warp 0 of each consumer warp group, whose thread issues the stores, and fences it in
// every warp: the other warps' handles stay unset and skip the fence.
template <class Base>
struct EpilogueWithGroupTensormaps : Base {
  using typename Base::Arguments;
  using typename Base::Params;
  using typename Base::TensorMapStorage;
  static_assert(cute::is_void_v<typename Base::ElementC>, "a source C has no descriptors here");

  using Base::Base;

  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const& shape, Arguments const& args, int) {
    // CUTLASS's size at 0 SMs is its fusion workspace alone, which comes first.
    return Base::get_workspace_size(shape, args, 0) + sizeof(cute::TmaDescriptor) * shape.groups();
  }

  static CUTLASS_DEVICE cute::TmaDescriptor* Descriptors(Params const& params, int problem) {
    return params.tensormaps + problem;
  }

  CUTLASS_DEVICE auto store_init(Params const&, TensorMapStorage&, int32_t, int32_t, int32_t) {
    return cute::make_tuple(DescriptorHandle{&current_});
  }

  template <bool kIsLoad, class Handle, class ProblemShape>
  CUTLASS_DEVICE void tensormaps_perform_update(TensorMapStorage&, Params const& params,
                                                Handle const&, ProblemShape, int32_t problem,
                                                int32_t) {
    if constexpr (!kIsLoad) current_ = Descriptors(params, problem);
  }

  template <bool kIsLoad, class Handle>
  CUTLASS_DEVICE void tensormaps_cp_fence_release(TensorMapStorage&, Handle const&, int32_t) {}

  template <bool kIsLoad, class Handle>
  CUTLASS_DEVICE void tensormaps_fence_acquire(Handle const&) {
    if constexpr (!kIsLoad) {
      if (current_ != nullptr) cute::tma_descriptor_fence_acquire(current_);
    }
  }

 private:
  cute::TmaDescriptor const* current_ = nullptr;
};

// Writes to `out` the descriptor of `atom` (one of CUTLASS's TMA copies, whose descriptor
// fixes everything but the tensor) retargeted at `tensor`, as CUTLASS's kernel would for
// its group. `staging` is this thread's 128 bytes of shared memory.
template <class TmaAtom, class Tensor>
CUTLASS_DEVICE void WriteDescriptor(TmaAtom const& atom, Tensor const& tensor,
                                    cute::TmaDescriptor& staging, cute::TmaDescriptor* out) {
  using Element = typename Tensor::value_type;
  cute::array<uint32_t, 5> dims = {1, 1, 1, 1, 1};
  cute::array<uint64_t, 5> strides = {0, 0, 0, 0, 0};
  cute::detail::fill_tma_gmem_shape_stride(atom, tensor, dims, strides);
  for (uint64_t& stride : strides) stride = stride * cute::sizeof_bits_v<Element> / 8;
  staging = *atom.get_tma_descriptor();
  cute::tma_descriptor_replace_addr_in_shared_mem(staging, cute::raw_pointer_cast(tensor.data()));
  cute::tma_descriptor_replace_dims_strides_in_shared_mem(staging, dims, strides);
  *out = staging;
}

}  // namespace jgg::cuda::sm90

#endif  // JGG_XLA_PLUGIN_KERNELS_CUDA_SM90_GROUP_TENSORMAPS_SM90_CUH_
