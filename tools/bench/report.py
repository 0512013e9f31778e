"""Benchmark results as TFLOP/s, ratios and SPEC section 8 targets: Markdown, JSON, PNG.

One row per (shape, pass). The dense ceiling of a row is the faster of
jnp.dot and torch.mm on its FLOPs; the copy ceiling the faster of the two
device copies. Targets (SPEC section 8, judged against the same run):
  compute-bound shapes: ours >= 1.05x torch._grouped_mm, or, where torch is
    already above 0.92x dense, ours >= 0.97x dense;
  weight-bandwidth-bound shapes (decode): ours moves the weight bytes at
    >= 85% of the copy bandwidth.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tools.bench import worker_protocol as wp

GROUPED = ("ours", "torch", "pallas", "lax")  # table columns, in this order
TORCH_TARGET, DENSE_TARGET, TORCH_NEAR_DENSE, COPY_TARGET = 1.05, 0.97, 0.92, 0.85
CHECK_TOLERANCE = 1e-2  # bf16 operands and output: expected 1e-3 .. 5e-3
CELL_REASON_CHARS = 40
COPY_METHOD = {"copy_jax": "jax x + 1", "copy_torch": "torch copy_"}


def build(plan: wp.Plan, results: dict, devices: list, command: str = "", started=None,
          wall_seconds=None) -> dict:
  """The JSON-able summary: meta data, ceilings, one row per (shape, pass), raw records."""
  copy = {c: _bandwidth(results.get(wp.task_key(wp.COPY_SHAPE, wp.COPY_PASS, c)))
          for c in ("copy_jax", "copy_torch") if c in plan.competitors}
  copy_bw = max((v for v in copy.values() if v), default=None)
  rows = [_row(plan, results, shape, pass_name, copy_bw)
          for shape in plan.shapes for pass_name in plan.passes]
  return {
      "meta": {
          "date": started.isoformat(timespec="seconds") if started else None,
          "command": command,
          "devices": {d["framework"]: d["device"] for d in devices},
          "versions": {k: v for d in devices for k, v in d.get("versions", {}).items()},
          "calls_per_run": plan.calls, "runs": plan.runs,
          "warmup_seconds": plan.warmup_seconds, "wall_seconds": wall_seconds,
          "competitors": plan.competitors,
      },
      "ceilings": {"copy_bytes_per_second": copy_bw,
                   "copy_by_method": copy},
      "rows": rows,
      "records": results,
  }


def _bandwidth(record):
  if not record or "seconds" not in record:
    return None
  return record["bytes_moved"] / record["seconds"]


def _row(plan, results, shape, pass_name, copy_bw) -> dict:
  flops = shape.flops()
  tflops, errors, seconds, runs = {}, {}, {}, {}
  for competitor in plan.competitors:
    if competitor.startswith("copy"):
      continue
    record = results.get(wp.task_key(shape.name, pass_name, competitor))
    if record is None:
      continue
    if "seconds" in record:
      seconds[competitor] = record["seconds"]
      tflops[competitor] = flops / record["seconds"] / 1e12
      runs[competitor] = record.get("runs")
    else:
      errors[competitor] = record.get("error", "no result")
  dense_sources = {c: tflops[c] for c in ("dense_jax", "dense_torch") if c in tflops}
  dense = max(dense_sources.values(), default=None)
  ours, torch = tflops.get("ours"), tflops.get("torch")
  ratios = {"ours/torch": _ratio(ours, torch), "ours/dense": _ratio(ours, dense),
            "torch/dense": _ratio(torch, dense)}
  weight_bw_fraction = {}
  if shape.bound == "weight_bandwidth" and copy_bw:
    weight_bw_fraction = {c: shape.weight_bytes(pass_name) / s / copy_bw
                          for c, s in seconds.items() if c in GROUPED}
  ours_record = results.get(wp.task_key(shape.name, pass_name, "ours"), {})
  check = ours_record.get("check_rel_err")
  # A row whose check ran and failed (or never produced an error) meets nothing.
  checked_ok = (None if not plan.check else
                check is not None and math.isfinite(check) and check <= CHECK_TOLERANCE)
  return {
      "shape": shape.name, "pass": pass_name, "routing": shape.routing, "bound": shape.bound,
      "M": shape.tokens, "K": shape.hidden, "N": shape.ffn, "G": shape.experts,
      "rows_used": shape.rows_used(), "flops": flops,
      "tflops": tflops, "seconds": seconds, "runs": runs, "errors": errors,
      "dense_tflops": dense, "dense_by_method": dense_sources,
      "pallas_config": results.get(wp.task_key(shape.name, pass_name, "pallas"), {}).get("config"),
      "ratios": ratios, "weight_bw_fraction": weight_bw_fraction,
      "target": _target(shape, ratios, weight_bw_fraction.get("ours"), checked_ok),
      "check_rel_err": ours_record.get("check_rel_err"),
      "check_error": ours_record.get("check_error"),
  }


def _ratio(a, b):
  return a / b if a is not None and b else None


def _target(shape, ratios, ours_weight_bw_fraction, checked_ok=None) -> dict:
  """Which SPEC section 8 rule applies to this row, what it needs, what ours reached; a row
  whose correctness check failed (checked_ok False) is not met whatever its speed."""
  if shape.bound == "weight_bandwidth":
    against, needed, reached = "copy", COPY_TARGET, ours_weight_bw_fraction
  elif ratios["torch/dense"] is not None and ratios["torch/dense"] > TORCH_NEAR_DENSE:
    against, needed, reached = "dense", DENSE_TARGET, ratios["ours/dense"]
  else:
    against, needed, reached = "torch", TORCH_TARGET, ratios["ours/torch"]
  met = None if reached is None else reached >= needed and checked_ok is not False
  return {"against": against, "needed": needed, "reached": reached, "met": met,
          "check_failed": checked_ok is False}


# --- Markdown -----------------------------------------------------------------------

def markdown(summary: dict) -> str:
  meta, rows = summary["meta"], summary["rows"]
  competitors = meta["competitors"]
  grouped = [c for c in GROUPED if c in competitors]
  has_dense = any(c.startswith("dense") for c in competitors)
  has_bandwidth = any(r["bound"] == "weight_bandwidth" for r in rows)
  header = ["shape", "pass"] + [_title(c) for c in grouped]
  header += ["dense"] if has_dense else []
  header += ["ours/torch", "ours/dense", "torch/dense"]
  header += ["weight BW / copy: ours (torch)"] if has_bandwidth else []
  header += ["target", "check"]
  lines = [_heading(summary), "", "| " + " | ".join(header) + " |",
           "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|"]
  notes = []
  for r in rows:
    cells = [r["shape"], r["pass"]]
    for c in grouped:
      cells.append(_cell(r, c, notes))
    if has_dense:
      cells.append(_number(r["dense_tflops"]))
    cells += [_times(r["ratios"][k]) for k in ("ours/torch", "ours/dense", "torch/dense")]
    if has_bandwidth:
      cells.append(_bandwidth_cell(r["weight_bw_fraction"]))
    cells += [_target_cell(r["target"]), _check_cell(r)]
    lines.append("| " + " | ".join(cells) + " |")
  lines += ["", "TFLOP/s: 2 * sum(group_sizes) * K * N per pass over the median time per call. "
            "dense: the faster of jnp.dot and torch.mm on the same FLOPs and layouts. "
            "check: ||ours - jax.lax|| / ||jax.lax|| on a sample of the output "
            f"(fails above {CHECK_TOLERANCE:g}; a failed check makes the row SHORT)."
            + (" weight BW: the bytes of w a pass moves (forward and dgrad: the experts with "
               "rows; wgrad: all of dw) per second, over the copy ceiling." if has_bandwidth
               else "")]
  notes += (_ceiling_notes(summary) + _method_notes(summary) + _pallas_notes(rows)
            + _cut_run_notes(rows, meta["runs"]))
  if notes:
    lines += ["", "Notes:"] + [f"- {n}" for n in notes]
  return "\n".join(lines) + "\n"


def _heading(summary) -> str:
  meta, ceilings = summary["meta"], summary["ceilings"]
  devices = "; ".join(f"{k}: {v}" for k, v in meta["devices"].items()) or "unknown"
  versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
  copy = ", ".join(f"{COPY_METHOD[k]} {_bytes_per_second(v)}" if v else f"{COPY_METHOD[k]} n/a"
                   for k, v in ceilings["copy_by_method"].items())
  parts = [f"### Grouped GEMM benchmark, {meta['date'] or 'undated'}", "",
           f"- Device: {devices}. Versions: {versions or 'unknown'}.",
           f"- Command: `{meta['command']}`" if meta["command"] else None,
           f"- Method: median over {meta['runs']} timed runs of >= {meta['calls_per_run']} "
           "calls (JAX: jitted loops of calls, enqueued back to back; torch: CUDA events "
           "around the calls), "
           + (f"after {meta['warmup_seconds']:g} s of the same runs back to back (the "
              "power-limited sustained rate); " if meta.get("warmup_seconds") else
              "with no warm-up (rates from an idle GPU's first second, above the sustained "
              "power-limited rate of large GEMMs); ")
           + "bf16 operands and outputs, f32 accumulation, random normal data.",
           f"- Copy ceiling (bytes read + written): {copy or 'not measured'}."]
  if meta.get("wall_seconds") is not None:
    parts.append(f"- Wall time of the run: {meta['wall_seconds']:.0f} s.")
  return "\n".join(p for p in parts if p is not None)


def _bytes_per_second(value) -> str:
  return f"{value / 1e12:.2f} TB/s" if value >= 1e11 else f"{value / 1e9:.3g} GB/s"


def _title(competitor) -> str:
  return {"ours": "ours", "torch": "torch._grouped_mm", "pallas": "Pallas mgpu",
          "lax": "jax.lax"}[competitor]


def _number(value) -> str:
  if value is None:
    return ""
  return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def _cell(row, competitor, notes) -> str:
  if competitor in row["tflops"]:
    return _number(row["tflops"][competitor])
  if competitor not in row["errors"]:
    return ""
  reason = row["errors"][competitor]
  notes.append(f"{row['shape']} {row['pass']} {_title(competitor)}: {reason}")
  short = reason if len(reason) <= CELL_REASON_CHARS else reason[:CELL_REASON_CHARS - 3] + "..."
  return f"n/a ({short.replace('|', '/')})"


def _bandwidth_cell(fractions) -> str:
  ours, torch = fractions.get("ours"), fractions.get("torch")
  text = f"{ours:.0%}" if ours is not None else ("n/a" if fractions else "")
  return text + (f" ({torch:.0%})" if torch is not None else "")


def _times(ratio) -> str:
  return f"{ratio:.2f}x" if ratio is not None else ""


def _target_cell(target) -> str:
  if target["met"] is None:
    return "n/a"
  # One more digit than the ratio columns, so that a SHORT row shows why (0.966x < 0.97x).
  if target["against"] == "copy":
    reached, needed, what = f"{target['reached']:.1%}", f"{target['needed']:.0%}", "copy BW"
  else:
    reached, needed, what = f"{target['reached']:.3f}x", f"{target['needed']:.2f}x", \
        target["against"]
  if target.get("check_failed"):
    return f"SHORT (check failed; {reached} {what})"
  if target["met"]:
    return f"met ({reached} {what})"
  return f"SHORT ({reached} {what} < {needed})"


def _check_cell(row) -> str:
  err = row["check_rel_err"]
  if err is None:
    return "n/a" if row["check_error"] else ""
  ok = math.isfinite(err) and err <= CHECK_TOLERANCE
  return f"{err:.1e}" + ("" if ok else " FAIL")


def _ceiling_notes(summary) -> list:
  """Why a ceiling measurement is missing (each reason once)."""
  counts = {}
  for key, record in summary["records"].items():
    competitor = key.split("|")[-1]
    if competitor not in GROUPED and "error" in record:
      counts[(competitor, record["error"])] = counts.get((competitor, record["error"]), 0) + 1
  return [f"{competitor} n/a ({n} {'entry' if n == 1 else 'entries'}): {reason}"
          for (competitor, reason), n in counts.items()]


def _method_notes(summary) -> list:
  """JAX measurements timed unlooped, as XLA compiled both loop chains badly (see jax_loop)."""
  notes = []
  for key, record in summary["records"].items():
    if record.get("method") == "unlooped" and "reused_from" not in record:
      reasons = "; ".join(f"{k}: {v}" for k, v in record["loops_rejected"].items())
      notes.append(f"{key.replace('|', ' ')} timed {record.get('method')} ({reasons})")
  return notes


def _pallas_notes(rows) -> list:
  configs = [f"{r['shape']} {r['pass']}: {r['pallas_config']}" for r in rows if r["pallas_config"]]
  return ["Pallas best block config: " + "; ".join(configs)] if configs else []


def _cut_run_notes(rows, planned_runs) -> list:
  cut = [f"{r['shape']} {r['pass']} {_title(c) if c in GROUPED else c}: {n}"
         for r in rows for c, n in r["runs"].items() if n is not None and n < planned_runs]
  if not cut:
    return []
  return ["Fewer timed runs where the planned runs would have taken over the time budget "
          "(slow competitors): " + "; ".join(cut)]


# --- chart and files ----------------------------------------------------------------

def write_chart(summary: dict, path) -> None:
  """Bars per (shape, pass): TFLOP/s of compute-bound rows; % of copy bandwidth of the others."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = summary["rows"]
  compute = [r for r in rows if r["bound"] == "compute"]
  bandwidth = [r for r in rows if r["bound"] == "weight_bandwidth" and r["weight_bw_fraction"]]
  panels = [p for p in (compute, bandwidth) if p]
  if not panels:
    return
  fig, axes = plt.subplots(1, len(panels), squeeze=False,
                           figsize=(max(8.0, 0.9 * len(rows) + 2), 5.0),
                           gridspec_kw={"width_ratios": [len(p) for p in panels]})
  grouped = [c for c in GROUPED if c in summary["meta"]["competitors"]]
  for ax, panel in zip(axes[0], panels):
    if panel is compute:
      series = grouped + (["dense"] if any(r["dense_tflops"] for r in panel) else [])
      value = lambda r, c: r["dense_tflops"] if c == "dense" else r["tflops"].get(c)
      ax.set_ylabel("TFLOP/s (bf16)")
    else:
      series = grouped
      value = lambda r, c: 100 * r["weight_bw_fraction"].get(c, 0.0)
      ax.set_ylabel("weight bytes / time, % of copy bandwidth")
      ax.axhline(100 * COPY_TARGET, color="gray", linestyle="--", linewidth=0.8)
    width = 0.8 / len(series)
    for i, name in enumerate(series):
      offsets = [x + (i - (len(series) - 1) / 2) * width for x in range(len(panel))]
      ax.bar(offsets, [value(r, name) or 0.0 for r in panel], width,
             label=_title(name) if name in GROUPED else "dense (cuBLAS)")
    ax.set_xticks(range(len(panel)))
    ax.set_xticklabels([f"{r['shape']}\n{r['pass']}" for r in panel], fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=min(len(series), 3), loc="upper center",
              bbox_to_anchor=(0.5, -0.12))
  devices = "; ".join(dict.fromkeys(summary["meta"]["devices"].values()))
  fig.suptitle(f"Grouped GEMM, {devices} ({summary['meta']['date'] or 'undated'})", fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write_all(summary: dict, out_dir) -> str:
  """Writes results.json, results.md and chart.png; returns the Markdown."""
  out_dir = Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  (out_dir / "results.json").write_text(json.dumps(summary, indent=1, default=str))
  text = markdown(summary)
  (out_dir / "results.md").write_text(text)
  try:
    write_chart(summary, out_dir / "chart.png")
  except Exception as e:  # no matplotlib: the table and JSON still stand
    print(f"chart not written: {wp.short_error(e)}")
  return text


def rows_by_key(summary: dict) -> dict:
  return {(r["shape"], r["pass"]): r for r in summary["rows"]}
