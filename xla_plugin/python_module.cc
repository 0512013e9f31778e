// The native Python module: hands XLA FFI handler capsules to Python (which
// registers them with jax.ffi) and answers workspace-size queries, so the
// workspace formula lives in C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "xla_plugin/common/mxfp8_blockscaled_problem.h"
#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_decode.h"
#ifdef JGG_WITH_CUDA
#include "xla_plugin/kernels/cuda/mxfp8_blockscaled_cuda.h"
#endif

namespace nb = nanobind;

namespace {

// Custom-call target names. The suffix is the ABI version of the call
// (operands, attributes, semantics): bump it on any incompatible change so an
// old exported artifact fails to find its target instead of misbehaving.
constexpr const char kRaggedMTarget[] = "jgg_ragged_m_v1";
constexpr const char kRaggedKTarget[] = "jgg_ragged_k_v1";
// _v2 added a workspace result (the CUDA kernels' job counter); _v1 stays registered for
// artifacts that name it (a static job split on CUDA, the same results).
constexpr const char kMxfp8QuantizeTarget[] = "jgg_mxfp8_quantize_v2";
constexpr const char kMxfp8DequantizeTarget[] = "jgg_mxfp8_dequantize_v2";
constexpr const char kMxfp8QuantizeTargetV1[] = "jgg_mxfp8_quantize_v1";
constexpr const char kMxfp8DequantizeTargetV1[] = "jgg_mxfp8_dequantize_v1";
// _v2 added the rhs_transposed attribute (dgrad); _v1 calls are the forward orientation.
constexpr const char kMxfp8RaggedMTarget[] = "jgg_mxfp8_ragged_m_v2";
constexpr const char kMxfp8RaggedMTargetV1[] = "jgg_mxfp8_ragged_m_v1";
constexpr const char kMxfp8RaggedKTarget[] = "jgg_mxfp8_ragged_k_v1";
constexpr const char kMxfp8BlockScaledTarget[] = "jgg_mxfp8_blockscaled_v1";

nb::capsule Capsule(XLA_FFI_Handler* handler) {
  return nb::capsule(reinterpret_cast<void*>(handler));
}

// Every target with its CPU and CUDA handler (null in a build without CUDA).
struct Target {
  const char* name;
  XLA_FFI_Handler* cpu;
  XLA_FFI_Handler* cuda;
};

#ifdef JGG_WITH_CUDA
#define JGG_CUDA_HANDLER(handler) handler
#else
#define JGG_CUDA_HANDLER(handler) nullptr
#endif

const Target kTargets[] = {
    {kRaggedMTarget, JggRaggedMCpu, JGG_CUDA_HANDLER(JggRaggedMCuda)},
    {kRaggedKTarget, JggRaggedKCpu, JGG_CUDA_HANDLER(JggRaggedKCuda)},
    {kMxfp8QuantizeTarget, JggMxfp8QuantizeV2Cpu, JGG_CUDA_HANDLER(JggMxfp8QuantizeV2Cuda)},
    {kMxfp8DequantizeTarget, JggMxfp8DequantizeV2Cpu, JGG_CUDA_HANDLER(JggMxfp8DequantizeV2Cuda)},
    {kMxfp8QuantizeTargetV1, JggMxfp8QuantizeCpu, JGG_CUDA_HANDLER(JggMxfp8QuantizeCuda)},
    {kMxfp8DequantizeTargetV1, JggMxfp8DequantizeCpu, JGG_CUDA_HANDLER(JggMxfp8DequantizeCuda)},
    {kMxfp8RaggedMTarget, JggMxfp8RaggedMV2Cpu, JGG_CUDA_HANDLER(JggMxfp8RaggedMV2Cuda)},
    {kMxfp8RaggedMTargetV1, JggMxfp8RaggedMCpu, JGG_CUDA_HANDLER(JggMxfp8RaggedMCuda)},
    {kMxfp8RaggedKTarget, JggMxfp8RaggedKCpu, JGG_CUDA_HANDLER(JggMxfp8RaggedKCuda)},
    {kMxfp8BlockScaledTarget, JggMxfp8BlockScaledCpu, JGG_CUDA_HANDLER(JggMxfp8BlockScaledCuda)},
};

nb::dict Registrations() {
  nb::dict cpu, cuda;
  for (const Target& target : kTargets) {
    cpu[target.name] = Capsule(target.cpu);
    if (target.cuda != nullptr) cuda[target.name] = Capsule(target.cuda);
  }
  nb::dict platforms;
  platforms["cpu"] = cpu;
  if (cuda.size() > 0) platforms["CUDA"] = cuda;
  return platforms;
}

int64_t WorkspaceBytes(const std::string& op, int64_t batch, int64_t num_local_groups) {
  if (batch < 0 || num_local_groups < 0) throw std::invalid_argument("negative dimension");
  // Only ragged_m's GEMM splits its last round (the tail split region, workspace.h).
  if (op == "ragged_m") return jgg::RaggedWorkspaceBytes(batch, num_local_groups);
  if (op == "ragged_k") return jgg::RequiredRaggedWorkspaceBytes(batch, num_local_groups);
  throw std::invalid_argument("workspace_bytes: unknown op '" + op + "'");
}

// Bytes of one orientation's MXFP8 scale buffer (worst case over group sizes): the formula the
// handlers check against (common/mxfp8_layout.h).
int64_t Mxfp8ScaleBytes(int32_t layout, int64_t num_groups, int64_t rows, int64_t cols) {
  if (layout < 0 || layout > 3) throw std::invalid_argument("mxfp8_scale_bytes: unknown layout");
  if (num_groups < 0 || rows < 0 || cols < 0) throw std::invalid_argument("negative dimension");
  return jgg::mxfp8::ScaleBufferBytes(
      {static_cast<jgg::mxfp8::GroupedLayout>(layout), num_groups, rows, cols});
}

int64_t Mxfp8BlockScaledWorkspaceBytes(int64_t num_groups) {
  if (num_groups < 0) throw std::invalid_argument("negative dimension");
  return jgg::mxfp8::BlockScaledWorkspaceBytes(num_groups);
}

// -1 without the CUDA build (the sm_100 kernels and CUTLASS's layout are not in it).
int64_t Mxfp8BlockScaledLayoutMismatches(int64_t rows, int64_t depth) {
  if (rows <= 0 || depth <= 0) throw std::invalid_argument("dimensions must be positive");
#ifdef JGG_WITH_CUDA
  return jgg::cuda::BlockScaledScaleLayoutMismatches(rows, depth);
#else
  return -1;
#endif
}

}  // namespace

NB_MODULE(_jgg_native, m) {
  m.doc() = "Native XLA FFI handlers of jax_grouped_gemm.";
  m.def("registrations", &Registrations,
        "{platform: {target name: handler capsule}} for jax.ffi.register_ffi_target.");
  m.def("workspace_bytes", &WorkspaceBytes, nb::arg("op"), nb::arg("batch"),
        nb::arg("num_local_groups"), "Scratch bytes one call of `op` needs.");
  m.attr("RAGGED_M_TARGET") = kRaggedMTarget;
  m.attr("RAGGED_K_TARGET") = kRaggedKTarget;
  m.def("mxfp8_scale_bytes", &Mxfp8ScaleBytes, nb::arg("layout"), nb::arg("num_groups"),
        nb::arg("rows"), nb::arg("cols"),
        "Bytes of one orientation's MXFP8 scale buffer (layout: 0 same dims, 1 varying first, "
        "2 varying last, 3 varying both).");
  m.attr("MXFP8_QUANTIZE_TARGET") = kMxfp8QuantizeTarget;
  m.attr("MXFP8_DEQUANTIZE_TARGET") = kMxfp8DequantizeTarget;
  m.attr("MXFP8_RAGGED_M_TARGET") = kMxfp8RaggedMTarget;
  m.attr("MXFP8_LEGACY_TARGETS") = nb::make_tuple(kMxfp8QuantizeTargetV1, kMxfp8DequantizeTargetV1);
  m.attr("MXFP8_RAGGED_M_TARGET_V1") = kMxfp8RaggedMTargetV1;
  m.attr("MXFP8_RAGGED_K_TARGET") = kMxfp8RaggedKTarget;
  m.attr("MXFP8_WORKSPACE_BYTES") = jgg::kMxfp8WorkspaceBytes;
  m.attr("MXFP8_BLOCKSCALED_TARGET") = kMxfp8BlockScaledTarget;
  m.def("mxfp8_blockscaled_workspace_bytes", &Mxfp8BlockScaledWorkspaceBytes,
        nb::arg("num_groups"), "Scratch bytes of one block-scaled MXFP8 grouped GEMM call.");
  m.def("mxfp8_blockscaled_layout_mismatches", &Mxfp8BlockScaledLayoutMismatches,
        nb::arg("rows"), nb::arg("depth"),
        "Elements of a [rows, depth] operand whose scale CUTLASS's sm_100 layout puts elsewhere "
        "than the swizzled layout (0: the contract holds; -1: not a CUDA build).");
#ifdef JGG_WITH_CUDA
  m.attr("cuda_built") = true;
#else
  m.attr("cuda_built") = false;
#endif
}
