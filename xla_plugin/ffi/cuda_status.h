// What every CUDA handler does around its launch: CUDA errors as FFI errors, and the debug
// poisoning of results (a memset node when captured, so handlers stay command-buffer
// compatible).
#ifndef JGG_XLA_PLUGIN_FFI_CUDA_STATUS_H_
#define JGG_XLA_PLUGIN_FFI_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include <string>

#include "xla/ffi/api/ffi.h"
#include "xla_plugin/common/debug_poison.h"

namespace jgg {

namespace ffi = ::xla::ffi;

inline ffi::Error FromCuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(status));
}

template <typename Result>
cudaError_t MaybePoison(Result& out, cudaStream_t stream) {
  if (!PoisonOutputs() || out->size_bytes() == 0) return cudaSuccess;
  return cudaMemsetAsync(out->untyped_data(), kPoisonByte, out->size_bytes(), stream);
}

}  // namespace jgg

#endif  // JGG_XLA_PLUGIN_FFI_CUDA_STATUS_H_
