// Tensor cores on the fp8 codes: out^T = W^T . x^T as mma.sync m16n8k16 (f16 in, f32
// accumulation), the weights as the 16-row operand (16 output columns) and up to 8 group rows
// as the 8-wide one, so a pass of 8 rows costs one mma per 16x16 weights instead of 8 FMAs
// per weight. fp8 -> f16 is exact (every e4m3 and e5m2 value is an f16); each 32-deep MX block
// is one pair of mmas whose f32 sum is multiplied by its two power-of-two scales and added to
// the accumulator (see "the fast path" below for why that is the dequantized product).
//
// Work: a block computes one slot (mxfp8_ragged_m_passes.cuh): the 8R rows of a pass of R row
// tiles (R = 1, 2 or 4; the forward's at most 2) for 128 / R output columns, R mmas per weight
// fragment; its warps (8 forward, 4 dgrad) take every 8th (4th) MX block of K each, and their
// sums are added in a fixed order.
// The order of K inside a 16-deep step is free as long as both operands use it: lane (g, t)
// takes the contraction indices 8t + 4s + {0..3} of MX-block step s as its k-slots {2t, 2t+1,
// 2t+8, 2t+9}, so its slice of each x row is one 4-byte word per step. Each lane owns 16 / R
// output columns ("local" columns c = 2j + i/2 of its accumulators acc[h][j][i], j the column
// tile, h the row tile):
//   forward (rhs [G, K, N], colwise): columns (16 / R)g + c, consecutive, so a weight row is
//     one 16-byte (R = 2: 8-byte) load per lane (a warp reads whole 128-byte (64-byte) rows),
//     its 8 rows per MX block interleaved into fragments by byte permutes;
//   dgrad (rhs_transposed: rhs [G, N, K], rowwise): columns g + 8c, whose rows hold the
//     contraction, so each is one 8-byte load per MX block that already is two fragments.
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <cstring>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/device_info.h"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_dispatch.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_passes.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_wgmma.h"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedMOperands;
using mxfp8::RaggedMProblem;
using mxfp8_ragged_m::kTileRows;
using mxfp8_ragged_m::Pass;

constexpr int kBlockCols = 128;           // output columns per block: those of one pass of 1 row tile
constexpr int kStepK = 16;                // mma depth
constexpr int kSteps = mxfp8::kBlockSize / kStepK;  // mma steps per MX block
constexpr int kWarpsPerSm = 16;           // 64 KB of weights in flight per SM

// A block's warps split K. Dgrad's blocks are of 4 warps, so that its slot lookup and
// partial-sum reduction, done while the block's other warps wait, hold half as many warps:
// H200 (2026-11-30), decode-zipf dgrad 0.127 -> 0.115-0.116 ms, decode 0.146 -> 0.138-0.139;
// the forward lost 4-6% on decode with 4 (2 and 1 warps: 10-60% slower in both directions).
template <bool kTransposed>
constexpr int kWarps = kTransposed ? 4 : 8;
template <bool kTransposed>
constexpr int kThreads = 32 * kWarps<kTransposed>;
template <bool kTransposed>
constexpr int kMinBlocksPerSm = kWarpsPerSm / kWarps<kTransposed>;

// What a slot of a pass of kRowTiles row tiles computes: 8 kRowTiles rows for kCols columns,
// the columns of lane group g (lanes 4g .. 4g + 3) being kLaneCols of them.
template <int kRowTiles>
struct Slot {
  static constexpr int kRows = kTileRows * kRowTiles;
  static constexpr int kLaneCols = 16 / kRowTiles;
  static constexpr int kCols = 8 * kLaneCols;        // kBlockCols / kRowTiles
  static constexpr int kColTiles = kLaneCols / 2;    // mma tiles of 16 columns, 2 per lane
  static constexpr int kLaneWords = kLaneCols / 4;   // words of a lane's bytes of a weight row
};

// Two fp8 codes (the low 16 bits of `pair`, first lowest) as an f16x2 register, exactly.
template <Fp8Format kFormat>
__device__ inline uint32_t Fp8PairToHalf2(uint32_t pair) {
  constexpr __nv_fp8_interpretation_t kKind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kKind);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Scale byte i of `word` at an f32 exponent's place (e << 23): the fast path's factors are
// built from these by integer adds (FastFactor).
__device__ inline uint32_t ScaleExponentBits(uint32_t word, int i) {
  return (i < 3 ? word << (23 - 8 * i) : word >> 1) & 0x7F800000u;
}

__device__ inline float ScaleFactor(uint32_t e) {
  return __uint_as_float(mxfp8::ScaleBits(static_cast<uint8_t>(e)));
}

template <int kWords>
__device__ inline uint32_t Byte(const uint32_t (&words)[kWords], int i) {
  return (words[i / 4] >> (8 * (i % 4))) & 0xFFu;
}

// c += a . b: a 16x16 (rows: output columns), b 16x8 (columns: group rows), f32 accumulation.
__device__ inline void Mma16816(const uint32_t (&a)[4], const uint32_t (&b)[2], float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The lane's view of a slot.
template <int kRowTiles>
struct LaneOperands {
  const uint8_t* w;         // forward: the group's row 0 at the lane's first column;
                            // dgrad: the row of the lane's first column (local column c: + 8c rows)
  const uint8_t* w_scales;  // the same place in the group's scale matrix
  int64_t w_scale_row_bytes;
  const uint8_t* x[kRowTiles];  // of row tile h: the x row of the lane's mma column g (clamped
                                // into the pass)
  // The lhs scale rows of the lane's rows 8h + 2t + i. One row tile: 2 pointers (null: no lhs
  // group). More: read for each MX block from the pass in shared memory (volatile: not held in
  // registers), as byte offsets into `lhs_scales`, since 2 x 4 pointers made ptxas spill (and
  // so did offsets for one row tile).
  const uint8_t* x_scale_rows[2];
  const uint8_t* lhs_scales;
  const volatile int64_t* x_scale_offsets;
  int64_t k, n;
  int valid_cols;  // local columns inside N: forward 0, 8 or 16; dgrad c < valid_cols
};

// What a lane reads for one MX block (32 deep) of its slot. w: forward, word q of row 8t + 4s
// + r at word (4s + r) * kLaneWords + q; dgrad, word s of local column c at 2c + s. x: one word
// per row tile and step. Scales: byte c of w_scales is local column c's, x_scales[h] those of
// row tile h's rows 2t, 2t+1.
template <int kRowTiles>
struct BlockLoads {
  using S = Slot<kRowTiles>;
  uint32_t w[2 * S::kLaneCols];
  uint32_t x[kRowTiles][kSteps];
  uint32_t w_scales[S::kLaneWords];
  uint32_t x_scales[kRowTiles][2];
};

// --- the fast path --------------------------------------------------------------------------
// It computes sum * 2^(ex + ew - 254) as one rounding of the exact value: the factor
// 2^(ex - 127) * 2^(ew - 127) is exact while it is an f32, and the block's sum is that of exact
// products (f16 codes multiply exactly in f32; 32 of them stay below 2^37) accumulated in f32.
// Dequantize -> f32 matmul differs where a dequantized element or a product of two overflows
// f32 (then Inf - Inf is NaN there, or Inf * 0; Inf inputs get the scale 0xFE) or underflows:
// blocks whose scales reach those ranges take the exact path, so both backends agree on NaN
// and Inf. The fast path also keeps the factor a normal f32, whose bits are then
// (ex + ew - 127) << 23: one integer add instead of two factors and a multiply. Normal data
// never leaves it.
constexpr uint32_t kNeutralScale = 127;                 // 2^0: columns past N, rows past the pass
constexpr uint32_t kNeutral4 = kNeutralScale * 0x01010101u;
constexpr uint32_t kMaxSafeScale = 0xEF;                // 2^112 * 57344 (e5m2's max) < 2^128
constexpr uint32_t kMaxSafeScaleSum = 127 + 127 + 96;   // products below 2^(96 + 32)
constexpr uint32_t kMinSafeScaleSum = 127 + 127 - 126;  // factor at least 2^-126 (normal)

// The factor 2^(ew + ex - 254) from ScaleExponentBits of both scales (sum inside the range).
__device__ inline float FastFactor(uint32_t w_bits, uint32_t x_bits) {
  return __uint_as_float(w_bits + x_bits - (kNeutralScale << 23));
}

__device__ inline uint32_t MaxByte(uint32_t v) {
  return max(max(v & 0xFFu, (v >> 8) & 0xFFu), max((v >> 16) & 0xFFu, v >> 24));
}

__device__ inline uint32_t MinByte(uint32_t v) {
  return min(min(v & 0xFFu, (v >> 8) & 0xFFu), min((v >> 16) & 0xFFu, v >> 24));
}

// Whether any lane of the warp has a block outside the fast path's range (the same answer in
// every lane). A lane group's 4 lanes hold the same weight scales, so lane t looks at word
// t % kLaneWords of them, against the largest and smallest row scale of the warp (every lane
// group has the same rows): the answer of each lane checking all of its own, for a few
// instructions a lane where reducing 4 words byte by byte cost ~50 (Hopper has no byte-wise
// min and max).
template <int kRowTiles>
__device__ inline bool UnsafeScales(const BlockLoads<kRowTiles>& b) {
  constexpr int kWords = Slot<kRowTiles>::kLaneWords;
  const int mine = threadIdx.x % 4 % kWords;
  uint32_t w = b.w_scales[0];  // w_scales[mine] by selects: an index would put b on the stack
#pragma unroll
  for (int i = 1; i < kWords; ++i) w = mine == i ? b.w_scales[i] : w;
  const uint32_t w_max = MaxByte(w), w_min = MinByte(w);
  uint32_t x_max = b.x_scales[0][0], x_min = b.x_scales[0][0];
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
    for (int i = 0; i < 2; ++i) x_max = max(x_max, b.x_scales[h][i]), x_min = min(x_min, b.x_scales[h][i]);
  x_max = __reduce_max_sync(0xffffffffu, x_max);
  x_min = __reduce_min_sync(0xffffffffu, x_min);
  return __any_sync(0xffffffffu, w_max > kMaxSafeScale || x_max > kMaxSafeScale ||
                                     w_max + x_max > kMaxSafeScaleSum ||
                                     w_min + x_min < kMinSafeScaleSum);
}

// --- loads ----------------------------------------------------------------------------------

// x's 4 bytes at row x, column k (K is a multiple of 4): zeros past K.
__device__ inline uint32_t LoadXWord(const uint8_t* x, int64_t k, int64_t k_end) {
  return k < k_end ? __ldg(reinterpret_cast<const uint32_t*>(x + k)) : 0u;
}

// The 4 (kWords) or 2 words at p (aligned to their size), read at once.
template <int kWords>
__device__ inline void LoadWords(const uint8_t* p, uint32_t* words) {
  static_assert(kWords == 4 || kWords == 2);
  if constexpr (kWords == 4) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
  } else {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    words[0] = v.x, words[1] = v.y;
  }
}

// p + i * stride for 32-bit i and stride: one wide multiply-add (IMAD.WIDE.U32) where 64-bit
// operands cost a multiply of three instructions and, short of registers, reloads of the
// kernel parameters they derive from (the forward's K loop had ~12 instructions per row).
__device__ inline const uint8_t* Advance(const uint8_t* p, uint32_t i, uint32_t stride) {
  return p + static_cast<uint64_t>(i) * stride;
}

// Forward: the lane's kLaneCols bytes of the 8 weight rows kb + 8t .. kb + 8t + 7 into
// words[kLaneWords * row ..], zeros past K and N; kInside: the caller knows they are all
// inside. One aligned load a row, except for 16 bytes where N % 16 == 8 (not kWide): two
// 8-byte halves. Offsets are 32-bit products (K and N fit 31 bits): with 64-bit ones and a
// bound per row, the forward spent ~200 of its ~500 instructions per MX block on addresses.
template <bool kInside, int kRowTiles, bool kWide>
__device__ inline void LoadWeightRows(const LaneOperands<kRowTiles>& l, int64_t kb, uint32_t* words) {
  constexpr int kLaneWords = Slot<kRowTiles>::kLaneWords;
  const uint32_t k0 = static_cast<uint32_t>(kb) + 8 * (threadIdx.x % 4);
  const uint32_t n = static_cast<uint32_t>(l.n);
  const uint8_t* row0 = Advance(l.w, k0, n);
  // Rows r < inside are inside K.
  const int inside =
      kInside ? 8 : l.valid_cols == 0 || k0 >= l.k ? 0 : static_cast<int>(MinI64(l.k - k0, 8));
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    uint32_t* row_words = words + kLaneWords * r;
#pragma unroll
    for (int q = 0; q < kLaneWords; ++q) row_words[q] = 0;
    if (!kInside && r >= inside) continue;
    const uint8_t* row = Advance(row0, r, n);
    if (kWide || kLaneWords < 4) {
      LoadWords<kLaneWords>(row, row_words);
    } else {
      LoadWords<2>(row, row_words);
      if (kInside || l.valid_cols > 8) LoadWords<2>(row + 8, row_words + 2);
    }
  }
}

// The lane's x words of the MX block at kb (one per row tile and step), zeros past K;
// kInside: the caller knows they are all inside.
template <bool kInside, int kRowTiles>
__device__ inline void LoadXWords(const LaneOperands<kRowTiles>& l, int64_t kb, BlockLoads<kRowTiles>& b) {
  const uint32_t k = static_cast<uint32_t>(kb) + 8 * (threadIdx.x % 4);
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      b.x[h][s] = kInside ? __ldg(reinterpret_cast<const uint32_t*>(l.x[h] + k + 4 * s))
                          : LoadXWord(l.x[h], k + 4 * s, l.k);
}

// Forward: the lane's x words, weight rows and weight scales of the MX block at kb, zeros
// (and neutral scales) past K and N; kInside as LoadWeightRows.
template <bool kInside, int kRowTiles, bool kWide>
__device__ inline void LoadRows(const LaneOperands<kRowTiles>& l, int64_t kb, BlockLoads<kRowTiles>& b) {
  using S = Slot<kRowTiles>;
  LoadXWords<kInside>(l, kb, b);
  LoadWeightRows<kInside, kRowTiles, kWide>(l, kb, b.w);
  if (kInside || l.valid_cols > 0) {
    LoadWords<S::kLaneWords>(Advance(l.w_scales, static_cast<uint32_t>(kb / mxfp8::kBlockSize),
                                     static_cast<uint32_t>(l.w_scale_row_bytes)), b.w_scales);
  } else {
#pragma unroll
    for (int q = 0; q < S::kLaneWords; ++q) b.w_scales[q] = kNeutral4;
  }
  if (!kInside && S::kLaneWords == 4 && l.valid_cols <= 8) b.w_scales[2] = b.w_scales[3] = kNeutral4;
}

// Dgrad: local column c's 8 bytes of the MX block at kb (contraction kb + 8t ..), zeros past
// K and N; kInside: the caller knows they are all inside. kWide: K % 8 == 0, one aligned 8-byte
// load; else two 4-byte words.
template <bool kInside, int kRowTiles, bool kWide>
__device__ inline uint2 LoadWeightColumn(const LaneOperands<kRowTiles>& l, int c, int64_t kb) {
  const int64_t k = kb + 8 * (threadIdx.x % 4);
  if (!kInside && (c >= l.valid_cols || k >= l.k)) return make_uint2(0, 0);
  const uint8_t* p = l.w + 8 * c * l.k + k;
  if (kWide) return __ldg(reinterpret_cast<const uint2*>(p));
  const uint32_t high = kInside ? __ldg(reinterpret_cast<const uint32_t*>(p + 4)) : LoadXWord(p, 4, l.k - k);
  return make_uint2(__ldg(reinterpret_cast<const uint32_t*>(p)), high);
}

// Dgrad: the lane's columns' bytes and scales of the MX block at kb (see LoadWeightColumn).
template <bool kInside, int kRowTiles, bool kWide>
__device__ inline void LoadColumns(const LaneOperands<kRowTiles>& l, int64_t kb, BlockLoads<kRowTiles>& b) {
  using S = Slot<kRowTiles>;
  const int64_t block = kb / mxfp8::kBlockSize;
#pragma unroll
  for (int i = 0; i < S::kLaneWords; ++i) b.w_scales[i] = 0;
#pragma unroll
  for (int c = 0; c < S::kLaneCols; ++c) {
    const uint2 v = LoadWeightColumn<kInside, kRowTiles, kWide>(l, c, kb);
    b.w[2 * c] = v.x, b.w[2 * c + 1] = v.y;
    const uint32_t e = kInside || c < l.valid_cols
                           ? __ldg(l.w_scales + 8 * c * l.w_scale_row_bytes + block)
                           : kNeutralScale;
    b.w_scales[c / 4] |= e << (8 * (c % 4));
  }
}

template <int kRowTiles, bool kTransposed, bool kWide>
__device__ inline void LoadBlock(const LaneOperands<kRowTiles>& l, int64_t kb, BlockLoads<kRowTiles>& b) {
  using S = Slot<kRowTiles>;
  const int t = threadIdx.x % 4;
  const int64_t block = kb / mxfp8::kBlockSize;
  // All of the lane's columns inside N and its bytes inside K (every lane but those at the
  // edges): no bounds checks, each of which was a branch or a predicate.
  const bool inside = l.valid_cols == S::kLaneCols && kb + 8 * t + 8 <= l.k;
  if constexpr (!kTransposed) {
    if (inside) {
      LoadRows<true, kRowTiles, kWide>(l, kb, b);
    } else {
      LoadRows<false, kRowTiles, kWide>(l, kb, b);
    }
  } else if (inside) {
    LoadXWords<true>(l, kb, b);
    LoadColumns<true, kRowTiles, kWide>(l, kb, b);
  } else {
    LoadXWords<false>(l, kb, b);
    LoadColumns<false, kRowTiles, kWide>(l, kb, b);
  }
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* row;
      if constexpr (kRowTiles == 1) {
        row = l.x_scale_rows[i];
      } else {
        const int64_t offset = l.x_scale_offsets[kTileRows * h + 2 * t + i];
        row = offset >= 0 ? l.lhs_scales + offset : nullptr;
      }
      b.x_scales[h][i] = row ? __ldg(row + block) : kNeutralScale;
    }
}

// Forward: asks L2 for the weights of the MX block at kb (the next one), lane l for row
// kb + l of the warp's 128 / R columns: no registers held, and the block's loads then wait
// for L2 instead of DRAM (1.37x -> 1.48x BF16 on decode-zipf). Dgrad's 128 separate 32-byte
// row segments per block made it slower (0.72x), so it does not prefetch.
template <int kRowTiles>
__device__ inline void PrefetchForwardBlock(const LaneOperands<kRowTiles>& l, int64_t kb) {
  const int lane = threadIdx.x % 32;
  const int64_t row = kb + lane;
  if (row < l.k) {
    const uint8_t* warp_w = l.w - Slot<kRowTiles>::kLaneCols * (lane / 4);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(
        Advance(warp_w, static_cast<uint32_t>(row), static_cast<uint32_t>(l.n))));
  }
}

// --- multiplies -----------------------------------------------------------------------------

// The A fragment of column tile j, step s: rows g and g + 8 are local columns 2j and 2j + 1,
// k-slots as above. Forward: interleave the bytes of rows (8t + 4s + 0, + 1) and (+ 2, + 3) at
// the columns' bytes 2j, 2j + 1. Dgrad: each column's word already holds its 4 k-slots.
template <int kRowTiles, bool kTransposed, Fp8Format kRhs>
__device__ inline void WeightFragment(const BlockLoads<kRowTiles>& b, int j, int s, uint32_t (&a)[4]) {
  if constexpr (!kTransposed) {
    constexpr int W = Slot<kRowTiles>::kLaneWords;
    const uint32_t selector = j % 2 == 0 ? 0x5140u : 0x7362u;  // {r0.c, r1.c, r0.c+1, r1.c+1}
    const int q = j / 2;
    const uint32_t rows01 = __byte_perm(b.w[W * (4 * s) + q], b.w[W * (4 * s + 1) + q], selector);
    const uint32_t rows23 = __byte_perm(b.w[W * (4 * s + 2) + q], b.w[W * (4 * s + 3) + q], selector);
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

template <int kRowTiles>
using Accumulators = float[kRowTiles][Slot<kRowTiles>::kColTiles][4];

// acc += this MX block's products (scales in the safe range). The mma's f32 sum of the block
// is scaled by its column's and group row's factors: c[h][i] is local column 2j + i / 2, row
// 8h + 2t + i % 2. Each weight fragment feeds the mmas of all kRowTiles row tiles.
template <int kRowTiles, bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
__device__ inline void MultiplyBlock(const BlockLoads<kRowTiles>& b, Accumulators<kRowTiles>& acc) {
  uint32_t x_frag[kRowTiles][kSteps][2];
  uint32_t x_bits[kRowTiles][2];
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      x_frag[h][s][0] = Fp8PairToHalf2<kLhs>(b.x[h][s] & 0xFFFFu);  // k-slots 2t, 2t+1
      x_frag[h][s][1] = Fp8PairToHalf2<kLhs>(b.x[h][s] >> 16);      // k-slots 2t+8, 2t+9
    }
    x_bits[h][0] = ScaleExponentBits(b.x_scales[h][0], 0);
    x_bits[h][1] = ScaleExponentBits(b.x_scales[h][1], 0);
  }
#pragma unroll
  for (int j = 0; j < Slot<kRowTiles>::kColTiles; ++j) {
    float c[kRowTiles][4] = {};
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      uint32_t a[4];
      WeightFragment<kRowTiles, kTransposed, kRhs>(b, j, s, a);
#pragma unroll
      for (int h = 0; h < kRowTiles; ++h) Mma16816(a, x_frag[h][s], c[h]);
    }
    const uint32_t w_bits[2] = {ScaleExponentBits(b.w_scales[j / 2], 2 * (j % 2)),
                                ScaleExponentBits(b.w_scales[j / 2], 2 * (j % 2) + 1)};
#pragma unroll
    for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        acc[h][j][i] = fmaf(c[h][i], FastFactor(w_bits[i / 2], x_bits[h][i % 2]), acc[h][j][i]);
  }
}

// Local column c's weight code at contraction index k (0 past K and N).
template <int kRowTiles, bool kTransposed>
__device__ inline uint32_t WeightCode(const LaneOperands<kRowTiles>& l, int c, int64_t k) {
  if (c >= l.valid_cols || k >= l.k) return 0;
  return kTransposed ? __ldg(l.w + 8 * c * l.k + k) : __ldg(l.w + k * l.n + c);
}

// acc += the block's products, each of two dequantized f32 elements (the rare path).
template <int kRowTiles, bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
__device__ void MultiplyBlockExactly(const RaggedMProblem& p, const RaggedMOperands& o,
                                     const Pass& pass, const LaneOperands<kRowTiles>& l, int64_t kb,
                                     const BlockLoads<kRowTiles>& b, Accumulators<kRowTiles>& acc) {
  constexpr int kLaneCols = Slot<kRowTiles>::kLaneCols;
  const int t = threadIdx.x % 4;
  const uint8_t* x_rows[kRowTiles][2];
  float x_scale[kRowTiles][2], w_scale[kLaneCols];
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      x_scale[h][i] = ScaleFactor(b.x_scales[h][i]);
      x_rows[h][i] = o.lhs + (pass.row_begin + MinI64(kTileRows * h + 2 * t + i, pass.rows - 1)) * p.k;
    }
#pragma unroll
  for (int c = 0; c < kLaneCols; ++c) w_scale[c] = ScaleFactor(Byte(b.w_scales, c));
  for (int kk = 0; kk < mxfp8::kBlockSize && kb + kk < p.k; ++kk) {
    float x_value[kRowTiles][2];
#pragma unroll
    for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
      for (int i = 0; i < 2; ++i)
        x_value[h][i] = __fmul_rn(Fp8PairToFloat2<kLhs>(__ldg(x_rows[h][i] + kb + kk)).x, x_scale[h][i]);
#pragma unroll
    for (int c = 0; c < kLaneCols; ++c) {
      const float w_value =
          __fmul_rn(Fp8PairToFloat2<kRhs>(WeightCode<kRowTiles, kTransposed>(l, c, kb + kk)).x, w_scale[c]);
#pragma unroll
      for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float& a = acc[h][c / 2][2 * (c % 2) + i];
          a = fmaf(x_value[h][i], w_value, a);
        }
    }
  }
}

// --- a pass ---------------------------------------------------------------------------------

// Per warp, per row of the slot and column of its chunk: its sum over the warp's K, at the
// column's place (ColumnSlot), rows of Slot<R>::kCols floats; 4 KB a warp for every R.
template <int kBlockWarps>
struct PartialSums {
  float sums[kBlockWarps * kTileRows * kBlockCols];
};

// Where lane group g stores its local columns 4q .. 4q + 3 of a row, as one 16-byte store
// (against 4-byte ones: decode-zipf forward 0.158 -> 0.150 ms on an H100). Forward keeps the
// chunk's columns in order; dgrad's (g + 8c) are swizzled so that a warp reading 32
// consecutive columns touches 32 banks.
template <int kRowTiles, bool kTransposed>
__device__ inline int LaneSlot(int g, int q) {
  constexpr int kLaneCols = Slot<kRowTiles>::kLaneCols;
  return kLaneCols * g + 4 * (kTransposed ? q ^ (g * kLaneCols / 32) : q);
}

template <int kRowTiles, bool kTransposed>
__device__ inline int ColumnSlot(int column) {
  if constexpr (!kTransposed) return column;
  const int g = column % 8, c = column / 8;
  return LaneSlot<kRowTiles, true>(g, c / 4) + c % 4;
}

// The chunk column (0 .. kCols - 1) of local column c of lane group g.
template <int kRowTiles, bool kTransposed>
__device__ inline int ChunkColumn(int g, int c) {
  return kTransposed ? g + 8 * c : Slot<kRowTiles>::kLaneCols * g + c;
}

template <int kRowTiles, bool kTransposed, bool kWide, Fp8Format kLhs, Fp8Format kRhs, typename O>
__device__ void RunPass(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                        PartialSums<kWarps<kTransposed>>& partial) {
  using S = Slot<kRowTiles>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kBlockCols + pass.chunk * S::kCols;
  const int64_t first_col = col0 + ChunkColumn<kRowTiles, kTransposed>(g, 0);
  const int64_t cols_left = p.n - first_col;  // columns of N from the lane's first one on

  LaneOperands<kRowTiles> l;
  l.k = p.k;
  l.n = p.n;
  l.valid_cols = static_cast<int>(
      cols_left <= 0 ? 0 : MinI64(S::kLaneCols, kTransposed ? CeilDiv(cols_left, 8) : cols_left));
  l.w = o.rhs + pass.group * p.k * p.n + (kTransposed ? first_col * p.k : first_col);
  l.w_scale_row_bytes = mxfp8::RhsScaleRowBytes(p);
  l.w_scales = o.rhs_scales + pass.group * mxfp8::RhsGroupScaleBytes(p) +
               (kTransposed ? first_col * l.w_scale_row_bytes : first_col);
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h)
    l.x[h] = o.lhs + (pass.row_begin + MinI64(kTileRows * h + g, pass.rows - 1)) * p.k;
  l.lhs_scales = o.lhs_scales;
  l.x_scale_offsets = pass.lhs_scale_offsets;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t offset = pass.lhs_scale_offsets[2 * t + i];
    l.x_scale_rows[i] = kRowTiles == 1 && offset >= 0 ? o.lhs_scales + offset : nullptr;
  }

  // The warp's MX blocks of K: one in kBlockWarps from its index on, so that the block's
  // warps read neighbouring MX blocks at about the same time: in dgrad, whole stretches of each
  // weight row (8 x 32 bytes) instead of 32-byte pieces a warp's share apart (decode dgrad
  // 0.228 -> 0.213 ms, forward 0.175 -> 0.165 ms on an H100, against contiguous shares).
  // (Loading the next block while multiplying this one needs 170 registers, so 8 warps per SM
  // instead of 16: slower, measured.)
  constexpr int kBlockWarps = kWarps<kTransposed>;
  const int64_t blocks = CeilDiv(p.k, mxfp8::kBlockSize);
  Accumulators<kRowTiles> acc = {};
  for (int64_t block = warp; block < blocks; block += kBlockWarps) {
    const int64_t kb = block * mxfp8::kBlockSize;
    if (!kTransposed && block + kBlockWarps < blocks)
      PrefetchForwardBlock(l, kb + kBlockWarps * mxfp8::kBlockSize);
    BlockLoads<kRowTiles> loads;
    LoadBlock<kRowTiles, kTransposed, kWide>(l, kb, loads);
    if (UnsafeScales(loads)) {
      MultiplyBlockExactly<kRowTiles, kTransposed, kLhs, kRhs>(p, o, pass, l, kb, loads, acc);
    } else {
      MultiplyBlock<kRowTiles, kTransposed, kLhs, kRhs>(loads, acc);
    }
  }

  // Row 8h + 2t + i of local columns 4q .. 4q + 3: acc[h][2q][i], acc[h][2q][i + 2],
  // acc[h][2q + 1][i], acc[h][2q + 1][i + 2].
  float* warp_sums = partial.sums + warp * S::kRows * S::kCols;
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h)
#pragma unroll
    for (int q = 0; q < S::kLaneWords; ++q)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = kTileRows * h + 2 * t + i;
        *reinterpret_cast<float4*>(&warp_sums[row * S::kCols + LaneSlot<kRowTiles, kTransposed>(g, q)]) =
            make_float4(acc[h][2 * q][i], acc[h][2 * q][i + 2], acc[h][2 * q + 1][i], acc[h][2 * q + 1][i + 2]);
      }
  __syncthreads();
  O* out = static_cast<O*>(o.out);
  for (int e = threadIdx.x; e < pass.rows * S::kCols; e += kThreads<kTransposed>) {
    const int r = e / S::kCols, c = e % S::kCols;
    if (col0 + c >= p.n) continue;
    const float* column = partial.sums + r * S::kCols + ColumnSlot<kRowTiles, kTransposed>(c);
    float sum = column[0];
#pragma unroll
    for (int w = 1; w < kBlockWarps; ++w) sum += column[w * S::kRows * S::kCols];
    // A row of no lhs group is 0 whatever its codes hold.
    out[(pass.row_begin + r) * p.n + col0 + c] = FromFloat<O>(pass.lhs_scale_offsets[r] >= 0 ? sum : 0.0f);
  }
}

// The largest pass, in row tiles (mxfp8_ragged_m_passes.cuh). Dgrad's loads are per column,
// so fewer columns per lane are fewer loads. The forward's are per weight row whatever a
// lane's columns, so larger passes save it conversions and bytes, not loads: H200
// (2026-11-30), decode-zipf 0.116 -> 0.113 ms with passes of up to 2 tiles (4: 0.113-0.114,
// its lanes' loads of 4 bytes), decode 0.125-0.127 -> 0.125.
template <bool kTransposed>
constexpr int kPassRowTiles = kTransposed ? 4 : 2;

template <bool kTransposed, bool kWide, Fp8Format kLhs, Fp8Format kRhs, typename O>
__global__ void __launch_bounds__(kThreads<kTransposed>, kMinBlocksPerSm<kTransposed>)
    Mxfp8RaggedMKernel(RaggedMProblem p, RaggedMOperands o, int64_t slots) {
  __shared__ __align__(16) PartialSums<kWarps<kTransposed>> partial;  // 16-byte stores (RunPass)
  __shared__ Pass pass;
  __shared__ bool has_work;
  for (int64_t slot = blockIdx.y; slot < slots; slot += gridDim.y) {
    __syncthreads();  // the previous slot is done with `pass` and `partial`
    if (threadIdx.x < 32) {
      const bool found = mxfp8_ragged_m::LocatePass(p, o.group_sizes, slot, kPassRowTiles<kTransposed>, &pass);
      __syncwarp();  // pass.row_begin and rows, written by one lane
      if (found && !pass.tail)
        mxfp8_ragged_m::LocateLhsScales(p, o.lhs_group_sizes, o.group_sizes, &pass);
      if (threadIdx.x == 0) has_work = found;
    }
    __syncthreads();
    if (!has_work) continue;
    // `pass` stays in shared memory (read there) until the next slot's first barrier.
    if (pass.tail) {
      mxfp8_ragged_m::ZeroRows<O>(p, o.out, pass, static_cast<int64_t>(blockIdx.x) * kBlockCols,
                                  kBlockCols);
    } else if (kPassRowTiles<kTransposed> == 1 || pass.row_tiles == 1) {
      RunPass<1, kTransposed, kWide, kLhs, kRhs, O>(p, o, pass, partial);
    } else if constexpr (kPassRowTiles<kTransposed> >= 2) {
      if (kPassRowTiles<kTransposed> == 2 || pass.row_tiles == 2) {
        RunPass<2, kTransposed, kWide, kLhs, kRhs, O>(p, o, pass, partial);
      } else if constexpr (kPassRowTiles<kTransposed> == 4) {
        RunPass<4, kTransposed, kWide, kLhs, kRhs, O>(p, o, pass, partial);
      }
    }
  }
}

// kWide: the weights' contiguous dimension (N forward, K dgrad) allows the wide loads.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
  const int64_t slots = mxfp8::MaxSumOfTiles(p.rows, p.num_groups, kTileRows) + 1;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kBlockCols)),
                  static_cast<unsigned>(MinI64(kMaxGridYZ, slots)));  // more slots loop
  const bool wide = kTransposed ? p.k % 8 == 0 : p.n % 16 == 0;
  constexpr int kBlockThreads = kThreads<kTransposed>;
  if (wide) {
    Mxfp8RaggedMKernel<kTransposed, true, kLhs, kRhs, O><<<grid, kBlockThreads, 0, stream>>>(p, o, slots);
  } else {
    Mxfp8RaggedMKernel<kTransposed, false, kLhs, kRhs, O><<<grid, kBlockThreads, 0, stream>>>(p, o, slots);
  }
  return cudaGetLastError();
}

struct MmaKernel {
  template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
  static cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
    return cuda::Launch<kTransposed, kLhs, kRhs, O>(p, o, stream);
  }
};

bool Aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// Groups averaging more rows than this take the wgmma kernel where it fits: it reads each
// weight once per 64 rows, this kernel once per pass (16 rows in the forward, 32 in dgrad)
// with less padding and no conversion to bf16. H200, decode dims (PERFORMANCE.md,
// forty-sixth session), forward / dgrad against BF16, this kernel then the wgmma one: 12 rows
// per group 1.21x / 1.13x against 0.98x / 0.96x (Zipf routing 1.11x / 1.01x against 0.90x /
// 0.93x), 16 rows 0.98x / 0.95x against 0.95x / 0.95x (Zipf 0.95x / 0.89x against 0.79x /
// 0.90x), 24 rows 0.73x / 0.72x against 0.92x / 0.93x. (The H100 crossover, 12 rows in the
// thirteenth session, predates this kernel's passes of 2 row tiles.)
constexpr int64_t kWgmmaMinRowsPerGroup = 16;

// JGG_MXFP8_RAGGED_M_KERNEL=mma or =wgmma forces one kernel where it fits (measurements).
const char* ForcedKernel() {
  static const char* forced = std::getenv("JGG_MXFP8_RAGGED_M_KERNEL");
  return forced == nullptr ? "" : forced;
}

bool UseWgmma(const RaggedMProblem& p, const RaggedMOperands& o) {
  DeviceInfo gpu{};
  if (QueryDevice(&gpu) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (!Mxfp8RaggedMWgmmaFits(p, o, gpu.major)) return false;
  if (std::strcmp(ForcedKernel(), "mma") == 0) return false;
  if (std::strcmp(ForcedKernel(), "wgmma") == 0) return true;
  return p.rows > kWgmmaMinRowsPerGroup * p.num_groups;
}

}  // namespace

cudaError_t LaunchMxfp8RaggedM(const RaggedMProblem& p, const RaggedMOperands& o,
                               cudaStream_t stream) {
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  if (UseWgmma(p, o)) return LaunchMxfp8RaggedMWgmma(p, o, stream);
  // K and N fit 32 bits (Advance's operands).
  if (p.k % 4 != 0 || p.n % 8 != 0 || p.k > kMaxInt32 || p.n > kMaxInt32 || !Aligned(o.lhs, 4) ||
      !Aligned(o.rhs, 16) || !Aligned(o.rhs_scales, 16))
    return cudaErrorInvalidValue;
  return mxfp8_ragged_m::Dispatch<MmaKernel>(p, o, stream);
}

}  // namespace jgg::cuda
