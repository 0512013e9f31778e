// f32 building blocks of the CPU kernels: widening inputs, narrowing results, and the
// blocked f32 GEMM every CPU GEMM runs on.
#ifndef JGG_XLA_PLUGIN_KERNELS_CPU_F32_GEMM_H_
#define JGG_XLA_PLUGIN_KERNELS_CPU_F32_GEMM_H_

#include <cstdint>

#include "xla_plugin/common/element_types.h"

namespace jgg::cpu {

// Widens `count` contiguous elements starting at element `first` to f32.
void Widen(const void* base, ElementType t, int64_t first, int64_t count, float* dst);

// Narrows `count` f32 values into contiguous elements starting at `first` (round to nearest
// even).
void Narrow(const float* src, int64_t count, void* base, ElementType t, int64_t first);

void ZeroElements(void* base, ElementType t, int64_t first, int64_t count);

// C[m][n] = sum_k A(m, k) * B[k][n]: A addressed through strides so that a transposed A
// (wgrad) needs no copy, B and C row-major.
void GemmF32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row_stride,
             int64_t a_col_stride, const float* b, int64_t ldb, float* c, int64_t ldc);

}  // namespace jgg::cpu

#endif  // JGG_XLA_PLUGIN_KERNELS_CPU_F32_GEMM_H_
