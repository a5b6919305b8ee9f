"""The README's first command, scripts/demo, runs to its end on the build under test: what a new
user sees first must work (it once stopped half way, at a setfattr the read-only mount refused).
The build directory is the one TIERFS_BIN lives in (TIERFS_BUILD overrides it); the demo
reconfigures and compiles it (nothing to do when it is built), and cleans up after itself."""

import os
import subprocess
from pathlib import Path

import pytest

import harness


def test_demo_runs_to_its_end():
    build = Path(os.environ.get("TIERFS_BUILD") or Path(harness.tierfs_bin()).parent)
    if not (build / "build.ninja").is_file():
        pytest.fail(f"{build} is not a meson build directory: set TIERFS_BUILD")
    p = subprocess.run([str(harness.REPO / "scripts" / "demo")], cwd=harness.REPO,
                       env=harness.clean_env({"BUILDDIR": str(build.resolve())}),
                       capture_output=True, text=True, timeout=600)
    out = p.stdout
    assert p.returncode == 0, (p.returncode, out[-3000:], p.stderr[-3000:])
    assert out.rstrip().endswith("done"), out[-2000:]
    # what each part of it shows: the live setting taken, the disk tier's blocks served
    assert 'user.tierfs.lagging_rate="64M"' in out, out[-3000:]
    assert "refused with one line" in out
    hits = [ln for ln in out.splitlines() if ln.startswith('tierfs_cache_hits_total{tier="disk"}')]
    assert hits and float(hits[-1].split()[-1]) > 0, out[-3000:]
