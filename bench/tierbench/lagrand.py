"""Scenario 11 (lagrand): random 4 KiB reads of an old object, and its rows."""
from . import common
from .common import *  # noqa: F401,F403


class LagrandScenario:
    # -- scenario 11 ------------------------------------------------------------------------

    def scen_lagrand(self):
        """4 KiB random O_DIRECT reads of one cold lagging object (4 threads) at the default
        lagging_rate and block_size: IOPS, latency, and the bytes fetched per read (from
        .tierfs/stats). The baseline is what fetching whole blocks allows at that rate,
        lagging_rate / block_size reads a second, which is where tierfs was before it fetched
        parts of blocks (16 IOPS measured against a ceiling of 12.5).
        11b: the same reads of the same object read as hot (lagging=off) through a 64 MiB hot
        tier (a quarter of the default old_file_size): whole blocks of an object larger than
        the tier would evict each other, so these reads fetch parts too."""
        p = self.p
        rate, bs = parse_size(p["lagrand_rate"]), 4 * MiB
        rel = [r for r in self.files if r.startswith("old/")][0]
        res = self.rand_reads("lagrand", rel, "lagging",
                              {"hot_ttl": "3600", "lagging_rate": p["lagrand_rate"]})
        res.update(whole_block_iops=rate / bs, rate=p["lagrand_rate"])
        log(f"lagging random 4K: {rand_cell(res)}, {res['fetched'] / MiB:.0f} MiB fetched in "
            f"{res['parts']:.0f} parts; whole blocks would allow {rate / bs:.1f} IOPS")
        self.raw["runs"]["lagrand"] = res  # row 11 stands if 11b fails
        h = self.rand_reads("lagrand-hot", rel, "hot", {"lagging": "off", "hot_size": "64M"})
        h.update(size=self.files[rel], hot_size=64 * MiB)
        log(f"hot random 4K, object {h['size'] / MiB:.0f} MiB through a "
            f"{h['hot_size'] / MiB:.0f} MiB hot tier: {rand_cell(h)}")
        res["hot"] = h
        return res

    def rand_reads(self, name, rel, tier, opts):
        """4 KiB random O_DIRECT reads of @rel (4 threads, lagrand_seconds) on a fresh mount
        with @opts: preader's figures and what @tier fetched meanwhile, from the stats."""
        self.rewarm([rel])
        m = Tierfs("tierfs", self.mnt("tierfs-" + name), self.http_url, opts,
                   self.run_dir / f"tierfs-{name}.log").start()
        try:
            f = m.path(rel)
            wait_until(f.exists, 30, "the data set to list")
            st0 = m.stats()
            r = preader(["rand", "--direct", "--threads", "4", "--duration",
                         str(self.p["lagrand_seconds"]), str(f)])
            st1 = m.stats()
            fetched = stat_delta(st0, st1, f'tierfs_cache_fetched_bytes_total{{tier="{tier}"}}')
            parts = stat_delta(st0, st1, f'tierfs_cache_part_fetches_total{{tier="{tier}"}}')
        finally:
            self.close_mount(m, "scenario 11")
        return {"iops": r["iops"], "ops": r["ops"], "lat_us": r["lat_us"], "fetched": fetched,
                "parts": parts, "kib_per_read": fetched / r["ops"] / 1024 if r["ops"] else None,
                "opts": opts}



def rand_cell(r):
    """A rand_reads result as a table cell: IOPS (p50/p99 ms); KiB fetched per read."""
    return (f"{r['iops']:.0f} IOPS ({r['lat_us']['p50'] / 1000:.1f}/"
            f"{r['lat_us']['p99'] / 1000:.1f}); {fmt_num(r['kib_per_read'])} KiB")


def lagrand_report(b, cols):
    """Rows and targets of scenario 11 (none if it did not run)."""
    r = b.raw["runs"].get("lagrand")
    if not r:
        return [], []
    ratio = r["iops"] / r["whole_block_iops"]
    kib = r["kib_per_read"]
    targets = [("lagging random 4K: KiB fetched per read", kib, 64, "max"),
               ("lagging random 4K IOPS / whole-block ceiling", ratio, 10, "min")]
    ok = all(v is not None and target_ok(v, lim, k) for _, v, lim, k in targets)
    rows = [(f"11. 4 KiB random O_DIRECT reads of a cold lagging object, 4 threads, "
             f"lagging_rate {r['rate']}, block_size 4M: IOPS (p50/p99 ms), KiB fetched per read",
             rand_cell(r),
             {k: ("n/a", None) for k in cols},
             f">= 10x the whole-block ceiling ({r['whole_block_iops']:.1f} IOPS: rate / block), "
             f"<= 64 KiB per read", ok)]
    h = r.get("hot")
    if h:
        hk, x = h["kib_per_read"], h["size"] / h["hot_size"]
        targets.append((f"hot random 4K, object {x:g}x the tier: KiB fetched per read", hk, 64,
                        "max"))
        rows.append((f"11b. the same reads of the same {h['size'] / MiB:.0f} MiB object read as "
                     f"hot (lagging=off) through a {h['hot_size'] / MiB:.0f} MiB hot tier "
                     f"({x:g}x the tier; <= 1x would keep whole blocks)",
                     rand_cell(h),
                     {k: ("n/a", None) for k in cols}, "<= 64 KiB per read",
                     hk is not None and target_ok(hk, 64, "max")))
    return rows, targets
