// Whether the GPU's FMUL returns the canonical NaN 0x7FFFFFFF for any NaN operand (sign and
// payload dropped) and satfinite turns that into the fp8 byte 0x7F (e4m3 and e5m2): the MXFP8
// quantize kernels write the library's NaN byte on that alone (QuantizeValues in
// mxfp8_kernels.cuh). A probe, not part of the library; exits 1 if any NaN product differs:
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a tools/device/nan_probe.cu -o build/probe/nan_probe
#include <cstdio>
#include <cstdint>
#include <cuda_fp8.h>
__global__ void Probe(const uint32_t* x, const float* f, int n, int nf, uint32_t* prod, uint32_t* fp8, uint32_t* fp8e5) {
  int i = threadIdx.x;
  if (i >= n * nf) return;
  float a = __uint_as_float(x[i / nf]), b = f[i % nf];
  float p = __fmul_rn(a, b);
  prod[i] = __float_as_uint(p);
  fp8[i] = __nv_cvt_float2_to_fp8x2(make_float2(p, __fmul_rn(b, a)), __NV_SATFINITE, __NV_E4M3);
  fp8e5[i] = __nv_cvt_float2_to_fp8x2(make_float2(p, __fmul_rn(b, a)), __NV_SATFINITE, __NV_E5M2);
}
int main() {
  const uint32_t xs[] = {0xFFC00000u, 0xFF800001u, 0x7FC00001u, 0xFFFFFFFFu, 0xFFC10000u, 0xFF810000u,
                         0x7F810000u, 0xFFFF0000u, 0x7FFF0000u, 0x80000000u, 0xFF800000u};
  const float fs[] = {1.0f, 0x1p-10f, 0x1p100f, 0x1p-126f, -1.0f};
  const int n = sizeof(xs) / 4, nf = sizeof(fs) / 4;
  uint32_t *dx, *dp, *d8, *d5; float* df;
  cudaMalloc(&dx, sizeof xs); cudaMalloc(&df, sizeof fs); cudaMalloc(&dp, 4 * n * nf); cudaMalloc(&d8, 4 * n * nf); cudaMalloc(&d5, 4 * n * nf);
  cudaMemcpy(dx, xs, sizeof xs, cudaMemcpyHostToDevice); cudaMemcpy(df, fs, sizeof fs, cudaMemcpyHostToDevice);
  Probe<<<1, 128>>>(dx, df, n, nf, dp, d8, d5);
  uint32_t p[128], q[128], r[128];
  cudaMemcpy(p, dp, 4 * n * nf, cudaMemcpyDeviceToHost); cudaMemcpy(q, d8, 4 * n * nf, cudaMemcpyDeviceToHost); cudaMemcpy(r, d5, 4 * n * nf, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n * nf; ++i) {
    printf("x=%08x f=%g  fmul=%08x  e4m3x2=%04x e5m2x2=%04x\n", xs[i / nf], fs[i % nf], p[i], q[i], r[i]);
    bool nan_in = (xs[i / nf] & 0x7FFFFFFFu) > 0x7F800000u;
    if (nan_in && (p[i] != 0x7FFFFFFFu || q[i] != 0x7F7Fu || r[i] != 0x7F7Fu)) ++bad;
  }
  printf("%s: %d NaN products not canonical\n", bad ? "FAIL" : "OK", bad);
  return bad != 0;
}
