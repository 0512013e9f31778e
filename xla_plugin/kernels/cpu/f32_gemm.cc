#include "xla_plugin/kernels/cpu/f32_gemm.h"

#include <algorithm>
#include <cstring>

namespace jgg::cpu {
namespace {

size_t ElementBytes(ElementType t) { return t == ElementType::kF32 ? 4 : 2; }

float LoadElement(const void* base, ElementType t, int64_t i) {
  switch (t) {
    case ElementType::kF32: return static_cast<const float*>(base)[i];
    case ElementType::kBF16: return Bf16BitsToFloat(static_cast<const uint16_t*>(base)[i]);
    case ElementType::kF16: return static_cast<float>(static_cast<const _Float16*>(base)[i]);
  }
  return 0.0f;
}

}  // namespace

void Widen(const void* base, ElementType t, int64_t first, int64_t count, float* dst) {
  if (t == ElementType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + first, count * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < count; ++i) dst[i] = LoadElement(base, t, first + i);
}

void Narrow(const float* src, int64_t count, void* base, ElementType t, int64_t first) {
  switch (t) {
    case ElementType::kF32:
      std::memcpy(static_cast<float*>(base) + first, src, count * sizeof(float));
      return;
    case ElementType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + first;
      for (int64_t i = 0; i < count; ++i) dst[i] = FloatToBf16Bits(src[i]);
      return;
    }
    case ElementType::kF16: {
      _Float16* dst = static_cast<_Float16*>(base) + first;
      for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<_Float16>(src[i]);
      return;
    }
  }
}

void ZeroElements(void* base, ElementType t, int64_t first, int64_t count) {
  std::memset(static_cast<char*>(base) + first * ElementBytes(t), 0, count * ElementBytes(t));
}

// Blocked so a strip of C stays in L1 while B's rows stream through it; the inner loop over n
// is contiguous and vectorizes.
void GemmF32(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row_stride,
             int64_t a_col_stride, const float* b, int64_t ldb, float* c, int64_t ldc) {
  constexpr int64_t kRowBlock = 8, kColBlock = 256;
  float acc[kRowBlock][kColBlock];
  for (int64_t m0 = 0; m0 < m; m0 += kRowBlock) {
    const int64_t mb = std::min(kRowBlock, m - m0);
    for (int64_t n0 = 0; n0 < n; n0 += kColBlock) {
      const int64_t nb = std::min(kColBlock, n - n0);
      for (int64_t i = 0; i < mb; ++i) std::fill(acc[i], acc[i] + nb, 0.0f);
      for (int64_t kk = 0; kk < k; ++kk) {
        const float* b_row = b + kk * ldb + n0;
        for (int64_t i = 0; i < mb; ++i) {
          const float a_ik = a[(m0 + i) * a_row_stride + kk * a_col_stride];
          float* acc_row = acc[i];
          for (int64_t j = 0; j < nb; ++j) acc_row[j] += a_ik * b_row[j];
        }
      }
      for (int64_t i = 0; i < mb; ++i) std::copy(acc[i], acc[i] + nb, c + (m0 + i) * ldc + n0);
    }
  }
}

}  // namespace jgg::cpu
