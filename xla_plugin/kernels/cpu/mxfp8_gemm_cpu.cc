// Dequantizes with the portable MXFP8 kernels and multiplies with the ragged kernels' f32 GEMM:
// ragged M dequantizes lhs whole and the weights one group at a time (the f32 copy is one
// [K, N] matrix, transposed ones copied into that layout); ragged K dequantizes both operands
// whole, each with its own group sizes.
#include "xla_plugin/kernels/cpu/mxfp8_gemm_cpu.h"

#include <vector>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cpu/f32_gemm.h"
#include "xla_plugin/kernels/cpu/mxfp8_cpu.h"

namespace jgg::cpu {

void Mxfp8RaggedM(const mxfp8::RaggedMProblem& p, const mxfp8::RaggedMOperands& o) {
  using mxfp8::GroupedLayout;
  const GroupedLayout lhs_layout = p.lhs_grouped ? GroupedLayout::kVaryingFirst
                                                 : GroupedLayout::kSameDims;
  std::vector<float> lhs(p.rows * p.k), rhs(p.k * p.n), out;
  std::vector<float> transposed(p.rhs_transposed ? p.k * p.n : 0);
  Mxfp8Dequantize({{lhs_layout, p.lhs_grouped ? p.lhs_num_groups : 1, p.rows, p.k},
                   p.lhs_format, /*colwise=*/false, /*swizzled=*/false, ElementType::kF32,
                   mxfp8::LhsScaleBytes(p)},
                  {o.lhs, o.lhs_scales, o.lhs_group_sizes, lhs.data()});

  std::vector<int64_t> bounds(2 * (p.num_groups + 1));
  const RaggedSchedule schedule{bounds.data(), bounds.data() + p.num_groups + 1};
  ComputeRaggedSchedule(o.group_sizes, p.num_groups, /*group_offset=*/0, p.num_groups, p.rows,
                        /*tile_rows=*/1, schedule);
  const int64_t scale_bytes = mxfp8::RhsGroupScaleBytes(p);
  for (int64_t g = 0; g < p.num_groups; ++g) {
    const int64_t begin = schedule.row_begin[g], rows = schedule.row_begin[g + 1] - begin;
    if (rows == 0) continue;
    // Expert g alone, as a one-matrix stack (which reads no group sizes); a transposed one
    // ([n, k] rowwise) is dequantized, then laid out [k, n] for the GEMM.
    const int64_t rhs_rows = p.rhs_transposed ? p.n : p.k, rhs_cols = p.rhs_transposed ? p.k : p.n;
    float* dequantized = p.rhs_transposed ? transposed.data() : rhs.data();
    Mxfp8Dequantize({{GroupedLayout::kSameDims, 1, rhs_rows, rhs_cols}, p.rhs_format,
                     /*colwise=*/!p.rhs_transposed, /*swizzled=*/false, ElementType::kF32,
                     scale_bytes},
                    {o.rhs + g * p.k * p.n, o.rhs_scales + g * scale_bytes,
                     /*group_sizes=*/nullptr, dequantized});
    if (p.rhs_transposed) {
      for (int64_t i = 0; i < p.n; ++i)
        for (int64_t j = 0; j < p.k; ++j) rhs[j * p.n + i] = transposed[i * p.k + j];
    }
    out.resize(rows * p.n);
    GemmF32(rows, p.n, p.k, lhs.data() + begin * p.k, p.k, 1, rhs.data(), p.n, out.data(), p.n);
    Narrow(out.data(), rows * p.n, o.out, p.out_type, begin * p.n);
  }
  const int64_t covered = schedule.row_begin[p.num_groups];
  ZeroElements(o.out, p.out_type, covered * p.n, (p.rows - covered) * p.n);
}

void Mxfp8RaggedK(const mxfp8::RaggedKProblem& p, const mxfp8::RaggedKOperands& o) {
  const auto dequantize = [&](const uint8_t* data, const uint8_t* scales, const int32_t* sizes,
                              int64_t cols, mxfp8::Fp8Format format) {
    std::vector<float> values(p.rows * cols);
    Mxfp8Dequantize({{mxfp8::GroupedLayout::kVaryingFirst, p.num_groups, p.rows, cols}, format,
                     /*colwise=*/true, /*swizzled=*/false, ElementType::kF32,
                     mxfp8::ColwiseScaleBytes(p, cols)},
                    {data, scales, sizes, values.data()});
    return values;
  };
  const std::vector<float> lhs =
      dequantize(o.lhs, o.lhs_scales, o.lhs_group_sizes, p.k, p.lhs_format);
  const std::vector<float> rhs =
      dequantize(o.rhs, o.rhs_scales, o.rhs_group_sizes, p.n, p.rhs_format);

  std::vector<int64_t> bounds(2 * (p.num_groups + 1));
  const RaggedSchedule schedule{bounds.data(), bounds.data() + p.num_groups + 1};
  ComputeRaggedSchedule(o.group_sizes, p.num_groups, /*group_offset=*/0, p.num_groups, p.rows,
                        /*tile_rows=*/1, schedule);
  std::vector<float> out(p.k * p.n);
  for (int64_t g = 0; g < p.num_groups; ++g) {
    const int64_t begin = schedule.row_begin[g], rows = schedule.row_begin[g + 1] - begin;
    // lhs rows of g read transposed in place: A(i, r) = lhs[begin + r, i].
    GemmF32(p.k, p.n, rows, lhs.data() + begin * p.k, 1, p.k, rhs.data() + begin * p.n, p.n,
            out.data(), p.n);
    Narrow(out.data(), p.k * p.n, o.out, p.out_type, g * p.k * p.n);
  }
}

}  // namespace jgg::cpu
