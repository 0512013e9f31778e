// The native Python module: hands XLA FFI handler capsules to Python (which
// registers them with jax.ffi) and answers workspace-size queries, so the
// workspace formula lives in C++ only.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "xla_plugin/common/workspace.h"
#include "xla_plugin/ffi/handlers.h"

namespace nb = nanobind;

namespace {

// Custom-call target names. The suffix is the ABI version of the call
// (operands, attributes, semantics): bump it on any incompatible change so an
// old exported artifact fails to find its target instead of misbehaving.
constexpr const char kRaggedMTarget[] = "jgg_ragged_m_v1";
constexpr const char kRaggedKTarget[] = "jgg_ragged_k_v1";

nb::capsule Capsule(XLA_FFI_Handler* handler) {
  return nb::capsule(reinterpret_cast<void*>(handler));
}

nb::dict Registrations() {
  nb::dict cpu;
  cpu[kRaggedMTarget] = Capsule(JggRaggedMCpu);
  cpu[kRaggedKTarget] = Capsule(JggRaggedKCpu);
  nb::dict platforms;
  platforms["cpu"] = cpu;
#ifdef JGG_WITH_CUDA
  nb::dict cuda;
  cuda[kRaggedMTarget] = Capsule(JggRaggedMCuda);
  cuda[kRaggedKTarget] = Capsule(JggRaggedKCuda);
  platforms["CUDA"] = cuda;
#endif
  return platforms;
}

int64_t WorkspaceBytes(const std::string& op, int64_t batch, int64_t num_local_groups) {
  if (batch < 0 || num_local_groups < 0) throw std::invalid_argument("negative dimension");
  if (op == "ragged_m" || op == "ragged_k") return jgg::RaggedWorkspaceBytes(batch, num_local_groups);
  throw std::invalid_argument("workspace_bytes: unknown op '" + op + "'");
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
#ifdef JGG_WITH_CUDA
  m.attr("cuda_built") = true;
#else
  m.attr("cuda_built") = false;
#endif
}
