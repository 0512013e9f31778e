"""Edge cases of every CUDA ragged GEMM path, for `compute-sanitizer --tool memcheck`.

Empty groups, skew, sum(group_sizes) < M and > M, negative sizes, odd and
aligned K/N, both the tensor-core and SIMT paths (bf16, f16 and f32 inputs; bf16 and
f16 also with f32 results), forward, dgrad and wgrad. Exits non-zero on a wrong result.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jax_grouped_gemm as jgg
import reference

CASES = [  # (M, K, N, group sizes)
    (256, 64, 128, [64, 0, 100, 92]),
    (300, 128, 64, [0, 0, 0, 0]),
    (300, 128, 64, [-5, 400, 3, 1]),
    (77, 24, 40, [13, 0, 29, 1]),
    (77, 31, 45, [13, 0, 29, 1]),
    (1, 8, 8, [1, 0]),
    # wgrad: streamed groups (<= 8 rows) beside tensor-core ones; K not a multiple of 64,
    # N over one streamed block's 2048 columns.
    (60, 72, 2056, [0, 1, 2, 3, 4, 5, 8, 9, 16, 0, 7]),
    # wgrad: short contractions (one 64-row k-block, or a row past it) on partial tiles at both
    # edges (P = 200, N = 264); sum > M clamps the last group.
    (220, 200, 264, [33, 64, 65, 0, 17, 47, 30]),
    # Thousands of rows per group, N not a multiple of the tile's, sum > M: the last group is
    # clamped to the rows left.
    (6200, 64, 136, [3000, 0, 4000]),
    # A hot group of 25 row tiles, walked in two bands of row tiles by forward and dgrad, over
    # three column tiles (the last 8 columns wide); sum < M.
    (3300, 520, 520, [3200, 0, 50]),
    # Wgrad's output of 25 row tiles: 13 rows of 2x1 clusters, the last half padding.
    (400, 3200, 264, [300, 0, 90]),
]


# (input dtype, preferred_element_type): every kernel family of the dispatcher.
DTYPES = [(jnp.bfloat16, None), (jnp.float16, None), (jnp.float32, None),
          (jnp.bfloat16, jnp.float32), (jnp.float16, jnp.float32)]


def main():
  failures = 0
  for dtype, preferred in DTYPES:
    for m, k, n, sizes in CASES:
      rng = np.random.default_rng(m * k + n)
      x = jnp.asarray(rng.standard_normal((m, k)), dtype)
      w = jnp.asarray(rng.standard_normal((len(sizes), k, n)), dtype)
      ct = jnp.asarray(rng.standard_normal((m, n)), dtype)
      gs = jnp.asarray(sizes, jnp.int32)
      out, vjp = jax.vjp(lambda a, b: jgg.ragged_dot(a, b, gs, preferred_element_type=preferred),
                         x, w)
      ct = ct.astype(out.dtype)
      dx, dw = vjp(ct)
      f32 = lambda a: np.asarray(a.astype(jnp.float32))
      tol = reference.TOLERANCE[jnp.dtype(dtype).name]
      checks = {
          "fwd": reference.relative_error(out, reference.ragged_m(f32(x), f32(w), sizes)),
          "dgrad": reference.relative_error(dx, reference.ragged_m(f32(ct), f32(w), sizes, rhs_transposed=True)),
          "wgrad": reference.relative_error(dw, reference.ragged_k(f32(x), f32(ct), sizes, len(sizes))),
      }
      bad = {name: err for name, err in checks.items() if not err <= tol}
      failures += bool(bad)
      print(jnp.dtype(dtype).name, "->", out.dtype.name, (m, k, n, sizes),
            "FAIL " + str(bad) if bad else "ok")
  raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
  main()
