// The native Python module: hands XLA FFI handler capsules to Python (which
// registers them with jax.ffi) and answers workspace-size queries, so the
// workspace formula lives in C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "xla_plugin/common/mxfp8_layout.h"
#include "xla_plugin/common/workspace.h"
#include "xla_plugin/ffi/handlers.h"
#include "xla_plugin/ffi/mxfp8_decode.h"

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
  if (op == "ragged_m" || op == "ragged_k") return jgg::RaggedWorkspaceBytes(batch, num_local_groups);
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
  m.attr("MXFP8_WORKSPACE_BYTES") = jgg::kMxfp8WorkspaceBytes;
#ifdef JGG_WITH_CUDA
  m.attr("cuda_built") = true;
#else
  m.attr("cuda_built") = false;
#endif
}
