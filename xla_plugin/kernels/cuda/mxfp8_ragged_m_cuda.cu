// Tensor cores on the fp8 codes: out^T = W^T . x^T as mma.sync m16n8k16 (f16 in, f32
// accumulation), the weights as the 16-row operand (16 output columns) and up to 8 group rows
// as the 8-wide one, so a pass of 8 rows costs one mma per 16x16 weights instead of 8 FMAs
// per weight. fp8 -> f16 is exact (every e4m3 and e5m2 value is an f16); each 32-deep MX block
// is one pair of mmas whose f32 sum is multiplied by its two power-of-two scales and added to
// the accumulator (see "the fast path" below for why that is the dequantized product).
//
// Work: a block computes up to 8 rows of one pass (mxfp8_ragged_m_passes.cuh) for 128 output
// columns; its 8 warps take every 8th MX block of K each, and their sums are added in a fixed
// order.
// The order of K inside a 16-deep step is free as long as both operands use it: lane (g, t)
// takes the contraction indices 8t + 4s + {0..3} of MX-block step s as its k-slots {2t, 2t+1,
// 2t+8, 2t+9}, so its slice of x is one 4-byte word per step. Each lane owns 16 output columns
// ("local" columns c = 2j + i/2 of its accumulator acc[j][i], j the mma tile):
//   forward (rhs [G, K, N], colwise): columns 16g + c, consecutive, so a weight row is one
//     16-byte load per lane (a warp reads whole 128-byte rows), its 8 rows per MX block
//     interleaved into fragments by byte permutes;
//   dgrad (rhs_transposed: rhs [G, N, K], rowwise): columns g + 8c, whose rows hold the
//     contraction, so each is one 8-byte load per MX block that already is two fragments.
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_passes.cuh"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedMOperands;
using mxfp8::RaggedMProblem;
using mxfp8_ragged_m::kPassRows;
using mxfp8_ragged_m::Pass;

constexpr int kWarps = 8;                 // a block's warps split K
constexpr int kThreads = 32 * kWarps;
constexpr int kLaneCols = 16;             // output columns per lane
constexpr int kBlockCols = 8 * kLaneCols; // output columns per block (lanes g = 0..7)
constexpr int kTiles = kLaneCols / 2;     // mma tiles per warp (2 columns of each per lane)
constexpr int kStepK = 16;                // mma depth
constexpr int kSteps = mxfp8::kBlockSize / kStepK;  // mma steps per MX block
constexpr int kMinBlocksPerSm = 2;        // 16 warps: 64 KB of weights in flight per SM
constexpr int64_t kMaxGridY = 65535;      // more slots loop

// Two fp8 codes (the low 16 bits of `pair`, first lowest) as an f16x2 register, exactly.
template <Fp8Format kFormat>
__device__ inline uint32_t Fp8PairToHalf2(uint32_t pair) {
  constexpr __nv_fp8_interpretation_t kKind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kKind);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ inline float ScaleFactor(uint32_t e) {
  return __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(e)));
}

__device__ inline uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ inline uint32_t Byte(const uint4& v, int i) { return (Word(v, i / 4) >> (8 * (i % 4))) & 0xFFu; }

// c += a . b: a 16x16 (rows: output columns), b 16x8 (columns: group rows), f32 accumulation.
__device__ inline void Mma16816(const uint32_t (&a)[4], const uint32_t (&b)[2], float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The lane's view of a pass.
struct LaneOperands {
  const uint8_t* w;         // forward: the group's row 0 at the lane's first column;
                            // dgrad: the row of the lane's first column (local column c: + 8c rows)
  const uint8_t* w_scales;  // the same place in the group's scale matrix
  int64_t w_scale_row_bytes;
  const uint8_t* x;            // the x row of the lane's mma column g (clamped into the pass)
  const uint8_t* x_scales[2];  // scale rows of the lane's accumulator rows 2t, 2t+1, or null
  int64_t k, n;
  int valid_cols;  // local columns inside N: forward 0, 8 or 16; dgrad c < valid_cols
};

// What a lane reads for one MX block (32 deep) of its pass. w: forward, word q of row 8t + 4s
// + r at word (4s + r) * 4 + q; dgrad, word s of local column c at 2c + s. x: one word per
// step. Scales: byte c of w_scales is local column c's, x_scales those of rows 2t, 2t+1.
struct BlockLoads {
  uint32_t w[32];
  uint32_t x[kSteps];
  uint4 w_scales;
  uint32_t x_scales[2];
};

// --- the fast path --------------------------------------------------------------------------
// It computes sum * 2^(ex + ew - 254) as one rounding of the exact value: the factor
// 2^(ex - 127) * 2^(ew - 127) is exact while its exponent stays in f32's range [-149, 127],
// and the block's sum is that of exact products (f16 codes multiply exactly in f32; 32 of them
// stay below 2^37) accumulated in f32. Dequantize -> f32 matmul differs where a dequantized
// element or a product of two overflows f32 (then Inf - Inf is NaN there, or Inf * 0; Inf
// inputs get the scale 0xFE) or underflows: blocks whose scales reach those ranges take the
// exact path, so both backends agree on NaN and Inf. Normal data never does.
constexpr uint32_t kNeutralScale = 127;                 // 2^0: columns past N, rows past the pass
constexpr uint32_t kNeutral4 = kNeutralScale * 0x01010101u;
constexpr uint32_t kMaxSafeScale = 0xEF;                // 2^112 * 57344 (e5m2's max) < 2^128
constexpr uint32_t kMaxSafeScaleSum = 127 + 127 + 96;   // products below 2^(96 + 32)
constexpr uint32_t kMinSafeScaleSum = 127 + 127 - 149;  // factor at least 2^-149

__device__ inline uint32_t MaxByte(uint32_t v) {
  return max(max(v & 0xFFu, (v >> 8) & 0xFFu), max((v >> 16) & 0xFFu, v >> 24));
}

__device__ inline uint32_t MinByte(uint32_t v) {
  return min(min(v & 0xFFu, (v >> 8) & 0xFFu), min((v >> 16) & 0xFFu, v >> 24));
}

__device__ inline bool OutsideSafeScales(const BlockLoads& b) {
  const uint4 w = b.w_scales;
  const uint32_t w_max = MaxByte(__vmaxu4(__vmaxu4(w.x, w.y), __vmaxu4(w.z, w.w)));
  const uint32_t w_min = MinByte(__vminu4(__vminu4(w.x, w.y), __vminu4(w.z, w.w)));
  const uint32_t x_max = max(b.x_scales[0], b.x_scales[1]);
  const uint32_t x_min = min(b.x_scales[0], b.x_scales[1]);
  return w_max > kMaxSafeScale || x_max > kMaxSafeScale || w_max + x_max > kMaxSafeScaleSum ||
         w_min + x_min < kMinSafeScaleSum;
}

// --- loads ----------------------------------------------------------------------------------

// x's 4 bytes at row x, column k (K is a multiple of 4): zeros past K.
__device__ inline uint32_t LoadXWord(const uint8_t* x, int64_t k, int64_t k_end) {
  return k < k_end ? __ldg(reinterpret_cast<const uint32_t*>(x + k)) : 0u;
}

// Forward: the lane's 16 weight bytes of row k, zeros past K and N. kWide: N % 16 == 0, one
// aligned 16-byte load; else N % 16 == 8, two 8-byte halves.
template <bool kWide>
__device__ inline uint4 LoadWeightRow(const LaneOperands& l, int64_t k) {
  if (l.valid_cols == 0 || k >= l.k) return make_uint4(0, 0, 0, 0);
  const uint8_t* row = l.w + k * l.n;
  if (kWide) return __ldg(reinterpret_cast<const uint4*>(row));
  const uint2 lo = __ldg(reinterpret_cast<const uint2*>(row));
  const uint2 hi = l.valid_cols > 8 ? __ldg(reinterpret_cast<const uint2*>(row + 8)) : make_uint2(0, 0);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// Dgrad: local column c's 8 bytes of the MX block at kb (contraction kb + 8t ..), zeros past
// K and N. kWide: K % 8 == 0, one aligned 8-byte load; else two 4-byte words.
template <bool kWide>
__device__ inline uint2 LoadWeightColumn(const LaneOperands& l, int c, int64_t kb) {
  const int64_t k = kb + 8 * (threadIdx.x % 4);
  if (c >= l.valid_cols || k >= l.k) return make_uint2(0, 0);
  const uint8_t* p = l.w + 8 * c * l.k + k;
  if (kWide) return __ldg(reinterpret_cast<const uint2*>(p));
  return make_uint2(__ldg(reinterpret_cast<const uint32_t*>(p)), LoadXWord(p, 4, l.k - k));
}

template <bool kTransposed, bool kWide>
__device__ inline void LoadBlock(const LaneOperands& l, int64_t kb, BlockLoads& b) {
  const int t = threadIdx.x % 4;
  const int64_t block = kb / mxfp8::kBlockSize;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) b.x[s] = LoadXWord(l.x, kb + 8 * t + 4 * s, l.k);
  if constexpr (!kTransposed) {
#pragma unroll
    for (int row = 0; row < 8; ++row) {
      const uint4 v = LoadWeightRow<kWide>(l, kb + 8 * t + row);
      b.w[4 * row] = v.x, b.w[4 * row + 1] = v.y, b.w[4 * row + 2] = v.z, b.w[4 * row + 3] = v.w;
    }
    const uint8_t* scale_row = l.w_scales + block * l.w_scale_row_bytes;
    b.w_scales = l.valid_cols > 0 ? __ldg(reinterpret_cast<const uint4*>(scale_row))
                                  : make_uint4(kNeutral4, kNeutral4, kNeutral4, kNeutral4);
    if (l.valid_cols <= 8) b.w_scales.z = b.w_scales.w = kNeutral4;
  } else {
    uint32_t scales[4] = {};
#pragma unroll
    for (int c = 0; c < kLaneCols; ++c) {
      const uint2 v = LoadWeightColumn<kWide>(l, c, kb);
      b.w[2 * c] = v.x, b.w[2 * c + 1] = v.y;
      const uint32_t e = c < l.valid_cols ? __ldg(l.w_scales + 8 * c * l.w_scale_row_bytes + block)
                                          : kNeutralScale;
      scales[c / 4] |= e << (8 * (c % 4));
    }
    b.w_scales = make_uint4(scales[0], scales[1], scales[2], scales[3]);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) b.x_scales[i] = l.x_scales[i] ? __ldg(l.x_scales[i] + block) : kNeutralScale;
}

// Forward: asks L2 for the weights of the MX block at kb (the next one), lane l for row
// kb + l of the warp's 128 columns: no registers held, and the block's loads then wait for L2
// instead of DRAM (1.37x -> 1.48x BF16 on decode-zipf). Dgrad's 128 separate 32-byte row
// segments per block made it slower (0.72x), so it does not prefetch.
__device__ inline void PrefetchForwardBlock(const LaneOperands& l, int64_t kb) {
  const int lane = threadIdx.x % 32;
  const int64_t row = kb + lane;
  if (row < l.k) asm volatile("prefetch.global.L2 [%0];" ::"l"(l.w - kLaneCols * (lane / 4) + row * l.n));
}

// --- multiplies -----------------------------------------------------------------------------

// The A fragment of tile j, step s: rows g and g + 8 are local columns 2j and 2j + 1, k-slots
// as above. Forward: interleave the bytes of rows (8t + 4s + 0, + 1) and (+ 2, + 3) at the
// columns' bytes 2j, 2j + 1. Dgrad: each column's word already holds its 4 k-slots.
template <bool kTransposed, Fp8Format kRhs>
__device__ inline void WeightFragment(const BlockLoads& b, int j, int s, uint32_t (&a)[4]) {
  if constexpr (!kTransposed) {
    const uint32_t selector = j % 2 == 0 ? 0x5140u : 0x7362u;  // {r0.c, r1.c, r0.c+1, r1.c+1}
    const int q = j / 2;
    const uint32_t rows01 = __byte_perm(b.w[4 * (4 * s) + q], b.w[4 * (4 * s + 1) + q], selector);
    const uint32_t rows23 = __byte_perm(b.w[4 * (4 * s + 2) + q], b.w[4 * (4 * s + 3) + q], selector);
    a[0] = Fp8PairToHalf2<kRhs>(rows01 & 0xFFFFu);
    a[1] = Fp8PairToHalf2<kRhs>(rows01 >> 16);
    a[2] = Fp8PairToHalf2<kRhs>(rows23 & 0xFFFFu);
    a[3] = Fp8PairToHalf2<kRhs>(rows23 >> 16);
  } else {
    const uint32_t col0 = b.w[2 * (2 * j) + s], col1 = b.w[2 * (2 * j + 1) + s];
    a[0] = Fp8PairToHalf2<kRhs>(col0 & 0xFFFFu);
    a[1] = Fp8PairToHalf2<kRhs>(col1 & 0xFFFFu);
    a[2] = Fp8PairToHalf2<kRhs>(col0 >> 16);
    a[3] = Fp8PairToHalf2<kRhs>(col1 >> 16);
  }
}

// acc += this MX block's products (scales in the safe range). The mma's f32 sum of the block
// is scaled by its column's and group row's factors: c[i] is local column 2j + i / 2, row
// 2t + i % 2.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
__device__ inline void MultiplyBlock(const BlockLoads& b, float (&acc)[kTiles][4]) {
  uint32_t x_frag[kSteps][2];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    x_frag[s][0] = Fp8PairToHalf2<kLhs>(b.x[s] & 0xFFFFu);  // k-slots 2t, 2t+1
    x_frag[s][1] = Fp8PairToHalf2<kLhs>(b.x[s] >> 16);      // k-slots 2t+8, 2t+9
  }
  const float x_scale[2] = {ScaleFactor(b.x_scales[0]), ScaleFactor(b.x_scales[1])};
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      uint32_t a[4];
      WeightFragment<kTransposed, kRhs>(b, j, s, a);
      Mma16816(a, x_frag[s], c);
    }
    const float w_scale[2] = {ScaleFactor(Byte(b.w_scales, 2 * j)), ScaleFactor(Byte(b.w_scales, 2 * j + 1))};
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = fmaf(c[i], w_scale[i / 2] * x_scale[i % 2], acc[j][i]);
  }
}

// Local column c's weight code at contraction index k (0 past K and N).
template <bool kTransposed>
__device__ inline uint32_t WeightCode(const LaneOperands& l, int c, int64_t k) {
  if (c >= l.valid_cols || k >= l.k) return 0;
  return kTransposed ? __ldg(l.w + 8 * c * l.k + k) : __ldg(l.w + k * l.n + c);
}

// acc += the block's products, each of two dequantized f32 elements (the rare path).
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
__device__ void MultiplyBlockExactly(const RaggedMProblem& p, const RaggedMOperands& o,
                                     const Pass& pass, const LaneOperands& l, int64_t kb,
                                     const BlockLoads& b, float (&acc)[kTiles][4]) {
  const int t = threadIdx.x % 4;
  const uint8_t* x_rows[2];
  float x_scale[2], w_scale[kLaneCols];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    x_scale[i] = ScaleFactor(b.x_scales[i]);
    x_rows[i] = o.lhs + (pass.row_begin + MinI64(2 * t + i, pass.rows - 1)) * p.k;
  }
#pragma unroll
  for (int c = 0; c < kLaneCols; ++c) w_scale[c] = ScaleFactor(Byte(b.w_scales, c));
  for (int kk = 0; kk < mxfp8::kBlockSize && kb + kk < p.k; ++kk) {
    float x_value[2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
      x_value[i] = __fmul_rn(Fp8PairToFloat2<kLhs>(__ldg(x_rows[i] + kb + kk)).x, x_scale[i]);
#pragma unroll
    for (int c = 0; c < kLaneCols; ++c) {
      const float w_value = __fmul_rn(Fp8PairToFloat2<kRhs>(WeightCode<kTransposed>(l, c, kb + kk)).x, w_scale[c]);
#pragma unroll
      for (int i = 0; i < 2; ++i) acc[c / 2][2 * (c % 2) + i] = fmaf(x_value[i], w_value, acc[c / 2][2 * (c % 2) + i]);
    }
  }
}

// --- a pass ---------------------------------------------------------------------------------

// Per warp, per group row of the pass and column of the block: its sum over the warp's K, at
// the column's slot (ColumnSlot).
struct PartialSums {
  float sums[kWarps][kPassRows][kBlockCols];
};

// Where lane group g stores its local columns 4q .. 4q + 3 of a row, as one 16-byte store
// (against 4-byte ones: decode-zipf forward 0.158 -> 0.150 ms on an H100). Forward keeps the
// block's columns in order; dgrad's (g + 8c) are swizzled so that a warp reading 32
// consecutive columns touches 32 banks.
template <bool kTransposed>
__device__ inline int LaneSlot(int g, int q) {
  return kLaneCols * g + 4 * (kTransposed ? q ^ (g / 2) : q);
}

template <bool kTransposed>
__device__ inline int ColumnSlot(int column) {
  if constexpr (!kTransposed) return column;
  const int g = column % 8, c = column / 8;
  return LaneSlot<true>(g, c / 4) + c % 4;
}

// The block column (0..127) of local column c of lane group g.
template <bool kTransposed>
__device__ inline int BlockColumn(int g, int c) {
  return kTransposed ? g + 8 * c : kLaneCols * g + c;
}

template <bool kTransposed, bool kWide, Fp8Format kLhs, Fp8Format kRhs, typename O>
__device__ void RunPass(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                        PartialSums& partial) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kBlockCols;
  const int64_t first_col = col0 + BlockColumn<kTransposed>(g, 0);
  const int64_t cols_left = p.n - first_col;  // columns of N from the lane's first one on

  LaneOperands l;
  l.k = p.k;
  l.n = p.n;
  l.valid_cols = static_cast<int>(
      cols_left <= 0 ? 0 : MinI64(kLaneCols, kTransposed ? CeilDiv(cols_left, 8) : cols_left));
  l.w = o.rhs + pass.group * p.k * p.n + (kTransposed ? first_col * p.k : first_col);
  l.w_scale_row_bytes = mxfp8::RhsScaleRowBytes(p);
  l.w_scales = o.rhs_scales + pass.group * mxfp8::RhsGroupScaleBytes(p) +
               (kTransposed ? first_col * l.w_scale_row_bytes : first_col);
  l.x = o.lhs + (pass.row_begin + MinI64(g, pass.rows - 1)) * p.k;
  const int64_t x_scale_row_bytes = mxfp8::LhsScaleRowBytes(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 2 * t + i;
    const int64_t scale_row = r < pass.rows ? pass.lhs_scale_rows[r] : -1;
    l.x_scales[i] = scale_row >= 0 ? o.lhs_scales + scale_row * x_scale_row_bytes : nullptr;
  }

  // The warp's MX blocks of K: every kWarps-th one from its index on, so that the block's
  // warps read neighbouring MX blocks at about the same time: in dgrad, whole stretches of each
  // weight row (8 x 32 bytes) instead of 32-byte pieces a warp's share apart (decode dgrad
  // 0.228 -> 0.213 ms, forward 0.175 -> 0.165 ms on an H100, against contiguous shares).
  // (Loading the next block while multiplying this one needs 170 registers, so 8 warps per SM
  // instead of 16: slower, measured.)
  const int64_t blocks = CeilDiv(p.k, mxfp8::kBlockSize);
  float acc[kTiles][4] = {};
  for (int64_t block = warp; block < blocks; block += kWarps) {
    const int64_t kb = block * mxfp8::kBlockSize;
    if (!kTransposed && block + kWarps < blocks) PrefetchForwardBlock(l, kb + kWarps * mxfp8::kBlockSize);
    BlockLoads loads;
    LoadBlock<kTransposed, kWide>(l, kb, loads);
    if (__any_sync(0xffffffffu, OutsideSafeScales(loads))) {
      MultiplyBlockExactly<kTransposed, kLhs, kRhs>(p, o, pass, l, kb, loads, acc);
    } else {
      MultiplyBlock<kTransposed, kLhs, kRhs>(loads, acc);
    }
  }

  // Row 2t + i of local columns 4q .. 4q + 3: acc[2q][i], acc[2q][i + 2], acc[2q + 1][i], ..
#pragma unroll
  for (int q = 0; q < kTiles / 2; ++q)
#pragma unroll
    for (int i = 0; i < 2; ++i)
      *reinterpret_cast<float4*>(&partial.sums[warp][2 * t + i][LaneSlot<kTransposed>(g, q)]) =
          make_float4(acc[2 * q][i], acc[2 * q][i + 2], acc[2 * q + 1][i], acc[2 * q + 1][i + 2]);
  __syncthreads();
  O* out = static_cast<O*>(o.out);
  for (int e = threadIdx.x; e < pass.rows * kBlockCols; e += kThreads) {
    const int r = e / kBlockCols, c = e % kBlockCols;
    if (col0 + c >= p.n) continue;
    const int slot = ColumnSlot<kTransposed>(c);
    float sum = partial.sums[0][r][slot];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += partial.sums[w][r][slot];
    // A row of no lhs group is 0 whatever its codes hold.
    out[(pass.row_begin + r) * p.n + col0 + c] = FromFloat<O>(pass.lhs_scale_rows[r] >= 0 ? sum : 0.0f);
  }
}

template <typename O>
__device__ void ZeroRows(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass) {
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kBlockCols;
  const int64_t cols = MinI64(kBlockCols, p.n - col0);
  O* out = static_cast<O*>(o.out);
  for (int64_t t = threadIdx.x; t < pass.rows * cols; t += kThreads)
    out[(pass.row_begin + t / cols) * p.n + col0 + t % cols] = FromFloat<O>(0.0f);
}

template <bool kTransposed, bool kWide, Fp8Format kLhs, Fp8Format kRhs, typename O>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) Mxfp8RaggedMKernel(RaggedMProblem p,
                                                               RaggedMOperands o, int64_t slots) {
  __shared__ __align__(16) PartialSums partial;  // 16-byte stores (RunPass)
  __shared__ Pass pass;
  __shared__ bool has_work;
  for (int64_t slot = blockIdx.y; slot < slots; slot += gridDim.y) {
    __syncthreads();  // the previous slot is done with `pass` and `partial`
    if (threadIdx.x < 32) {
      const bool found = mxfp8_ragged_m::LocatePass(p, o.group_sizes, slot, &pass);
      __syncwarp();  // pass.row_begin and rows, written by one lane
      if (found && !pass.tail) mxfp8_ragged_m::LocateLhsScaleRows(p, o.lhs_group_sizes, &pass);
      if (threadIdx.x == 0) has_work = found;
    }
    __syncthreads();
    if (!has_work) continue;
    // `pass` stays in shared memory (read there) until the next slot's first barrier.
    if (pass.tail) {
      ZeroRows<O>(p, o, pass);
    } else {
      RunPass<kTransposed, kWide, kLhs, kRhs, O>(p, o, pass, partial);
    }
  }
}

// kWide: the weights' contiguous dimension (N forward, K dgrad) allows the wide loads.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
  const int64_t slots = mxfp8::MaxSumOfTiles(p.rows, p.num_groups, kPassRows) + 1;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kBlockCols)),
                  static_cast<unsigned>(MinI64(kMaxGridY, slots)));
  const bool wide = kTransposed ? p.k % 8 == 0 : p.n % 16 == 0;
  if (wide) {
    Mxfp8RaggedMKernel<kTransposed, true, kLhs, kRhs, O><<<grid, kThreads, 0, stream>>>(p, o, slots);
  } else {
    Mxfp8RaggedMKernel<kTransposed, false, kLhs, kRhs, O><<<grid, kThreads, 0, stream>>>(p, o, slots);
  }
  return cudaGetLastError();
}

template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
cudaError_t LaunchWithFormats(const RaggedMProblem& p, const RaggedMOperands& o,
                              cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kF32: return Launch<kTransposed, kLhs, kRhs, float>(p, o, stream);
    case ElementType::kBF16: return Launch<kTransposed, kLhs, kRhs, __nv_bfloat16>(p, o, stream);
    case ElementType::kF16: return Launch<kTransposed, kLhs, kRhs, __half>(p, o, stream);
  }
  return cudaErrorInvalidValue;
}

template <bool kTransposed, Fp8Format kLhs>
cudaError_t LaunchWithLhsFormat(const RaggedMProblem& p, const RaggedMOperands& o,
                                cudaStream_t stream) {
  return p.rhs_format == Fp8Format::kE4M3
             ? LaunchWithFormats<kTransposed, kLhs, Fp8Format::kE4M3>(p, o, stream)
             : LaunchWithFormats<kTransposed, kLhs, Fp8Format::kE5M2>(p, o, stream);
}

template <bool kTransposed>
cudaError_t LaunchWithOrientation(const RaggedMProblem& p, const RaggedMOperands& o,
                                  cudaStream_t stream) {
  return p.lhs_format == Fp8Format::kE4M3
             ? LaunchWithLhsFormat<kTransposed, Fp8Format::kE4M3>(p, o, stream)
             : LaunchWithLhsFormat<kTransposed, Fp8Format::kE5M2>(p, o, stream);
}

bool Aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

cudaError_t LaunchMxfp8RaggedM(const RaggedMProblem& p, const RaggedMOperands& o,
                               cudaStream_t stream) {
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  if (p.k % 4 != 0 || p.n % 8 != 0 || !Aligned(o.lhs, 4) || !Aligned(o.rhs, 16) ||
      !Aligned(o.rhs_scales, 16))
    return cudaErrorInvalidValue;
  return p.rhs_transposed ? LaunchWithOrientation<true>(p, o, stream)
                          : LaunchWithOrientation<false>(p, o, stream);
}

}  // namespace jgg::cuda
