"""The stats file of real mounts, checked by Prometheus's own linter (`promtool check metrics`,
from Debian's prometheus package, installed by scripts/bootstrap): its exposition format, names,
HELP and TYPE lines, counters' _total, the histogram. One mount with every tier a mount can have
(hot, lagging, disk, shared with a fleet budget), after reads, and one with the memory tiers
only, so that a family left out whole, or a family without samples, is checked too.
"""

import shutil
import subprocess

import pytest

import lagging_util as lu
from test_shared import Redis

OPTS = ["block_size=64K", "hot_size=1M", "lagging_size=1M"]

# What promtool's linter says that is known and kept: renaming a metric breaks the dashboards
# and scripts that read it, so it waits for an issue of its own. Anything else fails.
KNOWN_LINT = {
    # the scan's time at mount, in ms since the disk tier came (tierfs_disk_recovery_seconds
    # would be the Prometheus name)
    "tierfs_disk_recovery_ms metric names should not contain abbreviated units",
}


@pytest.fixture
def promtool():
    p = shutil.which("promtool")
    if not p:
        pytest.skip("promtool is missing: scripts/bootstrap installs Debian's prometheus package")
    return p


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path / "redis")
    try:
        yield r.start()
    finally:
        r.stop()


def promtool_check(promtool, text):
    """promtool's verdict on @text: exit 0, or exit 3 (lint only) with KNOWN_LINT's lines."""
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    said = {ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()}
    assert p.returncode in (0, 3) and said <= KNOWN_LINT, \
        f"promtool check metrics: exit {p.returncode}\n{p.stdout}{p.stderr}"
    assert p.returncode == (3 if said else 0), f"exit {p.returncode}: {said}"


def read_some(m, corpus64k):
    for rel in sorted(corpus64k.objs)[:8]:
        with open(m.path(rel), "rb") as f:
            f.read()


def stats_text(m):
    with open(m.path(".tierfs/stats")) as f:
        return f.read()


def test_every_tier_passes_promtool(promtool, mount, corpus64k, redis, tmp_path):
    cache_dir = tmp_path / "disk"
    cache_dir.mkdir(mode=0o700)
    m = mount(corpus64k.url, OPTS + [f"cache_dir={cache_dir}", "disk_size=16M",
                                     f"shared={redis.url()}", "fleet_lagging_rate=10M"])
    read_some(m, corpus64k)
    text = stats_text(m)
    promtool_check(promtool, text)
    st = lu.parse_stats(text)
    for tier in ("hot", "lagging", "disk"):
        assert ("cache_hits_total", tier) in st, tier
    assert ("fleet_get_seconds_count", "fleet") in st
    assert st.v("limiter_rate_bytes", "lagging") == 50 << 20


def test_memory_tiers_only_pass_promtool(promtool, mount, corpus64k):
    m = mount(corpus64k.url, OPTS + ["lagging=off"])
    read_some(m, corpus64k)
    text = stats_text(m)
    promtool_check(promtool, text)
    assert "tier=\"disk\"" not in text and "tier=\"fleet\"" not in text
    # only the lagging tier has a limiter, off with the tier (rate 0)
    assert "tierfs_limiter_rate_bytes{tier=\"hot\"}" not in text
    assert lu.parse_stats(text).v("limiter_rate_bytes", "lagging") == 0
