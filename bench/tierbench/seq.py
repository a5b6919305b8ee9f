"""Scenarios 1-3: cold and cached sequential reads, random reads of the cached object, and
their rows (1-1c) in the report."""
from . import common
from .common import *  # noqa: F401,F403


class SeqScenario:
    # -- scenarios 1-3 ----------------------------------------------------------------------

    def scen_seq(self):
        """1-3. Per run: every system gets a fresh mount and a cold read, one after the other
        (the order rotates from run to run); then, with all of them still mounted, the cached
        re-reads and the 4 KiB random reads go round the systems in short slices (A B C A B C
        ...), so that the noise of a shared machine falls on all of them alike."""
        # touch: the rate at which a process gets new memory right then (preader touch), which
        # bounds a cold read into a tier whose memory is still untouched; tierfs-pf and
        # tierfs-s3-pf: tierfs with prefault=on, its memory taken at mount, cold read only
        systems = ["tierfs", "nullfs", "curl", "tierfs-s3", "curl-s3", "touch", "tierfs-pf",
                   "tierfs-s3-pf"]
        if self.peers:
            systems += ["s3fs", "rclone", "httpdirfs"]
        runs = self.p["runs"]
        res = {s: {"cold": [None] * runs, "cached": [None] * runs, "rand": [None] * runs}
               for s in systems}
        size = self.p["seq_size"]
        slice_s = 0.5
        nslices = max(1, int(round(self.p["rand_seconds"] / slice_s)))
        for run_i in range(runs):
            order = systems[run_i % len(systems):] + systems[:run_i % len(systems)]
            mounts = {}
            self.rewarm(["seq.bin"])  # the previous run dropped the servers' pages too
            try:
                for s in order:
                    time.sleep(self.p["cold_settle"])
                    if s.startswith("curl"):
                        url = (self.http_url + "seq.bin" if s == "curl"
                               else f"{self.s3_endpoint}/{self.bucket}/seq.bin")
                        r = run(["curl", "-sS", "--noproxy", "*", "-o", "/dev/null", "-w",
                                 "%{size_download} %{time_total}", url], timeout=600)
                        n, t = r.stdout.split()
                        if int(n) != size:
                            raise RuntimeError(f"curl got {n} bytes of {size}")
                        res[s]["cold"][run_i] = size / float(t) / 1e6
                        log(f"run {run_i + 1} {s}: cold {res[s]['cold'][run_i]:.0f} MB/s")
                        continue
                    if s == "touch":
                        res[s]["cold"][run_i] = preader(["touch", size])["mbps"]
                        log(f"run {run_i + 1} {s}: new memory {res[s]['cold'][run_i]:.0f} MB/s")
                        continue
                    try:
                        m = self.new_mount(s)
                        mounts[s] = m
                        st0 = m.stats() if isinstance(m, Tierfs) else None
                        cold = preader(["seq", m.path("seq.bin")])
                        if cold["bytes"] != size:
                            raise RuntimeError(f"cold read {cold['bytes']} of {size} bytes")
                        m.st = (st0, m.stats() if st0 is not None else None)
                    except Exception as e:
                        if s in mounts:
                            self.close_mount(mounts.pop(s), "failed")
                        self.peer_failed(s, f"scenario 1 run {run_i + 1}", e)
                        continue
                    res[s]["cold"][run_i] = cold["mbps"]
                    log(f"run {run_i + 1} {s}: cold {cold['mbps']:.0f} MB/s")
                    if s.endswith("-pf"):
                        self.close_mount(mounts.pop(s), "scenario 1")
                # 2: cached re-reads, round-robin, every kernel cache dropped before each
                cached = {s: [] for s in mounts}
                invalid = {s: [] for s in mounts}
                for _ in range(self.p["cached_passes"]):
                    for s, m in list(mounts.items()):
                        try:
                            drop_caches()
                            sa = m.stats() if isinstance(m, Tierfs) else None
                            c = preader(["seq", m.path("seq.bin")])
                            if c["bytes"] != size:
                                raise RuntimeError(f"cached read {c['bytes']} of {size} bytes")
                            why = served_check(sa, m.stats(), size) if sa else None
                            if why:
                                invalid[s].append(f"2: {why}")
                                log(f"run {run_i + 1} {s}: cached pass INVALID: {why}")
                            else:
                                cached[s].append(c)
                        except Exception as e:
                            self.close_mount(mounts.pop(s), "failed")
                            self.peer_failed(s, f"scenario 2 run {run_i + 1}", e)
                # 2b: the old fadvise(DONTNEED) variant, right after a read left the pages in
                fadv = {s: [] for s in mounts}
                for s, m in list(mounts.items()):
                    try:
                        c = preader(["seq", "--dontneed", m.path("seq.bin")])
                        if c["bytes"] != size:
                            raise RuntimeError(f"fadvise read {c['bytes']} of {size} bytes")
                        fadv[s].append(c)
                    except Exception as e:
                        self.close_mount(mounts.pop(s), "failed")
                        self.peer_failed(s, f"scenario 2b run {run_i + 1}", e)
                st2 = {s: m.stats() for s, m in mounts.items() if isinstance(m, Tierfs)}
                # 3: random 4 KiB O_DIRECT reads, round-robin slices, caches dropped before each
                rnd = {s: [] for s in mounts}
                for k in range(nslices):
                    for s, m in list(mounts.items()):
                        try:
                            drop_caches()
                            sa = m.stats() if isinstance(m, Tierfs) else None
                            rr = preader(["rand", "--direct", "--duration", slice_s,
                                          "--seed", run_i * 1000 + k + 1, m.path("seq.bin")])
                            why = served_check(sa, m.stats(), rr["ops"] * 4096) if sa else None
                            if why:
                                invalid[s].append(f"3: {why}")
                                log(f"run {run_i + 1} {s}: random slice INVALID: {why}")
                            rnd[s].append(rr)
                        except Exception as e:
                            self.close_mount(mounts.pop(s), "failed")
                            self.peer_failed(s, f"scenario 3 run {run_i + 1}", e)
                for s, m in mounts.items():
                    res[s].setdefault("invalid", [None] * runs)[run_i] = invalid[s] or None
                    bad2 = any(w.startswith("2:") for w in invalid[s])
                    bad3 = any(w.startswith("3:") for w in invalid[s])
                    if cached[s] and not bad2:
                        b = sum(c["bytes"] for c in cached[s])
                        res[s]["cached"][run_i] = b / sum(c["seconds"] for c in cached[s]) / 1e6
                    if fadv[s]:
                        res[s].setdefault("fadvise", [None] * runs)[run_i] = \
                            fadv[s][0]["bytes"] / fadv[s][0]["seconds"] / 1e6
                    if rnd[s] and not bad3:
                        ops = sum(r["ops"] for r in rnd[s])
                        res[s]["rand"][run_i] = {
                            "iops": ops / sum(r["seconds"] for r in rnd[s]),
                            "lat_us": {q: statistics.median(r["lat_us"][q] for r in rnd[s])
                                       for q in ("p50", "p99", "p999")},
                            "slices": len(rnd[s])}
                    if isinstance(m, Tierfs):
                        st0, st1 = m.st
                        st3 = m.stats()
                        fk = 'tierfs_cache_fetched_bytes_total{tier="hot"}'
                        rk = 'tierfs_read_bytes_total'
                        res[s].setdefault("check", []).append({
                            "cold_fetched": stat_delta(st0, st1, fk),
                            "cached_fetched": stat_delta(st1, st2[s], fk),
                            "cached_served": stat_delta(st1, st2[s], rk),
                            "rand_fetched": stat_delta(st2[s], st3, fk),
                            "rand_served": stat_delta(st2[s], st3, rk)})
                    rr = res[s]["rand"][run_i]
                    log(f"run {run_i + 1} {s}: cached "
                        f"{fmt_num(res[s]['cached'][run_i])} MB/s"
                        f"{' (INVALID run)' if bad2 else ''}, fadvise variant "
                        f"{fmt_num((res[s].get('fadvise') or [None] * runs)[run_i])} MB/s, "
                        f"rand {'(INVALID run) ' if bad3 else ''}"
                        + (f"{rr['iops']:.0f} IOPS p50 {rr['lat_us']['p50']:.0f}us p99 "
                           f"{rr['lat_us']['p99']:.0f}us" if rr else "n/a"))
            finally:
                for s, m in mounts.items():
                    self.close_mount(m, "scenarios 1-3")
        self.raw["runs"]["seq"] = res
        return res



def cold_report(b, seq, cols):
    """Rows 1-1c (cold sequential reads) and their targets."""
    rows, targets = [], []
    prr = per_run_ratio
    P = b.peers

    def col(s, k):
        return seq[s][k] if s in seq else []

    # 1 cold sequential
    t, t3 = col("tierfs", "cold"), col("tierfs-s3", "cold")
    peer_ratios = {}
    cells = {}
    for k in cols:
        ref = t3 if k == "s3fs" else t
        r = prr(ref, col(k, "cold")) if k in seq else None
        cells[k] = (cell(col(k, "cold"), " MB/s"), r)
        if k in ("s3fs", "rclone", "httpdirfs") and r is not None:
            peer_ratios[k] = r
    r_curl, r_null = cells["curl"][1], cells["nullfs"][1]
    # one target per line: the first issue's (>= curl, > every peer) and the cold-read issue's
    # (>= 0.8x nullfs, >= 1.5x rclone over http, >= 1.2x s3fs through the S3 API)
    need = {"rclone": 1.5, "s3fs": 1.2, "httpdirfs": 1.0}
    met1 = (r_curl is not None and r_curl >= 1.0 and r_null is not None and r_null >= 0.8
            and all(v >= need[p] for p, v in peer_ratios.items()))
    rows.append(("1. cold sequential read, 1 obj of %d MiB, MB/s (http: nginx), defaults"
                 % (b.p["seq_size"] // MiB),
                 cell(t, " MB/s"), cells,
                 ">= 1.0x curl, >= 0.8x nullfs, >= 1.5x rclone, > httpdirfs; s3fs: row 1b"
                 + ("" if P else " (peers not run)"), met1))
    targets.append(("cold seq vs curl", r_curl, 1.0, "min"))
    targets.append(("cold seq vs nullfs", r_null, 0.8, "min"))
    for p, v in peer_ratios.items():
        targets.append((f"cold seq vs {p}" + (" (both via s3rver)" if p == "s3fs" else ""),
                        v, need[p], "min"))
    # 1b: the S3 API, same server as s3fs
    cells = {k: ("n/a", None) for k in cols}
    cells["curl"] = (cell(col("curl-s3", "cold"), " MB/s"), prr(t3, col("curl-s3", "cold")))
    if "s3fs" in seq:
        cells["s3fs"] = (cell(col("s3fs", "cold"), " MB/s"), prr(t3, col("s3fs", "cold")))
    r_s3fs = cells["s3fs"][1]
    rows.append(("1b. cold sequential read via S3 API (s3rver behind nginx proxy), MB/s",
                 cell(t3, " MB/s"), cells, ">= 1.2x s3fs" + ("" if P else " (peers not run)"),
                 r_s3fs is not None and r_s3fs >= 1.2 if P else None))
    # 1c: what bounds row 1 here: new memory. A fresh mount's cold read writes every block
    # into memory the process has never touched; on this VM the hypervisor backs such pages
    # at a few hundred MB/s (preader touch). prefault=on takes the memory at mount instead.
    tp, touch = col("tierfs-pf", "cold"), col("touch", "cold")
    if any(tp):
        cells = {k: (cell(col(k, "cold"), " MB/s"), prr(tp, col(k, "cold"))) if k in seq
                 else ("n/a", None) for k in cols}
        cells["s3fs"] = ("n/a", None)
        rt = prr(t, touch)
        rows.append(("1c. (extra) the cold read of row 1 with prefault=on (both tiers' memory "
                     "taken at mount, as a mount that has filled its cache once has it); in the "
                     "tierfs cell also the rate at which a process gets new memory here "
                     "(`preader touch`, %d MiB) and row 1's ratio to it"
                     % (b.p["seq_size"] // MiB),
                     cell(tp, " MB/s") + f"; new memory {cell(touch, ' MB/s')}, row 1 / new "
                     f"memory {fmt_num(rt)}x", cells, "(info)", None))
    # 1d: row 1b the same way, its tier's memory taken at mount
    tp3 = col("tierfs-s3-pf", "cold")
    if any(tp3):
        cells = {k: ("n/a", None) for k in cols}
        cells["curl"] = (cell(col("curl-s3", "cold"), " MB/s"), prr(tp3, col("curl-s3", "cold")))
        if "s3fs" in seq:
            cells["s3fs"] = (cell(col("s3fs", "cold"), " MB/s"), prr(tp3, col("s3fs", "cold")))
        rows.append(("1d. (extra) the cold read of row 1b with prefault=on", cell(tp3, " MB/s"),
                     cells, "(info)", None))
    return rows, targets
