"""tools/kernel_resources.py: its reading of ptxas's report and of the build's nvcc flags."""

from tools import kernel_resources as kr

# Two entries as `nvcc --resource-usage` prints them (sm_90a, 2026-11-29), the first spilling.
PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN3jgg4cuda13mxfp8_kernels16DequantizeKernelIfEEvv' for 'sm_90a'
ptxas info    : Function properties for _ZN3jgg4cuda13mxfp8_kernels16DequantizeKernelIfEEvv
    24 bytes stack frame, 20 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 24 bytes cumulative stack size, 13824 bytes smem
ptxas info    : Compile time = 5183.669 ms
ptxas info    : Compiling entry function '_Z6Kernelv' for 'sm_90a'
ptxas info    : Function properties for _Z6Kernelv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 76 registers, used 1 barriers, 13824 bytes smem
"""


def test_parse_ptxas_reads_each_entry():
  kernels = kr.parse_ptxas(PTXAS_LOG)
  assert kernels == {
      "_ZN3jgg4cuda13mxfp8_kernels16DequantizeKernelIfEEvv": kr.KernelResources(128, 20, 28, 24),
      "_Z6Kernelv": kr.KernelResources(76, 0, 0, 0),
  }


def test_build_flags_follow_cuda_bzl():
  flags = kr.build_flags(kr.CUDA_BZL.read_text())
  assert "-O3" in flags and "-DNDEBUG" in flags and "-std=c++17" in flags
  gencode = [f for f in flags if f.startswith("-gencode")]
  assert gencode and all("code=sm_" in f for f in gencode)  # the cubin ptxas reports on


def test_table_shows_only_what_changed():
  before = kr.parse_ptxas(PTXAS_LOG)
  after = dict(before, _Z6Kernelv=kr.KernelResources(80, 36, 36, 40))
  rows = kr.table(before, after, "", changed_only=True).splitlines()[2:]
  assert len(rows) == 1 and "76 regs" in rows[0] and "80 regs, spills 36/36 B" in rows[0]


def test_without_signature_keeps_template_arguments():
  demangled = ("void jgg::cuda::mxfp8_kernels::QuantizeWideKernel<__nv_bfloat16, true, "
               "(jgg::mxfp8::Fp8Format)0>(jgg::cuda::mxfp8_kernels::Grid, bool)")
  assert kr._without_signature(demangled) == (
      "jgg::cuda::mxfp8_kernels::QuantizeWideKernel<__nv_bfloat16, true, (jgg::mxfp8::Fp8Format)0>")
