// Tensor cores on the fp8 codes: out^T = W^T . x^T as mma.sync m16n8k16 (f16 in, f32
// accumulation), the weights as the 16-row operand (16 output columns) and up to 8 group rows
// as the 8-column one, so a pass of 8 rows costs one mma per 16x16 weights instead of 8 FMAs
// per weight. fp8 -> f16 is exact (every e4m3 and e5m2 value is an f16); each 32-deep MX block
// is one pair of mmas whose f32 sum is then multiplied by its two power-of-two scales (exact)
// and added to the accumulator, so the numerics are those of the dequantized product summed in
// f32 (in another order).
//
// Work: a block computes up to 8 rows of one group for 128 output columns; its 8 warps split K
// in whole MX blocks and their sums are added in a fixed order. Each lane streams 16
// consecutive weight columns (16-byte loads: a warp reads whole 128-byte rows) of 8 rows per MX
// block, with the next block's loads in flight while the current one is multiplied. The
// order of K inside a 16-deep step is free as long as both operands use it: lane (g, t) takes
// the rows 4t..4t+3 of the step as its k-slots {2t, 2t+1, 2t+8, 2t+9}, so its slice of x is
// one 4-byte word, and the weight bytes become mma fragments by byte permutes. Blocks are
// "slots": every group's passes of 8 rows in group order (located by a warp scan of the group
// sizes, so no schedule in HBM), then one slot zeroing the rows of no group.
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedMOperands;
using mxfp8::RaggedMProblem;

constexpr int kWarps = 8;                 // a block's warps split K
constexpr int kThreads = 32 * kWarps;
constexpr int kLaneCols = 16;             // weight columns per lane: one 16-byte load per row
constexpr int kBlockCols = 8 * kLaneCols; // output columns per block (8 lanes of a k-slot set)
constexpr int kTiles = kLaneCols / 2;     // mma tiles of 16 columns per warp (2 per lane each)
constexpr int kPassRows = 8;              // group rows per pass: the mma's 8-wide operand
constexpr int kStepK = 16;                // mma depth
constexpr int kSteps = mxfp8::kBlockSize / kStepK;  // mma steps per MX block
constexpr int kMinBlocksPerSm = 2;        // 16 warps: 64 KB of weights in flight per SM
constexpr int64_t kMaxGridY = 65535;      // more slots loop

// A block's work: up to kPassRows rows of one group, or (tail) the rows no group covers.
struct Pass {
  int64_t group;
  int64_t row_begin;  // first output (and lhs) row
  int64_t rows;
  bool tail;
  int64_t lhs_scale_rows[kPassRows];  // of each lhs row: its scale row, -1 in no lhs group
};

__device__ inline int64_t WarpInclusiveSum(int64_t v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int64_t up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  return v;
}

// Rows [begin, begin + rows) of the clamped group sizes (ragged_layout.h) of the 32 groups
// starting at `base`, one per lane, after `before` rows of the earlier groups; `before`
// advances past them.
struct GroupRows {
  int64_t begin, rows;
};

__device__ inline GroupRows NextGroupRows(const int32_t* sizes, int64_t num_groups,
                                          int64_t extent, int64_t base, int64_t* before) {
  const int64_t g = base + threadIdx.x % 32;
  const int64_t size = g < num_groups ? ClampedSize(sizes[g]) : 0;
  const int64_t incl = WarpInclusiveSum(size);
  const int64_t begin = MinI64(extent, *before + incl - size);
  const GroupRows r{begin, MinI64(extent, *before + incl) - begin};
  *before += __shfl_sync(0xffffffffu, incl, 31);
  return r;
}

// Warp 0: the pass of `slot` (all but its lhs scale rows), written to *pass by one lane;
// false when the slot has no work.
__device__ bool LocatePass(const RaggedMProblem& p, const int32_t* sizes, int64_t slot,
                           Pass* pass) {
  const int lane = threadIdx.x % 32;
  int64_t rows_before = 0, passes_before = 0;
  for (int64_t base = 0; base < p.num_groups; base += 32) {
    const GroupRows group = NextGroupRows(sizes, p.num_groups, p.rows, base, &rows_before);
    const int64_t passes = CeilDiv(group.rows, kPassRows);
    const int64_t passes_incl = WarpInclusiveSum(passes);
    const int64_t first_pass = passes_before + passes_incl - passes;
    const unsigned hit = __ballot_sync(0xffffffffu, slot >= first_pass && slot < first_pass + passes);
    if (hit != 0) {
      if (lane == __ffs(hit) - 1) {
        const int64_t in_group = (slot - first_pass) * kPassRows;
        pass->group = base + lane;
        pass->row_begin = group.begin + in_group;
        pass->rows = MinI64(kPassRows, group.rows - in_group);
        pass->tail = false;
      }
      return true;
    }
    passes_before += __shfl_sync(0xffffffffu, passes_incl, 31);
  }
  if (slot != passes_before) return false;
  const int64_t covered = MinI64(p.rows, rows_before);
  if (lane == 0) {
    pass->group = p.num_groups;
    pass->row_begin = covered;
    pass->rows = p.rows - covered;
    pass->tail = true;
  }
  return covered < p.rows;
}

// Warp 0: pass->lhs_scale_rows. A grouped lhs's groups have scale matrices of
// 128 * ceil(rows / 128) rows, one after another (mxfp8_layout.h).
__device__ void LocateLhsScaleRows(const RaggedMProblem& p, const int32_t* lhs_sizes,
                                   Pass* pass) {
  const int lane = threadIdx.x % 32;
  if (!p.lhs_grouped) {
    if (lane < kPassRows) pass->lhs_scale_rows[lane] = pass->row_begin + lane;
    return;
  }
  if (lane < kPassRows) pass->lhs_scale_rows[lane] = -1;
  __syncwarp();
  int64_t rows_before = 0, scale_rows_before = 0;
  for (int64_t base = 0; base < p.lhs_num_groups; base += 32) {
    const GroupRows group = NextGroupRows(lhs_sizes, p.lhs_num_groups, p.rows, base, &rows_before);
    const int64_t scale_rows = CeilDiv(group.rows, mxfp8::kScaleTileRows) * mxfp8::kScaleTileRows;
    const int64_t scale_incl = WarpInclusiveSum(scale_rows);
    for (int r = 0; r < pass->rows && r < kPassRows; ++r) {
      const int64_t row = pass->row_begin + r;
      if (row >= group.begin && row < group.begin + group.rows)
        pass->lhs_scale_rows[r] = scale_rows_before + scale_incl - scale_rows + row - group.begin;
    }
    scale_rows_before += __shfl_sync(0xffffffffu, scale_incl, 31);
  }
}

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

// c += a . b: a 16x16 (rows: output columns), b 16x8 (columns: group rows), f32 accumulation.
__device__ inline void Mma16816(const uint32_t (&a)[4], const uint32_t (&b)[2], float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// What a lane reads for one MX block (32 rows of K) of its pass: per mma step, 4 weight rows of
// its 16 columns and one x word per group row; the block's scales of its columns and of its
// two group rows.
struct BlockLoads {
  uint4 w[kSteps][4];
  uint32_t x[kSteps];
  uint4 w_scales;
  uint32_t x_scales[2];
};

// The fast path computes sum * 2^(ex + ew - 254) as one rounding of the exact value: the
// factor 2^(ex - 127) * 2^(ew - 127) is exact while its exponent stays in f32's range
// [-149, 127], and the block's sum is exact (products of f16 codes are exact in f32, and 32 of
// them, below 2^37, add within f32 accumulation error). Dequantize -> f32 matmul differs
// where a dequantized element or a product of two overflows f32 (then Inf - Inf is NaN there,
// or Inf * 0: Inf inputs get the scale 0xFE) or underflows: blocks whose scales reach those
// ranges take the exact path, so both backends agree on NaN and Inf. Normal data never does.
constexpr uint32_t kNeutralScale = 127;         // 2^0: lanes past N, rows past the pass
constexpr uint32_t kMaxSafeScale = 0xEF;        // 2^112 * 57344 (e5m2's max) < 2^128
constexpr uint32_t kMaxSafeScaleSum = 127 + 127 + 96;  // products below 2^(96 + 32)
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

// The lane's view of a pass: where its weights, x row and x scale rows are.
struct LaneOperands {
  const uint8_t* w;         // group's weights at row 0, the lane's first column
  const uint8_t* w_scales;  // group's scale matrix at row 0, the lane's first column
  int64_t w_scale_row_bytes;
  const uint8_t* x;         // the x row of the lane's mma column (clamped into the pass)
  const uint8_t* x_scales[2];  // scale rows of the lane's two accumulator columns, or null
  int64_t k, n;
  bool has_cols;            // the lane's columns are inside N (all 16 or the first 8 or none)
  bool second_half;         // its second 8 columns are inside N
};

// The lane's 16 weight bytes of row k: zeros past K and past N.
template <bool kWide>
__device__ inline uint4 LoadWeightRow(const LaneOperands& l, int64_t k) {
  if (!l.has_cols || k >= l.k) return make_uint4(0, 0, 0, 0);
  const uint8_t* row = l.w + k * l.n;
  if (kWide) return __ldg(reinterpret_cast<const uint4*>(row));
  // N % 16 == 8: two 8-byte halves
  const uint2 lo = __ldg(reinterpret_cast<const uint2*>(row));
  const uint2 hi = l.second_half ? __ldg(reinterpret_cast<const uint2*>(row + 8)) : make_uint2(0, 0);
  return make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// x's 4 bytes at row x, column k (K is a multiple of 4): zeros past K.
__device__ inline uint32_t LoadXWord(const uint8_t* x, int64_t k, int64_t k_end) {
  return k < k_end ? __ldg(reinterpret_cast<const uint32_t*>(x + k)) : 0u;
}

// Loads of the MX block starting at row kb.
template <bool kWide>
__device__ inline void LoadBlock(const LaneOperands& l, int64_t kb, BlockLoads& b) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int64_t k0 = kb + kStepK * s + 4 * t;
#pragma unroll
    for (int r = 0; r < 4; ++r) b.w[s][r] = LoadWeightRow<kWide>(l, k0 + r);
    b.x[s] = LoadXWord(l.x, k0, l.k);
  }
  const uint8_t* scale_row = l.w_scales + (kb / mxfp8::kBlockSize) * l.w_scale_row_bytes;
  constexpr uint32_t kNeutral4 = kNeutralScale * 0x01010101u;
  b.w_scales = l.has_cols ? __ldg(reinterpret_cast<const uint4*>(scale_row))
                          : make_uint4(kNeutral4, kNeutral4, kNeutral4, kNeutral4);
  if (!kWide && !l.second_half) b.w_scales.z = b.w_scales.w = kNeutral4;
#pragma unroll
  for (int i = 0; i < 2; ++i)
    b.x_scales[i] = l.x_scales[i] ? __ldg(l.x_scales[i] + kb / mxfp8::kBlockSize) : kNeutralScale;
}

__device__ inline uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// acc += this MX block's products (scales in the safe range, below). Tile j of the lane covers
// its columns 2j (mma row g) and 2j + 1 (row g + 8): bytes 2j, 2j + 1 of each weight row it
// loaded; the mma's f32 sum of the block is scaled by the column's and the group row's factors.
template <Fp8Format kLhs, Fp8Format kRhs>
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
    // Interleaves the bytes of two rows' word: {r0.c, r1.c, r0.c+1, r1.c+1} for c = 2j mod 4.
    const uint32_t selector = j % 2 == 0 ? 0x5140u : 0x7362u;
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const uint32_t rows01 = __byte_perm(Word(b.w[s][0], j / 2), Word(b.w[s][1], j / 2), selector);
      const uint32_t rows23 = __byte_perm(Word(b.w[s][2], j / 2), Word(b.w[s][3], j / 2), selector);
      const uint32_t a[4] = {Fp8PairToHalf2<kRhs>(rows01 & 0xFFFFu), Fp8PairToHalf2<kRhs>(rows01 >> 16),
                             Fp8PairToHalf2<kRhs>(rows23 & 0xFFFFu), Fp8PairToHalf2<kRhs>(rows23 >> 16)};
      Mma16816(a, x_frag[s], c);
    }
    const uint32_t scale_word = Word(b.w_scales, j / 2);
    const float w_scale[2] = {ScaleFactor((scale_word >> (16 * (j % 2))) & 0xFFu),
                              ScaleFactor((scale_word >> (16 * (j % 2) + 8)) & 0xFFu)};
    // c[i]: column 2j + i / 2, group row 2t + i % 2.
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = fmaf(c[i], w_scale[i / 2] * x_scale[i % 2], acc[j][i]);
  }
}

// acc += the block's products, each of two dequantized f32 elements (the rare path).
template <Fp8Format kLhs, Fp8Format kRhs, bool kWide>
__device__ void MultiplyBlockExactly(const RaggedMProblem& p, const RaggedMOperands& o,
                                     const Pass& pass, const LaneOperands& l, int64_t kb,
                                     const BlockLoads& b, float (&acc)[kTiles][4]) {
  const int t = threadIdx.x % 4;
  float x_scale[2], w_scale[kLaneCols];
  const uint8_t* x_rows[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    x_scale[i] = ScaleFactor(b.x_scales[i]);
    x_rows[i] = o.lhs + (pass.row_begin + MinI64(2 * t + i, pass.rows - 1)) * p.k;
  }
#pragma unroll
  for (int c = 0; c < kLaneCols; ++c) w_scale[c] = ScaleFactor((Word(b.w_scales, c / 4) >> (8 * (c % 4))) & 0xFFu);
  for (int k4 = 0; k4 < mxfp8::kBlockSize; k4 += 4) {
    const uint32_t x_words[2] = {LoadXWord(x_rows[0], kb + k4, p.k), LoadXWord(x_rows[1], kb + k4, p.k)};
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint4 w = LoadWeightRow<kWide>(l, kb + k4 + kk);
      float x_value[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        x_value[i] = __fmul_rn(Fp8PairToFloat2<kLhs>((x_words[i] >> (8 * kk)) & 0xFFu).x, x_scale[i]);
#pragma unroll
      for (int c = 0; c < kLaneCols; c += 2) {
        const float2 codes = Fp8PairToFloat2<kRhs>((Word(w, c / 4) >> (8 * (c % 4))) & 0xFFFFu);
        const float w_value[2] = {__fmul_rn(codes.x, w_scale[c]), __fmul_rn(codes.y, w_scale[c + 1])};
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[c / 2][i] = fmaf(x_value[i % 2], w_value[i / 2], acc[c / 2][i]);
      }
    }
  }
}

// Per warp, per group row of the pass and column of the block: its sum over the warp's K.
struct PartialSums {
  float sums[kWarps][kPassRows][kBlockCols];
};

template <Fp8Format kLhs, Fp8Format kRhs, bool kWide, typename O>
__device__ void RunPass(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                        PartialSums& partial) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kBlockCols;
  const int64_t lane_col = col0 + g * kLaneCols;

  LaneOperands l;
  l.k = p.k;
  l.n = p.n;
  l.has_cols = lane_col < p.n;
  l.second_half = lane_col + kLaneCols / 2 < p.n;
  l.w = o.rhs + pass.group * p.k * p.n + lane_col;
  l.w_scales = o.rhs_scales + pass.group * mxfp8::RhsGroupScaleBytes(p) + lane_col;
  l.w_scale_row_bytes = mxfp8::RhsScaleRowBytes(p);
  l.x = o.lhs + (pass.row_begin + MinI64(g, pass.rows - 1)) * p.k;
  const int64_t x_scale_row_bytes = mxfp8::LhsScaleRowBytes(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = 2 * t + i;
    const int64_t scale_row = r < pass.rows ? pass.lhs_scale_rows[r] : -1;
    l.x_scales[i] = scale_row >= 0 ? o.lhs_scales + scale_row * x_scale_row_bytes : nullptr;
  }

  // The warp's MX blocks of K, a contiguous share. (Loading the next block while multiplying
  // this one needs 170 registers, so 8 warps per SM instead of 16: slower, measured.)
  const int64_t blocks = CeilDiv(p.k, mxfp8::kBlockSize), per_warp = CeilDiv(blocks, kWarps);
  const int64_t first = MinI64(blocks, warp * per_warp), last = MinI64(blocks, first + per_warp);
  float acc[kTiles][4] = {};
  for (int64_t block = first; block < last; ++block) {
    const int64_t kb = block * mxfp8::kBlockSize;
    BlockLoads loads;
    LoadBlock<kWide>(l, kb, loads);
    if (__any_sync(0xffffffffu, OutsideSafeScales(loads))) {
      MultiplyBlockExactly<kLhs, kRhs, kWide>(p, o, pass, l, kb, loads, acc);
    } else {
      MultiplyBlock<kLhs, kRhs>(loads, acc);
    }
  }

#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      partial.sums[warp][2 * t + i % 2][g * kLaneCols + 2 * j + i / 2] = acc[j][i];
  __syncthreads();
  O* out = static_cast<O*>(o.out);
  for (int e = threadIdx.x; e < pass.rows * kBlockCols; e += kThreads) {
    const int r = e / kBlockCols, c = e % kBlockCols;
    if (col0 + c >= p.n) continue;
    float sum = partial.sums[0][r][c];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += partial.sums[w][r][c];
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

template <Fp8Format kLhs, Fp8Format kRhs, bool kWide, typename O>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm) Mxfp8RaggedMKernel(RaggedMProblem p,
                                                               RaggedMOperands o, int64_t slots) {
  __shared__ PartialSums partial;
  __shared__ Pass pass;
  __shared__ bool has_work;
  for (int64_t slot = blockIdx.y; slot < slots; slot += gridDim.y) {
    __syncthreads();  // the previous slot is done with `pass` and `partial`
    if (threadIdx.x < 32) {
      const bool found = LocatePass(p, o.group_sizes, slot, &pass);
      __syncwarp();  // pass.row_begin and rows, written by one lane
      if (found && !pass.tail) LocateLhsScaleRows(p, o.lhs_group_sizes, &pass);
      if (threadIdx.x == 0) has_work = found;
    }
    __syncthreads();
    if (!has_work) continue;
    // `pass` stays in shared memory (read there) until the next slot's first barrier.
    if (pass.tail) {
      ZeroRows<O>(p, o, pass);
    } else {
      RunPass<kLhs, kRhs, kWide, O>(p, o, pass, partial);
    }
  }
}

// kWide: N a multiple of 16, so every lane's 16 columns are one aligned 16-byte load per row.
template <Fp8Format kLhs, Fp8Format kRhs, typename O>
cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
  const int64_t slots = mxfp8::MaxSumOfTiles(p.rows, p.num_groups, kPassRows) + 1;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kBlockCols)),
                  static_cast<unsigned>(MinI64(kMaxGridY, slots)));
  if (p.n % 16 == 0) {
    Mxfp8RaggedMKernel<kLhs, kRhs, true, O><<<grid, kThreads, 0, stream>>>(p, o, slots);
  } else {
    Mxfp8RaggedMKernel<kLhs, kRhs, false, O><<<grid, kThreads, 0, stream>>>(p, o, slots);
  }
  return cudaGetLastError();
}

template <Fp8Format kLhs, Fp8Format kRhs>
cudaError_t LaunchWithFormats(const RaggedMProblem& p, const RaggedMOperands& o,
                              cudaStream_t stream) {
  switch (p.out_type) {
    case ElementType::kF32: return Launch<kLhs, kRhs, float>(p, o, stream);
    case ElementType::kBF16: return Launch<kLhs, kRhs, __nv_bfloat16>(p, o, stream);
    case ElementType::kF16: return Launch<kLhs, kRhs, __half>(p, o, stream);
  }
  return cudaErrorInvalidValue;
}

template <Fp8Format kLhs>
cudaError_t LaunchWithLhsFormat(const RaggedMProblem& p, const RaggedMOperands& o,
                                cudaStream_t stream) {
  return p.rhs_format == Fp8Format::kE4M3 ? LaunchWithFormats<kLhs, Fp8Format::kE4M3>(p, o, stream)
                                          : LaunchWithFormats<kLhs, Fp8Format::kE5M2>(p, o, stream);
}

bool Aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

cudaError_t LaunchMxfp8RaggedM(const RaggedMProblem& p, const RaggedMOperands& o,
                               cudaStream_t stream) {
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  if (p.k % 4 != 0 || p.n % 8 != 0 || !Aligned(o.lhs, 4) || !Aligned(o.rhs, 16) ||
      !Aligned(o.rhs_scales, 16))
    return cudaErrorInvalidValue;
  return p.lhs_format == Fp8Format::kE4M3
             ? LaunchWithLhsFormat<Fp8Format::kE4M3>(p, o, stream)
             : LaunchWithLhsFormat<Fp8Format::kE5M2>(p, o, stream);
}

}  // namespace jgg::cuda
