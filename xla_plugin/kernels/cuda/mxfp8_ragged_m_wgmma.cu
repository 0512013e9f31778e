// Dequantize-on-load MXFP8 grouped GEMM on Hopper's wgmma (see mxfp8_ragged_m_wgmma.h).
//
// A block (one warpgroup) computes a 64-row tile of one group (mxfp8_ragged_m_passes.cuh's
// passes, with 64-row tiles) for 128 output columns, in steps of 64 of K. cp.async copies each
// step's fp8 codes and E8M0 scale words into a ring of shared-memory stages, kStages - 1 steps
// ahead. Each thread turns the 16-code runs it copied into bf16 (code * 2^(e - 127), the
// integer conversion of ExactScaling) and stores them at swizzled addresses computed once per
// tile, in the layouts wgmma reads (128-byte swizzle; the forward's weights N-major as stored,
// dgrad's K-major); then one wgmma 64x128x16 per 16 of K adds the products to f32
// accumulators. The conversion's instructions and the warps that hide their latency bound the
// kernel (not the loads: the copy ring alone changed nothing), hence the per-tile addresses
// and factors, the pipeline shape below, and the copies issued behind each step's wgmma. Tried
// and slower or no faster (PERFORMANCE.md, fourteenth and fifteenth sessions): TMA loads of the
// codes by one thread (the copy instructions they save were off the block's path), results
// staged through shared memory for 16-byte row stores (the pair stores of RunTile do as well),
// warp specialization (converting warpgroups feeding a multiplying one through mbarriers:
// more instructions, and each converter's proxy fence waited for its own prefetches).
//
// Exactness: the bf16 values are the dequantized values exactly, and so are their products
// in f32, while every scale of the step is in FastScales' range (or its block's codes are all
// zero under a scale other than NaN's); then the result is the f32 sum of exact products, as
// the mma kernel's. A step with a scale outside it (tiny or huge blocks, NaN or Inf codes, the
// NaN scale) is computed element by element in f32 instead (slow, exact, the same NaN and Inf
// as dequantize -> f32 matmul).
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_wgmma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/memory_sm80.h>

#include "xla_plugin/common/ragged_layout.h"
#include "xla_plugin/kernels/cuda/bf16_fast_scales.cuh"
#include "xla_plugin/kernels/cuda/device_info.h"
#include "xla_plugin/kernels/cuda/launch_limits.h"
#include "xla_plugin/kernels/cuda/float_convert.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_dispatch.cuh"
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_passes.cuh"

namespace jgg::cuda {
namespace {

using mxfp8::Fp8Format;
using mxfp8::RaggedMOperands;
using mxfp8::RaggedMProblem;
using mxfp8_ragged_m::Pass;

constexpr int kTileM = 64;   // rows of a group per block
constexpr int kTileN = 128;  // output columns per block
constexpr int kTileK = 64;   // K per step: two MX blocks
constexpr int kThreads = 128;
constexpr int kChunk = 16;   // codes per 16-byte load

__device__ inline uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ inline bool AnyNonzeroCode(const uint4& codes) {
  return ((codes.x | codes.y | codes.z | codes.w) & 0x7F7F7F7Fu) != 0;
}

// The factors of 16 codes of 16 columns with a scale each (the forward's weights: a row of 16
// codes along N), from the 16 scale bytes: per word of 4 codes, two bf16x2 factor words and
// a byte mask of the codes whose scale is outside FastScales' range (a nonzero one of those
// makes the step slow). A thread computes them once per K block and uses them for each of its
// rows of that block.
template <Fp8Format kFormat>
struct ColumnFactors {
  uint32_t factors[8];
  uint32_t outside[4];

  __device__ explicit ColumnFactors(const uint4& scales) {
#pragma unroll
    for (int i = 0; i < 4; ++i) outside[i] = FastScales<kFormat>::Factors4(Word(scales, i), &factors[2 * i]);
  }
};

// Stores 8 bf16 (4 words) at each of the shared addresses lo and lo ^ 16: the two 16-byte
// halves of a run of 16 values whose first element is 16-value aligned. The 128-byte swizzle
// moves 16-byte chunks within a 128-byte row by an XOR of the chunk index, so the second half
// is the first's chunk with bit 0 flipped.
__device__ inline void StoreHalves(const uint32_t (&out)[8], uint32_t lo) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(lo), "r"(out[0]), "r"(out[1]),
               "r"(out[2]), "r"(out[3]) : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(lo ^ 16u), "r"(out[4]), "r"(out[5]),
               "r"(out[6]), "r"(out[7]) : "memory");
}

// 16 codes sharing scale e -> 16 bf16 at lo. Returns whether the bf16 path cannot take them
// (the NaN scale over zero codes aside: StepHasNanScale finds that once per step).
template <Fp8Format kFormat>
__device__ inline bool StoreUniform(const uint4& codes, uint32_t e, uint32_t lo) {
  using F = FastScales<kFormat>;
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  const bool fast = F::InRange(e);
  const bool slow = F::Exact::AnySpecial(words) || (!fast && AnyNonzeroCode(codes));
  const uint32_t factor = F::Factor2(fast ? e : 127u);  // all-zero codes: any factor gives 0
  const uint32_t factors[2] = {factor, factor};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) F::Exact::Convert(words[i], factors, &out[2 * i]);
  StoreHalves(out, lo);
  return slow;
}

// 16 codes of 16 columns with the factors f -> 16 bf16 at lo (slow as StoreUniform).
template <Fp8Format kFormat>
__device__ inline bool StorePerCode(const uint4& codes, const ColumnFactors<kFormat>& f, uint32_t lo) {
  using F = FastScales<kFormat>;
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t outside_codes = 0, out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    outside_codes |= words[i] & f.outside[i];
    F::Exact::Convert(words[i], &f.factors[2 * i], &out[2 * i]);
  }
  StoreHalves(out, lo);
  return F::Exact::AnySpecial(words) || (outside_codes & 0x7F7F7F7Fu) != 0;
}

// The wgmma operands: x tile (64 rows, K-major) and weight tile (128 columns; forward N-major
// as the weights are stored, dgrad K-major), both with the 128-byte swizzle.
template <bool kTransposed>
struct Layouts {
  using MmaAtom = cute::SM90_64x128x16_F32BF16BF16_SS<
      cute::GMMA::Major::K, kTransposed ? cute::GMMA::Major::K : cute::GMMA::Major::MN>;
  using SmemA = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<cute::bfloat16_t>{},
                                             cute::Shape<cute::Int<kTileM>, cute::Int<kTileK>>{}));
  using AtomB = std::conditional_t<kTransposed, cute::GMMA::Layout_K_SW128_Atom<cute::bfloat16_t>,
                                   cute::GMMA::Layout_MN_SW128_Atom<cute::bfloat16_t>>;
  using SmemB = decltype(cute::tile_to_shape(AtomB{}, cute::Shape<cute::Int<kTileN>, cute::Int<kTileK>>{}));
};

// One step's operands as they are in memory, copied in by cp.async kStages - 1 steps ahead.
struct RawStep {
  alignas(128) uint8_t x[kTileM * kTileK];  // [row][k]
  alignas(128) uint8_t w[kTileN * kTileK];  // forward [k][n], dgrad [n][k]
  // Per row, the aligned word of its scale row holding the step's two scales (scale rows are
  // padded to 4 bytes and a step starts at an even block, so both are in one word).
  uint32_t x_scales[kTileM];
  // Forward: the step's two scale rows, 128 columns each; dgrad: a word per column, as x's.
  alignas(16) uint8_t w_scales[4 * kTileN];
};

// kStages raw steps in the ring (kStages - 1 in flight while one is converted), one bf16 tile
// of each operand, kBlocksPerSm (the shared memory and registers that allows). The block is
// latency-bound (4 warps, dependent conversion chains), so warps per SM count most: on an H100
// (PERFORMANCE.md, twelfth session) 3 stages, 3 blocks (65 KB, 155-168 registers) ran the
// 32-rows-per-group forward in 0.285 ms, against 0.328 for 4 stages, two bf16 tiles each (a
// step's conversion overlapping the block's previous wgmma), 2 blocks, and 0.378 for 2 stages,
// 4 blocks (whose 128 registers spill). Blocks of two warpgroups computing 128 rows (each
// converted weight tile serving twice the rows; 2 blocks per SM at 128 registers) were slower
// at every size, 0.366 against 0.288 ms at 32 rows and 0.732 against 0.711 at 128 (thirteenth
// session): fewer, longer-latency blocks, not fewer conversions, decide.
constexpr int kStages = 3;
constexpr int kBlocksPerSm = 3;

struct SharedStorage {
  alignas(1024) __nv_bfloat16 a[kTileM * kTileK];
  alignas(1024) __nv_bfloat16 b[kTileN * kTileK];
  RawStep raw[kStages];
  int64_t lhs_scale_offsets[kTileM];
  Pass pass;
  bool has_work;
};
constexpr int kSharedAlignment = 1024;  // the 128-byte swizzle's repeat: tiles start at one

template <int kBytes>
__device__ inline void CopyAsync(void* dst, const void* src, bool valid) {
  if constexpr (kBytes == 16) {
    cutlass::arch::cp_async_zfill<16, cutlass::arch::CacheOperation::Global>(dst, src, valid);
  } else {
    cutlass::arch::cp_async_zfill<kBytes, cutlass::arch::CacheOperation::Always>(dst, src, valid);
  }
}

// Byte of a scale word holding the step's MX block `block` (0, 1) of K at k0.
__device__ inline uint32_t StepScale(uint32_t word, int k0, int block) {
  return (word >> (8 * ((k0 / 32) % 4 + block))) & 0xFFu;
}

constexpr int kXRuns = kTileM * kTileK / kChunk / kThreads;  // 16-code runs per thread and step
constexpr int kWRuns = kTileN * kTileK / kChunk / kThreads;
constexpr int kRunsPerRow = kTileK / kChunk;                  // x and dgrad's weights: K-major
constexpr int kRunsPerKRow = kTileN / kChunk;                 // the forward's weights: N-major
constexpr int kForwardRunKRows = 8;  // K rows between a thread's runs of the forward's weights

// The 16 columns (as a chunk of a K row) of thread t's runs of the forward's weights, and the
// K row of its first run. A quarter warp's 8 threads store 16-byte chunks together (one
// st.shared.v4 each): threads j and j + 4 hold chunks 2j' (+1) of K rows 2b and 2b + 1 of the
// same 64-column swizzle atom, which the swizzle (chunk ^ K row % 8) puts in 8 different bank
// groups. (Threads j and j + 4 on the same K row, in the two atoms, would collide pairwise:
// twice the store wavefronts, measured.) A warp still copies 4 whole 128-byte K rows.
__device__ inline int ForwardColumnChunk(int t) { return t % 4 + 4 * ((t / 8) % 2); }
__device__ inline int ForwardFirstKRow(int t) {
  return 32 * (t / (kThreads / 2)) + 2 * ((t / 16) % 4) + (t / 4) % 2;
}

// The raw chunk (16 codes) that thread t copies and converts as its weight run i. Dgrad's
// weights (as x): chunk t + kThreads i, consecutive threads on consecutive bytes, so the runs
// are 32 rows apart. The forward's weights ([k][n], kRunsPerKRow chunks per K row): the
// thread's four runs are K rows 8 apart in MX block t / 64 of the step, under the same 16
// columns, so one set of column factors serves all four (StoreStep).
template <bool kTransposed>
__device__ inline int WeightChunk(int t, int i) {
  if constexpr (kTransposed) {
    return t + kThreads * i;
  } else {
    static_assert(kWRuns * kForwardRunKRows == 32 && kThreads == 2 * kForwardRunKRows * kRunsPerKRow);
    return (ForwardFirstKRow(t) + kForwardRunKRows * i) * kRunsPerKRow + ForwardColumnChunk(t);
  }
}

// Where this thread's copies come from, located once per tile (the pass lives in shared
// memory, which the compiler reloads after every barrier): run i's codes of the step at k0
// are at x + i * x_run_stride + k0 and w + i * w_run_stride + k0 * w_k_stride (32-bit
// offsets: Mxfp8RaggedMWgmmaFits bounds them).
struct Sources {
  const uint8_t* x;         // x run 0 at step 0: row t / 4, K 16 (t % 4)
  const uint8_t* x_scales;  // row t's scale word (t < 64)
  const uint8_t* w;         // weight run 0 at step 0
  const uint8_t* w_scales;  // dgrad: column t's scale word; forward: chunk t of two scale rows
  uint32_t x_run_stride;    // 32 rows
  uint32_t w_run_stride;    // dgrad: 32 rows; forward: kForwardRunKRows K rows
  uint32_t w_k_stride;      // dgrad: 1; forward: N
  uint32_t inside;          // bits: kXRun + i (x run i), kWRun + i (w run i), kXScale, kWScale
  static constexpr int kXRun = 0, kWRun = 8, kXScale = 16, kWScale = 17;
};

template <bool kTransposed>
__device__ inline Sources LocateSources(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                                        const int64_t* lhs_scale_offsets, const uint8_t* w,
                                        const uint8_t* w_scales, int64_t n0) {
  const int t = threadIdx.x;
  Sources src{};
  src.x = o.lhs + (pass.row_begin + t / kRunsPerRow) * p.k + kChunk * (t % kRunsPerRow);
  src.x_run_stride = static_cast<uint32_t>(kThreads / kRunsPerRow * p.k);
#pragma unroll
  for (int i = 0; i < kXRuns; ++i) {
    const int r = (t + kThreads * i) / kRunsPerRow;
    if (r < pass.rows && lhs_scale_offsets[r] >= 0) src.inside |= 1u << (Sources::kXRun + i);
  }
  if (t < kTileM && t < pass.rows && lhs_scale_offsets[t] >= 0) {
    src.x_scales = o.lhs_scales + lhs_scale_offsets[t];
    src.inside |= 1u << Sources::kXScale;
  }
  const int64_t row_bytes = mxfp8::RhsScaleRowBytes(p);
  if constexpr (kTransposed) {
    src.w = w + (n0 + t / kRunsPerRow) * p.k + kChunk * (t % kRunsPerRow);
    src.w_run_stride = static_cast<uint32_t>(kThreads / kRunsPerRow * p.k);
    src.w_k_stride = 1;
#pragma unroll
    for (int i = 0; i < kWRuns; ++i)
      if (n0 + (t + kThreads * i) / kRunsPerRow < p.n) src.inside |= 1u << (Sources::kWRun + i);
    src.w_scales = w_scales + (n0 + t) * row_bytes;
    if (n0 + t < p.n) src.inside |= 1u << Sources::kWScale;
  } else {
    const int64_t n = n0 + kChunk * ForwardColumnChunk(t);
    src.w = w + ForwardFirstKRow(t) * p.n + n;
    src.w_run_stride = static_cast<uint32_t>(kForwardRunKRows * p.n);
    src.w_k_stride = static_cast<uint32_t>(p.n);
    if (n < p.n) src.inside |= ((1u << kWRuns) - 1) << Sources::kWRun;
    // Threads t < 16 copy chunk t % 8 of scale row t / 8 (the step's two MX blocks).
    const int64_t scale_n = n0 + kChunk * (t % kRunsPerKRow);
    src.w_scales = w_scales + (t / kRunsPerKRow) * row_bytes + scale_n;
    if (scale_n < p.n && t < 2 * kRunsPerKRow) src.inside |= 1u << Sources::kWScale;
  }
  return src;
}

// Starts copying the step at k0 into `raw`; what lies outside the operands (rows of no group or
// past the pass, K and N tails) is zero-filled. A step's two scales of a row share an aligned
// scale word (scale rows are padded to 4 bytes, a step starts at an even MX block).
template <bool kTransposed>
__device__ inline void IssueStep(const RaggedMProblem& p, const Sources& src, const uint8_t* fallback,
                                 int k0, RawStep& raw) {
  const int t = threadIdx.x;
  const int k = static_cast<int>(p.k);
  const auto inside = [&](int bit) { return (src.inside >> bit & 1u) != 0; };
  const bool k_inside = k0 + kChunk * (t % kRunsPerRow) < k;  // x's and dgrad's runs
#pragma unroll
  for (int i = 0; i < kXRuns; ++i) {
    const bool in = inside(Sources::kXRun + i) && k_inside;
    CopyAsync<16>(raw.x + kChunk * (t + kThreads * i), in ? src.x + (i * src.x_run_stride + k0) : fallback, in);
  }
  if (t < kTileM) {
    const bool in = inside(Sources::kXScale);
    CopyAsync<4>(&raw.x_scales[t], in ? src.x_scales + k0 / 128 * 4 : fallback, in);
  }
  const uint32_t w_step = static_cast<uint32_t>(k0) * src.w_k_stride;
#pragma unroll
  for (int i = 0; i < kWRuns; ++i) {
    const int c = WeightChunk<kTransposed>(t, i);
    const bool k_in = kTransposed ? k_inside : k0 + c / kRunsPerKRow < k;
    const bool in = inside(Sources::kWRun + i) && k_in;
    CopyAsync<16>(raw.w + kChunk * c, in ? src.w + (i * src.w_run_stride + w_step) : fallback, in);
  }
  if constexpr (kTransposed) {
    const bool in = inside(Sources::kWScale);
    CopyAsync<4>(raw.w_scales + 4 * t, in ? src.w_scales + k0 / 128 * 4 : fallback, in);
  } else if (t < 2 * kRunsPerKRow) {
    const bool in = inside(Sources::kWScale) && k0 + 32 * (t / kRunsPerKRow) < k;
    const uint32_t row_bytes = static_cast<uint32_t>(mxfp8::RhsScaleRowBytes(p));
    CopyAsync<16>(raw.w_scales + kChunk * t, in ? src.w_scales + k0 / 32 * row_bytes : fallback, in);
  }
}

// Shared addresses of this thread's runs of 16 bf16 values in the tiles (run c of a tile is the
// raw chunk c).
struct Runs {
  uint32_t x[kXRuns];
  uint32_t w[kWRuns];
};

template <bool kTransposed, class SA, class SB>
__device__ inline Runs LocateRuns(SA& sA, SB& sB) {
  const auto address = [](const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); };
  Runs runs{};
#pragma unroll
  for (int i = 0; i < kXRuns; ++i) {
    const int c = threadIdx.x + kThreads * i;
    runs.x[i] = address(&sA(c / kRunsPerRow, kChunk * (c % kRunsPerRow)));
  }
#pragma unroll
  for (int i = 0; i < kWRuns; ++i) {
    const int c = WeightChunk<kTransposed>(threadIdx.x, i);
    runs.w[i] = kTransposed ? address(&sB(c / kRunsPerRow, kChunk * (c % kRunsPerRow)))
                            : address(&sB(kChunk * (c % kRunsPerKRow), c / kRunsPerKRow));
  }
  return runs;
}

// Whether the step at k0 holds the NaN scale, which makes even its zero codes NaN (the runs'
// checks pass zero codes under any other scale outside the range). Tested once per step, a
// scale word per thread, not per run: issue slots bound the kernel (the per-run form cost it
// 2-4%, PERFORMANCE.md, forty-fifth session). Scale bytes of rows or columns outside the
// operands were zero-filled, so they never test true.
template <bool kTransposed>
__device__ inline bool StepHasNanScale(const RawStep& raw, int k0) {
  const int t = threadIdx.x;
  const uint32_t step_bytes = 0xFFFFu << (8 * ((k0 / 32) % 4));  // of a word of 4 MX blocks
  bool nan = t < kTileM && AnyNanScale(raw.x_scales[t] & step_bytes);
  const uint32_t* w_words = reinterpret_cast<const uint32_t*>(raw.w_scales);
  if constexpr (kTransposed) {
    nan |= AnyNanScale(w_words[t] & step_bytes);  // column t's word
  } else {
    static_assert(2 * kTileN / 4 == kTileM);  // the step's two scale rows: a word per thread t < 64
    nan |= t < kTileM && AnyNanScale(w_words[t]);
  }
  return nan;
}

// Converts the step at k0 from `raw` into bf16 at `runs` (each thread the chunks it copied; x
// rows whose results are not kept, not copied either, are skipped: their accumulators are never
// read); returns whether any of this thread's values needs the exact path.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
__device__ inline bool StoreStep(const RawStep& raw, int k0, const Runs& runs, const Sources& src) {
  const int t = threadIdx.x;
  bool slow = StepHasNanScale<kTransposed>(raw, k0);
#pragma unroll
  for (int i = 0; i < kXRuns; ++i) {
    if ((src.inside >> (Sources::kXRun + i) & 1u) == 0) continue;
    const int c = t + kThreads * i, r = c / kRunsPerRow, k = kChunk * (c % kRunsPerRow);
    const uint4 codes = *reinterpret_cast<const uint4*>(raw.x + kChunk * c);
    slow |= StoreUniform<kLhs>(codes, StepScale(raw.x_scales[r], k0, k / 32), runs.x[i]);
  }
  if constexpr (kTransposed) {
#pragma unroll
    for (int i = 0; i < kWRuns; ++i) {
      const int c = t + kThreads * i, n = c / kRunsPerRow, k = kChunk * (c % kRunsPerRow);
      const uint4 codes = *reinterpret_cast<const uint4*>(raw.w + kChunk * c);
      const uint32_t word = reinterpret_cast<const uint32_t*>(raw.w_scales)[n];
      slow |= StoreUniform<kRhs>(codes, StepScale(word, k0, k / 32), runs.w[i]);
    }
  } else {
    // The thread's runs share 16 columns and the step's MX block t / 64 (WeightChunk).
    const int block = t / (kThreads / 2);
    const ColumnFactors<kRhs> factors(
        *reinterpret_cast<const uint4*>(raw.w_scales + block * kTileN + kChunk * ForwardColumnChunk(t)));
#pragma unroll
    for (int i = 0; i < kWRuns; ++i) {
      const uint4 codes = *reinterpret_cast<const uint4*>(raw.w + kChunk * WeightChunk<false>(t, i));
      slow |= StorePerCode<kRhs>(codes, factors, runs.w[i]);
    }
  }
  return slow;
}

__device__ inline float Dequantized(uint8_t code, uint8_t scale, Fp8Format format) {
  return __uint_as_float(mxfp8::DequantizeElement(code, scale, format, mxfp8::F32Format()));
}

// Sum over k in [k0, k_end) of x[k] w[k] dequantized, in f32: exact values, the reference's NaN
// and Inf. Not inlined: the rare steps the bf16 path cannot take call it once per accumulator.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs>
__device__ __noinline__ float ExactDot(const RaggedMProblem& p, const uint8_t* x,
                                       const uint8_t* x_scales, const uint8_t* w,
                                       const uint8_t* w_scales, int64_t n, int64_t k0,
                                       int64_t k_end) {
  const int64_t row_bytes = mxfp8::RhsScaleRowBytes(p);
  float sum = 0.0f;
  for (int64_t k = k0; k < k_end; ++k) {
    const uint8_t wc = kTransposed ? w[n * p.k + k] : w[k * p.n + n];
    const uint8_t ws = kTransposed ? w_scales[n * row_bytes + k / 32] : w_scales[(k / 32) * row_bytes + n];
    sum += Dequantized(x[k], x_scales[k / 32], kLhs) * Dequantized(wc, ws, kRhs);
  }
  return sum;
}

// The step's products for this thread's accumulators by ExactDot.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, class Acc, class Coords>
__device__ void AddStepExactly(const RaggedMProblem& p, const RaggedMOperands& o, const Pass& pass,
                               const int64_t* lhs_scale_offsets, const uint8_t* w, const uint8_t* w_scales,
                               int64_t n0, int64_t k0, Acc& acc, const Coords& coords) {
  const int64_t k_end = MinI64(p.k, k0 + kTileK);
  // Unrolled: the accumulators stay registers (a dynamic index would move them to the stack).
#pragma unroll
  for (int i = 0; i < cute::size(acc); ++i) {
    const int r = cute::get<0>(coords(i));
    const int64_t n = n0 + cute::get<1>(coords(i));
    if (r >= pass.rows || n >= p.n || lhs_scale_offsets[r] < 0) continue;
    acc(i) += ExactDot<kTransposed, kLhs, kRhs>(p, o.lhs + (pass.row_begin + r) * p.k,
                                                o.lhs_scales + lhs_scale_offsets[r], w, w_scales,
                                                n, k0, k_end);
  }
}

template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
__device__ void RunTile(const RaggedMProblem& p, const RaggedMOperands& o, SharedStorage& s, int64_t n0) {
  using L = Layouts<kTransposed>;
  using namespace cute;
  Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<bfloat16_t*>(s.a)), typename L::SmemA{});
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<bfloat16_t*>(s.b)), typename L::SmemB{});
  auto mma = make_tiled_mma(typename L::MmaAtom{});
  auto thr = mma.get_slice(threadIdx.x);
  Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));
  Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
  Tensor coords = thr.partition_C(make_identity_tensor(Shape<Int<kTileM>, Int<kTileN>>{}));
  Tensor acc = partition_fragment_C(mma, Shape<Int<kTileM>, Int<kTileN>>{});
  clear(acc);

  const uint8_t* w = o.rhs + s.pass.group * p.k * p.n;
  const uint8_t* w_scales = o.rhs_scales + s.pass.group * mxfp8::RhsGroupScaleBytes(p);
  const Runs runs = LocateRuns<kTransposed>(sA, sB);
  const int steps = static_cast<int>(CeilDiv(p.k, kTileK));
  const Sources sources = LocateSources<kTransposed>(p, o, s.pass, s.lhs_scale_offsets, w, w_scales, n0);
  const auto next_stage = [](int stage) { return stage + 1 == kStages ? 0 : stage + 1; };
  int issue_stage = 0, stage = 0;  // step % kStages of the next step to issue, to convert
  const auto issue = [&](int step) {
    if (step < steps) IssueStep<kTransposed>(p, sources, o.rhs, step * kTileK, s.raw[issue_stage]);
    issue_stage = next_stage(issue_stage);
    cutlass::arch::cp_async_fence();  // a group per step, empty past the end: waits count steps
  };
  for (int step = 0; step < kStages - 1; ++step) issue(step);
  for (int step = 0; step < steps; ++step, stage = next_stage(stage)) {
    cutlass::arch::cp_async_wait<kStages - 2>();  // this thread's copies of the step landed
    warpgroup_wait<0>();  // the previous step's wgmma is done reading the bf16 tiles
    __syncthreads();  // everyone's copies of the step landed, the bf16 tiles are free
    const bool slow = StoreStep<kTransposed, kLhs, kRhs>(s.raw[stage], step * kTileK, runs, sources);
    cutlass::arch::fence_view_async_shared();  // the stores, visible to wgmma
    if (!__syncthreads_or(slow)) {
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      gemm(mma, tCrA, tCrB, acc);
      warpgroup_commit_batch();
    } else {
      warpgroup_fence_operand(acc);
      AddStepExactly<kTransposed, kLhs, kRhs>(p, o, s.pass, s.lhs_scale_offsets, w, w_scales, n0,
                                              step * kTileK, acc, coords);
    }
    // Into the stage converted in the previous step (every thread was done reading it at this
    // step's first barrier): issued behind the wgmma, the copies stay off the conversion's path.
    issue(step + kStages - 1);
  }
  cutlass::arch::cp_async_wait<0>();  // (only empty groups are left) before `s` is reused
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);

  O* out = static_cast<O*>(o.out);
  // Accumulators i and i + 1 (i even) are columns n and n + 1 of one row (wgmma's C layout)
  // with n even, and N is a multiple of 16: one store writes both.
#pragma unroll
  for (int i = 0; i < size(acc); i += 2) {
    const int r = get<0>(coords(i));
    const int64_t n = n0 + get<1>(coords(i));
    if (r >= s.pass.rows || n >= p.n) continue;
    const bool kept = s.lhs_scale_offsets[r] >= 0;  // a row of no lhs group is 0 whatever the weights hold
    StorePair<O>(out + (s.pass.row_begin + r) * p.n + n, kept ? acc(i) : 0.0f, kept ? acc(i + 1) : 0.0f);
  }
}

template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) Mxfp8RaggedMWgmmaKernel(RaggedMProblem p,
                                                                                RaggedMOperands o, int64_t slots) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_bytes[];
  const uint32_t misalignment = static_cast<uint32_t>(__cvta_generic_to_shared(shared_bytes)) % kSharedAlignment;
  SharedStorage& s = *reinterpret_cast<SharedStorage*>(
      shared_bytes + (kSharedAlignment - misalignment) % kSharedAlignment);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  for (int64_t slot = blockIdx.y; slot < slots; slot += gridDim.y) {
    __syncthreads();  // the previous slot is done with `s`
    if (threadIdx.x < 32) {
      const bool found = mxfp8_ragged_m::LocatePass(p, o.group_sizes, slot, /*max_row_tiles=*/1,
                                                    &s.pass, kTileM);
      __syncwarp();
      if (found && !s.pass.tail)
        mxfp8_ragged_m::LocateLhsScaleRows(p, o.lhs_group_sizes, o.group_sizes, s.pass,
                                           s.lhs_scale_offsets);
      if (threadIdx.x == 0) s.has_work = found;
    }
    __syncthreads();
    if (!s.has_work) continue;
    if (s.pass.tail) {
      mxfp8_ragged_m::ZeroRows<O>(p, o.out, s.pass, n0, kTileN);
    } else {
      RunTile<kTransposed, kLhs, kRhs, O>(p, o, s, n0);
    }
  }
#endif
}

template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
  const auto kernel = Mxfp8RaggedMWgmmaKernel<kTransposed, kLhs, kRhs, O>;
  constexpr int kSharedBytes = sizeof(SharedStorage) + kSharedAlignment;  // + alignment slack
  static std::atomic<uint64_t> opted_in{0};
  DeviceInfo gpu{};
  cudaError_t e = QueryDevice(&gpu);
  if (e == cudaSuccess) e = AllowSharedBytes(kernel, kSharedBytes, gpu.device, opted_in);
  if (e != cudaSuccess) return e;
  const int64_t slots = mxfp8::MaxSumOfTiles(p.rows, p.num_groups, kTileM) + 1;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kTileN)),
                  static_cast<unsigned>(MinI64(kMaxGridYZ, slots)));
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(p, o, slots);
  return cudaGetLastError();
}

struct WgmmaKernel {
  template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
  static cudaError_t Launch(const RaggedMProblem& p, const RaggedMOperands& o, cudaStream_t stream) {
    return cuda::Launch<kTransposed, kLhs, kRhs, O>(p, o, stream);
  }
};

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool Mxfp8RaggedMWgmmaFits(const RaggedMProblem& p, const RaggedMOperands& o, int major) {
  // Scale words: a step's two scales of a row share an aligned word (IssueStep), the
  // forward's scale rows are 16-byte chunks.
  const bool scale_rows_align = mxfp8::LhsScaleRowBytes(p) % 4 == 0 &&
                                mxfp8::RhsScaleRowBytes(p) % (p.rhs_transposed ? 4 : kChunk) == 0;
  // Sources' 32-bit offsets: x and dgrad's weights 32 * K * runs + K, the forward's weights
  // (K + kTileK) * N within a group.
  const bool offsets_fit = p.k <= (int64_t{1} << 24) && (p.k + kTileK) * p.n <= int64_t{0xFFFFFFFF};
  return major == 9 && p.k % 32 == 0 && p.n % kChunk == 0 && scale_rows_align && offsets_fit && Aligned16(o.lhs) &&
         Aligned16(o.lhs_scales) && Aligned16(o.rhs) && Aligned16(o.rhs_scales);
}

cudaError_t LaunchMxfp8RaggedMWgmma(const RaggedMProblem& p, const RaggedMOperands& o,
                                    cudaStream_t stream) {
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  return mxfp8_ragged_m::Dispatch<WgmmaKernel>(p, o, stream);
}

}  // namespace jgg::cuda
