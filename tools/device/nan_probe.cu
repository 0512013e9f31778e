// Whether the GPU's FMUL returns the canonical NaN 0x7FFFFFFF for any NaN operand (sign and
// payload dropped) and satfinite turns that into the fp8 byte 0x7F (e4m3 and e5m2): the MXFP8
// quantize kernels write the library's NaN byte on that alone (QuantizeValues in
// mxfp8_kernels.cuh). A probe, not part of the library; exits 1 if any NaN product differs:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a tools/device/nan_probe.cu \
//     -o build/probe/nan_probe
#include <cstdint>
#include <cstdio>
#include <cuda_fp8.h>

// Thread i multiplies NaN-or-not bits x[i / nf] by factor f[i % nf] (both operand orders) and
// converts the products to e4m3 and e5m2 pairs.
__global__ void Probe(const uint32_t* x, const float* f, int n, int nf, uint32_t* prod,
                      uint32_t* e4m3, uint32_t* e5m2) {
  const int i = threadIdx.x;
  if (i >= n * nf) return;
  const float a = __uint_as_float(x[i / nf]), b = f[i % nf];
  const float2 products = make_float2(__fmul_rn(a, b), __fmul_rn(b, a));
  prod[i] = __float_as_uint(products.x);
  e4m3[i] = __nv_cvt_float2_to_fp8x2(products, __NV_SATFINITE, __NV_E4M3);
  e5m2[i] = __nv_cvt_float2_to_fp8x2(products, __NV_SATFINITE, __NV_E5M2);
}

int main() {
  const uint32_t xs[] = {0xFFC00000u, 0xFF800001u, 0x7FC00001u, 0xFFFFFFFFu,
                         0xFFC10000u, 0xFF810000u, 0x7F810000u, 0xFFFF0000u,
                         0x7FFF0000u, 0x80000000u, 0xFF800000u};
  const float fs[] = {1.0f, 0x1p-10f, 0x1p100f, 0x1p-126f, -1.0f};
  constexpr int n = sizeof(xs) / 4, nf = sizeof(fs) / 4, count = n * nf;
  static_assert(count <= 128, "one block of 128 threads");
  uint32_t *dx, *dp, *d4, *d5;
  float* df;
  cudaMalloc(&dx, sizeof xs);
  cudaMalloc(&df, sizeof fs);
  cudaMalloc(&dp, 4 * count);
  cudaMalloc(&d4, 4 * count);
  cudaMalloc(&d5, 4 * count);
  cudaMemcpy(dx, xs, sizeof xs, cudaMemcpyHostToDevice);
  cudaMemcpy(df, fs, sizeof fs, cudaMemcpyHostToDevice);
  Probe<<<1, 128>>>(dx, df, n, nf, dp, d4, d5);
  uint32_t p[count], q[count], r[count];
  cudaMemcpy(p, dp, 4 * count, cudaMemcpyDeviceToHost);
  cudaMemcpy(q, d4, 4 * count, cudaMemcpyDeviceToHost);
  cudaMemcpy(r, d5, 4 * count, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < count; ++i) {
    printf("x=%08x f=%g  fmul=%08x  e4m3x2=%04x e5m2x2=%04x\n", xs[i / nf], fs[i % nf], p[i], q[i],
           r[i]);
    const bool nan_in = (xs[i / nf] & 0x7FFFFFFFu) > 0x7F800000u;
    if (nan_in && (p[i] != 0x7FFFFFFFu || q[i] != 0x7F7Fu || r[i] != 0x7F7Fu)) ++bad;
  }
  printf("%s: %d NaN products not canonical\n", bad ? "FAIL" : "OK", bad);
  return bad != 0;
}
