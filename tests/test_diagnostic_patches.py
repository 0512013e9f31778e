"""Diagnostic patches kept under tools/device/ still apply to the tree they instrument (a change
to the code they stamp must carry them along)."""

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PATCHES = sorted((ROOT / "tools" / "device").glob("*.patch"))


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs git and a checkout")
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_patch_applies(patch):
  check = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True,
                         text=True)
  assert check.returncode == 0, check.stderr
