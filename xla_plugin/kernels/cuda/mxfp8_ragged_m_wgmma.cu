// Dequantize-on-load MXFP8 grouped GEMM on Hopper's wgmma (see mxfp8_ragged_m_wgmma.h).
//
// A block (one warpgroup) computes a 64-row tile of one group (mxfp8_ragged_m_passes.cuh's
// passes, with 64-row tiles) for 128 output columns. Per 64-deep step of K, each thread loads
// its share of the x tile [64, 64] and the weight tile [128 columns, 64] as fp8 codes and E8M0
// scales, turns them into bf16 (code * 2^(e - 127), the integer conversion of ExactScaling)
// and stores them in shared memory in the layouts wgmma reads (128-byte swizzle; the
// forward's weights N-major as stored, dgrad's K-major), then one wgmma 64x128x16 per 16 of K
// adds the products to f32 accumulators. The next step's loads are in flight during the
// wgmma; the conversion waits for it (several blocks per SM overlap each other's).
//
// Exactness: the bf16 values are the dequantized values exactly, and so are their products
// in f32, while every scale of the step is in FastScales' range (or its block's codes are all
// zero); then the result is the f32 sum of exact products, as the mma kernel's. A step with a
// scale outside it (tiny or huge blocks, NaN or Inf codes) is computed element by element in
// f32 instead (slow, exact, the same NaN and Inf as dequantize -> f32 matmul).
#include "xla_plugin/kernels/cuda/mxfp8_ragged_m_wgmma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "xla_plugin/common/ragged_layout.h"
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
constexpr int64_t kMaxGridY = 65535;

// Scales whose values take the bf16 path: the dequantized codes are normal bf16 numbers (so
// exact), and any product of two such values is a normal f32 below 2^112 (each operand's range
// carries half of that condition, so it holds whatever the other operand's format).
template <Fp8Format kFormat>
struct FastScales {
  using Exact = ExactScaling<__nv_bfloat16, kFormat>;
  static constexpr int Max(int a, int b) { return a > b ? a : b; }
  static constexpr int Min(int a, int b) { return a < b ? a : b; }
  static constexpr int kLo = Max(Exact::kMinScale, 64 - Exact::kCodeMinExponent);
  static constexpr int kHi = Min(Exact::kMaxScale, 183 - (Exact::kCodeMaxExponent + 1));
  static_assert(kLo < 127 && kHi > 127);
  static constexpr uint32_t kFactorOffset = Exact::kBiasGap + Exact::kOut.bias - 127;

  __device__ static bool InRange(uint32_t e) { return e - kLo <= static_cast<uint32_t>(kHi - kLo); }
  // Per byte of four scales: 0xFF where in range.
  __device__ static uint32_t InRange4(uint32_t e4) {
    return __vcmpgeu4(e4, kLo * 0x01010101u) & __vcmpleu4(e4, kHi * 0x01010101u);
  }
  // Two bf16 factors 2^(e - 127) relative to Exact's code encoding, for two codes of scale e.
  __device__ static uint32_t Factor2(uint32_t e) { return Exact::FactorBits(e) * 0x00010001u; }
  // The factors of four codes with the scales of e4's bytes (all in range): lanes (0, 1), (2, 3).
  __device__ static void Factors4(uint32_t e4, uint32_t (&f)[2]) {
    f[0] = (__byte_perm(e4, 0, 0x4140) + kFactorOffset * 0x00010001u) << Exact::kOut.mantissa_bits;
    f[1] = (__byte_perm(e4, 0, 0x4342) + kFactorOffset * 0x00010001u) << Exact::kOut.mantissa_bits;
  }
};

__device__ inline uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ inline bool AnyNonzeroCode(const uint4& codes) {
  return ((codes.x | codes.y | codes.z | codes.w) & 0x7F7F7F7Fu) != 0;
}

// Stores 8 bf16 (4 words) at each of lo and hi: 16-byte runs of the swizzled tiles (the
// swizzle moves 16-byte chunks, so the two halves of 16 values are stored apart).
__device__ inline void StoreHalves(const uint32_t (&out)[8], void* lo, void* hi) {
  *static_cast<uint4*>(lo) = make_uint4(out[0], out[1], out[2], out[3]);
  *static_cast<uint4*>(hi) = make_uint4(out[4], out[5], out[6], out[7]);
}

// 16 codes sharing scale e -> 16 bf16 at lo (first 8) and hi. Returns whether the bf16 path
// cannot take them.
template <Fp8Format kFormat>
__device__ inline bool StoreUniform(const uint4& codes, uint32_t e, void* lo, void* hi) {
  using F = FastScales<kFormat>;
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  const bool fast = F::InRange(e);
  const bool slow = F::Exact::AnySpecial(words) || (!fast && AnyNonzeroCode(codes));
  const uint32_t factor = F::Factor2(fast ? e : 127u);  // all-zero codes: any factor gives 0
  const uint32_t factors[2] = {factor, factor};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) F::Exact::Convert(words[i], factors, &out[2 * i]);
  StoreHalves(out, lo, hi);
  return slow;
}

// 16 codes with one scale each (scales' bytes in code order) -> 16 bf16 at lo and hi.
template <Fp8Format kFormat>
__device__ inline bool StorePerCode(const uint4& codes, const uint4& scales, void* lo, void* hi) {
  using F = FastScales<kFormat>;
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  bool slow = F::Exact::AnySpecial(words);
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t e4 = Word(scales, i), in = F::InRange4(e4);
    slow |= (__vcmpne4(words[i] & 0x7F7F7F7Fu, 0) & ~in) != 0;
    uint32_t factors[2];
    F::Factors4((e4 & in) | (127u * 0x01010101u & ~in), factors);
    F::Exact::Convert(words[i], factors, &out[2 * i]);
  }
  StoreHalves(out, lo, hi);
  return slow;
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

struct SharedStorage {
  alignas(1024) __nv_bfloat16 a[kTileM * kTileK];
  alignas(1024) __nv_bfloat16 b[kTileN * kTileK];
  int64_t lhs_scale_offsets[kTileM];
  Pass pass;
  bool has_work;
};

// One step's codes and scales of this thread, loaded a step ahead.
//   x:  row tid / 2 of the tile, MX block tid % 2 of the step (32 codes, one scale).
//   w:  forward, K row tid / 2, columns 64 (tid % 2) + 16c (16 codes and 16 scales each);
//       dgrad, column tid, K 16c (16 codes each, scales of the step's two blocks).
struct StepLoads {
  uint4 x[2];
  uint32_t x_scale;
  uint4 w[4];
  uint4 w_scales[4];  // forward: per code; dgrad: .x holds the two block scales
};

template <bool kTransposed>
__device__ inline void LoadStep(const RaggedMProblem& p, const RaggedMOperands& o,
                                const SharedStorage& s, const uint8_t* w, const uint8_t* w_scales,
                                int64_t n0, int64_t k0, StepLoads& l) {
  const int t = threadIdx.x;
  {
    const int r = t / 2, h = t % 2;
    const int64_t k = k0 + 32 * h, offset = r < s.pass.rows ? s.lhs_scale_offsets[r] : -1;
    l.x[0] = l.x[1] = make_uint4(0, 0, 0, 0);
    l.x_scale = 127;
    if (offset >= 0 && k < p.k) {
      const uint4* src = reinterpret_cast<const uint4*>(o.lhs + (s.pass.row_begin + r) * p.k + k);
      l.x[0] = src[0];
      l.x[1] = src[1];
      l.x_scale = o.lhs_scales[offset + k / 32];
    }
  }
  if constexpr (kTransposed) {
    const int64_t n = n0 + t;
    const int64_t row_bytes = mxfp8::RhsScaleRowBytes(p);
    l.w_scales[0].x = 127u * 0x0101u;
    if (n < p.n && k0 + 32 < p.k) {
      l.w_scales[0].x = *reinterpret_cast<const uint16_t*>(w_scales + n * row_bytes + k0 / 32);
    } else if (n < p.n && k0 < p.k) {
      l.w_scales[0].x = w_scales[n * row_bytes + k0 / 32] | (127u << 8);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t k = k0 + kChunk * c;
      l.w[c] = n < p.n && k < p.k ? *reinterpret_cast<const uint4*>(w + n * p.k + k)
                                  : make_uint4(0, 0, 0, 0);
    }
  } else {
    const int64_t k = k0 + t / 2;
    const int64_t row_bytes = mxfp8::RhsScaleRowBytes(p);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t n = n0 + 64 * (t % 2) + kChunk * c;
      const bool in = k < p.k && n < p.n;
      l.w[c] = in ? *reinterpret_cast<const uint4*>(w + k * p.n + n) : make_uint4(0, 0, 0, 0);
      l.w_scales[c] = in ? *reinterpret_cast<const uint4*>(w_scales + (k / 32) * row_bytes + n)
                         : make_uint4(127u * 0x01010101u, 127u * 0x01010101u, 127u * 0x01010101u,
                                      127u * 0x01010101u);
    }
  }
}

// Stores the step's bf16 tiles; returns whether any of this thread's values needs the exact path.
template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, class SA, class SB>
__device__ inline bool StoreStep(const StepLoads& l, SA& sA, SB& sB) {
  const int t = threadIdx.x;
  bool slow = false;
  {
    const int r = t / 2, k = 32 * (t % 2);
    slow |= StoreUniform<kLhs>(l.x[0], l.x_scale, &sA(r, k), &sA(r, k + 8));
    slow |= StoreUniform<kLhs>(l.x[1], l.x_scale, &sA(r, k + 16), &sA(r, k + 24));
  }
  if constexpr (kTransposed) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      slow |= StoreUniform<kRhs>(l.w[c], (l.w_scales[0].x >> (8 * (c / 2))) & 0xFFu,
                                 &sB(t, kChunk * c), &sB(t, kChunk * c + 8));
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int n = 64 * (t % 2) + kChunk * c;
      slow |= StorePerCode<kRhs>(l.w[c], l.w_scales[c], &sB(n, t / 2), &sB(n + 8, t / 2));
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
__device__ void AddStepExactly(const RaggedMProblem& p, const RaggedMOperands& o,
                               const SharedStorage& s, const uint8_t* w, const uint8_t* w_scales,
                               int64_t n0, int64_t k0, Acc& acc, const Coords& coords) {
  const int64_t k_end = MinI64(p.k, k0 + kTileK);
  // Unrolled: the accumulators stay registers (a dynamic index would move them to the stack).
#pragma unroll
  for (int i = 0; i < cute::size(acc); ++i) {
    const int r = cute::get<0>(coords(i));
    const int64_t n = n0 + cute::get<1>(coords(i));
    if (r >= s.pass.rows || n >= p.n || s.lhs_scale_offsets[r] < 0) continue;
    acc(i) += ExactDot<kTransposed, kLhs, kRhs>(p, o.lhs + (s.pass.row_begin + r) * p.k,
                                                o.lhs_scales + s.lhs_scale_offsets[r], w, w_scales,
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
  StepLoads loads;
  LoadStep<kTransposed>(p, o, s, w, w_scales, n0, 0, loads);
  for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
    warpgroup_wait<0>();  // the previous step's wgmma is done reading shared memory
    __syncthreads();
    const bool slow = StoreStep<kTransposed, kLhs, kRhs>(loads, sA, sB);
    cutlass::arch::fence_view_async_shared();  // the stores, visible to wgmma
    const bool any_slow = __syncthreads_or(slow);
    if (k0 + kTileK < p.k) LoadStep<kTransposed>(p, o, s, w, w_scales, n0, k0 + kTileK, loads);
    if (!any_slow) {
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      gemm(mma, tCrA, tCrB, acc);
      warpgroup_commit_batch();
    } else {
      warpgroup_fence_operand(acc);
      AddStepExactly<kTransposed, kLhs, kRhs>(p, o, s, w, w_scales, n0, k0, acc, coords);
    }
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);

  O* out = static_cast<O*>(o.out);
#pragma unroll
  for (int i = 0; i < size(acc); ++i) {
    const int r = get<0>(coords(i));
    const int64_t n = n0 + get<1>(coords(i));
    if (r >= s.pass.rows || n >= p.n) continue;
    // A row of no lhs group is 0 whatever the weights hold.
    out[(s.pass.row_begin + r) * p.n + n] = FromFloat<O>(s.lhs_scale_offsets[r] >= 0 ? acc(i) : 0.0f);
  }
}

template <bool kTransposed, Fp8Format kLhs, Fp8Format kRhs, typename O>
__global__ void __launch_bounds__(kThreads, 3) Mxfp8RaggedMWgmmaKernel(RaggedMProblem p,
                                                                      RaggedMOperands o, int64_t slots) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ SharedStorage s;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  for (int64_t slot = blockIdx.y; slot < slots; slot += gridDim.y) {
    __syncthreads();  // the previous slot is done with `s`
    if (threadIdx.x < 32) {
      const bool found = mxfp8_ragged_m::LocatePass(p, o.group_sizes, slot, /*one_tile_passes=*/true,
                                                    &s.pass, kTileM);
      __syncwarp();
      if (found && !s.pass.tail)
        mxfp8_ragged_m::LocateLhsScaleRows(p, o.lhs_group_sizes, s.pass.row_begin, s.pass.rows,
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
  const int64_t slots = mxfp8::MaxSumOfTiles(p.rows, p.num_groups, kTileM) + 1;
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.n, kTileN)),
                  static_cast<unsigned>(MinI64(kMaxGridY, slots)));
  Mxfp8RaggedMWgmmaKernel<kTransposed, kLhs, kRhs, O><<<grid, kThreads, 0, stream>>>(p, o, slots);
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
  return major == 9 && p.k % 32 == 0 && p.n % kChunk == 0 && Aligned16(o.lhs) &&
         Aligned16(o.rhs) && Aligned16(o.rhs_scales);
}

cudaError_t LaunchMxfp8RaggedMWgmma(const RaggedMProblem& p, const RaggedMOperands& o,
                                    cudaStream_t stream) {
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  return mxfp8_ragged_m::Dispatch<WgmmaKernel>(p, o, stream);
}

}  // namespace jgg::cuda
