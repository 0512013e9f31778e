"""One quantize and one dequantize per probe row, for ncu kernel durations."""
import jax, jax.numpy as jnp
import jax_grouped_gemm as jgg
from tools.bench import mxfp8_bench, shapes as S
for name, tensor in (("decode","activation"),("mixtral","activation"),("qwen3-30b","weight")):
  shape = S.by_name([name])[0]
  x, sizes = mxfp8_bench._operands(shape, tensor)
  q = jax.block_until_ready(jgg.mxfp8.quantize(x, sizes))
  d = jax.block_until_ready(jgg.mxfp8.dequantize(q, jnp.bfloat16))
  print(name, tensor, d.shape, flush=True)
