"""The hottest SASS instructions of one kernel in an Nsight Compute report.

Reads the CSV of `ncu --import REPORT --page source --print-source sass --csv` on stdin and
prints the instructions with the most warp-stall samples (where a kernel's warps spend their
time) and with the most executed warp instructions, each with its share of the kernel's total.
Run on the device, after profiling with `--section SourceCounters` (or `--set full`):
  ncu --import r.ncu-rep --page source --print-source sass --csv | python3 tools/device/ncu_hotspots.py
"""

from __future__ import annotations

import csv
import sys

TOP = 25


def _number(text: str) -> float:
  try:
    return float(text.replace(",", ""))
  except ValueError:
    return 0.0


def _column(header: list[str], *words: str) -> int | None:
  for i, name in enumerate(header):
    if all(w.lower() in name.lower() for w in words):
      return i
  return None


def main() -> int:
  rows = [r for r in csv.reader(sys.stdin) if r]
  start = next((i for i, r in enumerate(rows) if _column(r, "Source") is not None), None)
  if start is None:
    print("no source table in the input")
    return 1
  header, body = rows[start], rows[start + 1:]
  source = _column(header, "Source")
  address = _column(header, "Address")
  columns = {"stall samples": _column(header, "Warp Stall Sampling", "All"),
             "warp instructions": _column(header, "Instructions Executed")}
  for label, col in columns.items():
    if col is None:
      print(f"no '{label}' column; columns: {header}")
      continue
    values = [(_number(r[col]), r) for r in body if len(r) > col]
    total = sum(v for v, _ in values) or 1.0
    print(f"== top {TOP} instructions by {label} (total {total:.0f})")
    for v, r in sorted(values, key=lambda x: -x[0])[:TOP]:
      where = r[address] if address is not None else ""
      print(f"{100 * v / total:5.1f}%  {where:>8}  {r[source].strip()[:100]}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
