#include "xla_plugin/kernels/cpu/mxfp8_blockscaled_cpu.h"

#include <cstring>
#include <vector>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cpu/f32_gemm.h"

namespace jgg::cpu {
namespace {

using mxfp8::BlockScaledGemm;

// One operand of a group's GEMM as the library reads it: element (i, kk) of its
// [rows, depth] view (i along M or N, kk along the contraction) at codes[i * row + kk * deep],
// its scale at byte SwizzledIndex(i, kk / 32) of its own padded scale matrix.
struct OperandView {
  const uint8_t* codes;
  int64_t row, deep;
  const uint8_t* scales;
  mxfp8::Fp8Format format;
};

// Dequantized view into `out` [depth, rows] (contraction-major: the f32 GEMM's B) or
// [rows, depth].
void Dequantize(const OperandView& v, int64_t rows, int64_t depth, bool depth_major,
                std::vector<float>& out) {
  const int64_t padded_cols = mxfp8::GroupScaleMatrix(rows, depth, false).padded_cols;
  out.resize(rows * depth);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t kk = 0; kk < depth; ++kk) {
      const uint8_t e = v.scales[mxfp8::SwizzledIndex(i, kk / mxfp8::kBlockSize, padded_cols)];
      const uint32_t bits = mxfp8::DequantizeElement(v.codes[i * v.row + kk * v.deep], e,
                                                     v.format, mxfp8::F32Format());
      float value;
      std::memcpy(&value, &bits, sizeof(value));
      out[depth_major ? kk * rows + i : i * depth + kk] = value;
    }
  }
}

}  // namespace

void Mxfp8BlockScaled(const mxfp8::BlockScaledProblem& p, const mxfp8::BlockScaledOperands& o) {
  std::vector<int64_t> bounds(2 * (p.num_groups + 1));
  const RaggedSchedule s{bounds.data(), bounds.data() + p.num_groups + 1};
  ComputeRaggedSchedule(o.group_sizes, p.num_groups, /*group_offset=*/0, p.num_groups, p.rows,
                        mxfp8::kScaleTileRows, s);
  // Strides of A (i along M) and B (i along N) per GEMM; see blockscaled_gemm_sm100.cuh.
  const bool wgrad = p.gemm == BlockScaledGemm::kWgrad;
  const int64_t a_row = wgrad ? 1 : p.k, a_deep = wgrad ? p.k : 1;
  const int64_t b_row = p.gemm == BlockScaledGemm::kDgrad ? p.k : 1;
  const int64_t b_deep = p.gemm == BlockScaledGemm::kDgrad ? 1 : p.n;
  std::vector<float> a, b, out;
  for (int64_t g = 0; g < p.num_groups; ++g) {
    const int64_t begin = s.row_begin[g];
    const mxfp8::BlockScaledGroup d =
        mxfp8::DescribeGroup(p, g, begin, s.row_begin[g + 1] - begin, s.tile_begin[g]);
    if (d.m == 0) {
      if (wgrad) ZeroElements(o.out, p.out_type, d.d, p.k * p.n);
      continue;
    }
    Dequantize({o.lhs + d.a, a_row, a_deep, o.lhs_scales + d.a_scales, p.lhs_format}, d.m, d.k,
               /*depth_major=*/false, a);
    Dequantize({o.rhs + d.b, b_row, b_deep, o.rhs_scales + d.b_scales, p.rhs_format}, d.n, d.k,
               /*depth_major=*/true, b);
    out.resize(d.m * d.n);
    GemmF32(d.m, d.n, d.k, a.data(), d.k, 1, b.data(), d.n, out.data(), d.n);
    Narrow(out.data(), d.m * d.n, o.out, p.out_type, d.d);
  }
  if (!wgrad) {
    const int64_t covered = s.row_begin[p.num_groups];
    ZeroElements(o.out, p.out_type, covered * p.n, (p.rows - covered) * p.n);
  }
}

}  // namespace jgg::cpu
