// Runs CUDA kernels on the CPU for tests. Each CUDA thread of a CTA is a fiber (ucontext) on
// the calling OS thread, CTAs run one after another (in either order); __syncthreads and warp
// shuffles are barriers at which a fiber yields until every live thread of its block (or warp)
// has arrived, and a pass with no progress aborts as a deadlock. __shared__ variables are
// statics (one CTA lives at a time). Covers what kernels written in this style use:
// threadIdx/blockIdx/blockDim, __syncthreads, __shfl_{xor,up,}_sync, __ballot_sync and
// __reduce_add_sync over full warps, __ffs, __ldg, __stcs (a plain store), and
// the fp8/fp16/bf16 conversion intrinsics (their host paths: NVIDIA's software reference of
// the instructions).
// Include it before the kernel header; compile with g++ -std=c++20 -ffp-contract=off.
#ifndef JGG_TESTS_EMULATION_SIMT_SHIM_H_
#define JGG_TESTS_EMULATION_SIMT_SHIM_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <ucontext.h>
#include <vector_functions.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define JGG_SIMT_EMULATION 1  // kernels take their dynamic shared memory from statics
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict

using std::isnan;

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;

namespace simt {

constexpr size_t kStackBytes = 256 << 10;

struct Barrier {
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
};

struct Fiber {
  ucontext_t context;
  std::vector<char> stack;
  bool done = false;
};

struct Cta {
  std::vector<Fiber> fibers;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<uint64_t> slots;  // one shuffle slot per thread
  ucontext_t scheduler;
  std::function<void()> kernel;
  uint64_t events = 0;  // barrier releases and thread exits: progress
};
inline Cta* cta = nullptr;

inline void Yield() {
  swapcontext(&cta->fibers[threadIdx.x].context, &cta->scheduler);
}

inline void Release(Barrier& b) {
  b.arrived = 0;
  ++b.generation;
  ++cta->events;
}

inline void Arrive(Barrier& b) {
  const uint64_t generation = b.generation;
  if (++b.arrived == b.expected) {
    Release(b);
    return;
  }
  while (b.generation == generation) Yield();
}

// A thread that returns stops counting for the barriers of the others.
inline void Drop(Barrier& b) {
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) Release(b);
}

inline void FiberMain() {
  cta->kernel();
  const unsigned t = threadIdx.x;
  Drop(cta->block);
  Drop(cta->warps[t / 32]);
  cta->fibers[t].done = true;
  ++cta->events;
}  // returns to uc_link: the scheduler

// CTAs run in blockIdx order, or last to first when set (a kernel must not depend on either).
inline bool reverse_cta_order = false;

// Runs kernel() for every thread of `ctas` CTAs of `threads` threads (a multiple of 32).
template <typename Kernel>
void Launch(int64_t ctas, int threads, Kernel kernel) {
  blockDim = dim3(threads, 1, 1);
  Cta state;
  state.fibers.resize(threads);
  for (Fiber& f : state.fibers) f.stack.resize(kStackBytes);
  state.kernel = kernel;
  cta = &state;
  for (int64_t i = 0; i < ctas; ++i) {
    const int64_t b = reverse_cta_order ? ctas - 1 - i : i;
    blockIdx = make_uint3(static_cast<unsigned>(b), 0, 0);
    state.block = Barrier{threads};
    state.warps.assign(threads / 32, Barrier{32});
    state.slots.assign(threads, 0);
    for (Fiber& f : state.fibers) {
      f.done = false;
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack.data();
      f.context.uc_stack.ss_size = f.stack.size();
      f.context.uc_link = &state.scheduler;
      makecontext(&f.context, FiberMain, 0);
    }
    for (int live = threads; live > 0;) {
      const uint64_t before = state.events;
      live = 0;
      for (int t = 0; t < threads; ++t) {
        if (state.fibers[t].done) continue;
        threadIdx = make_uint3(t, 0, 0);
        swapcontext(&state.scheduler, &state.fibers[t].context);
        live += !state.fibers[t].done;
      }
      if (live > 0 && state.events == before) {
        std::fprintf(stderr, "simt: deadlock in CTA %lld\n", static_cast<long long>(b));
        std::abort();
      }
    }
  }
  cta = nullptr;
}

}  // namespace simt

inline void __syncthreads() { simt::Arrive(simt::cta->block); }

template <typename T, typename Source>
T ShuffleFrom(T value, Source source) {
  static_assert(sizeof(T) <= 8);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  simt::cta->slots[threadIdx.x] = bits;
  simt::Arrive(simt::cta->warps[warp]);
  const uint64_t got = simt::cta->slots[warp * 32 + source(lane)];
  simt::Arrive(simt::cta->warps[warp]);
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

template <typename T>
T __shfl_xor_sync(unsigned, T value, int mask) {
  return ShuffleFrom(value, [mask](unsigned lane) { return lane ^ mask; });
}
template <typename T>
T __shfl_up_sync(unsigned, T value, int delta) {
  return ShuffleFrom(value, [delta](unsigned lane) { return lane >= unsigned(delta) ? lane - delta : lane; });
}

template <typename T>
T __shfl_sync(unsigned, T value, int source) {
  return ShuffleFrom(value, [source](unsigned) { return static_cast<unsigned>(source) & 31u; });
}
// Every lane's value, in lane order: one exchange (two warp barriers) for a warp-wide vote or
// reduction, where 32 shuffles would take 64.
inline void WarpValues(uint32_t value, uint32_t (&out)[32]) {
  const unsigned warp = threadIdx.x >> 5;
  simt::cta->slots[threadIdx.x] = value;
  simt::Arrive(simt::cta->warps[warp]);
  for (unsigned lane = 0; lane < 32; ++lane) {
    out[lane] = static_cast<uint32_t>(simt::cta->slots[warp * 32 + lane]);
  }
  simt::Arrive(simt::cta->warps[warp]);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  uint32_t values[32];
  WarpValues(predicate != 0 ? 1u : 0u, values);
  unsigned mask = 0;
  for (unsigned lane = 0; lane < 32; ++lane) mask |= values[lane] << lane;
  return mask;
}
inline unsigned __reduce_add_sync(unsigned, unsigned value) {
  uint32_t values[32];
  WarpValues(value, values);
  unsigned sum = 0;
  for (unsigned lane = 0; lane < 32; ++lane) sum += values[lane];
  return sum;
}
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }

template <typename T>
T __ldg(const T* p) { return *p; }
template <typename T>
void __stcs(T* p, T v) { *p = v; }
// One thread runs at a time, so a plain read-modify-write is atomic.
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p += v;
  return old;
}
inline float __uint_as_float(uint32_t v) { float f; std::memcpy(&f, &v, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t v; std::memcpy(&v, &f, 4); return v; }
// As the GPU's FMUL: a NaN product is the canonical NaN 0x7FFFFFFF, whatever the operands' signs
// and payloads (the quantize kernels rely on it for their NaN bytes).
inline float __fmul_rn(float a, float b) {
  const float p = a * b;
  return p != p ? __uint_as_float(0x7FFFFFFFu) : p;
}
#endif  // JGG_TESTS_EMULATION_SIMT_SHIM_H_
