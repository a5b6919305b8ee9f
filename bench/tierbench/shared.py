"""Scenarios 12-13 (shared): the shared tier on Redis, a fleet of mounts; and their rows."""
from . import common
from .common import *  # noqa: F401,F403

from .mac import mac_report


class SharedScenario:
    def scen_shared(self):
        p = self.p
        hot = sorted(r for r in self.files if r.startswith("hot/"))
        old = sorted(r for r in self.files if r.startswith("old/"))
        total = sum(self.files[r] for r in hot)
        more = {"shared_timeout": p["shared_timeout"]} if p["shared_timeout"] else {}
        self.rewarm(hot + old[:3])
        res = {"fetch": {}, "fleet": [], "hot_bytes": total}
        # (mounts, shared, pace): full speed alone and shared, then 3 shared mounts paced
        rows = p["shared_rows"].split(",")
        configs = [(n, shared, "") for n in (1, 2, 3) for shared in (False, True)
                   if ("shared" if shared else "alone") in rows]
        if p["shared_pace"] and "paced" in rows:
            configs.append((3, True, p["shared_pace"]))
        for run_i in range(p["shared_runs"]):
            for n, shared, pace in configs:
                key = f"{n} {'shared' if shared else 'alone'}{' paced' if pace else ''}"
                proc = None
                opts = {"block_size": "4M", "hot_size": "512M", "hot_ttl": "100000000",
                        **dict(o.split("=", 1) for o in p["shared_opts"].split(",") if o)}
                if shared:
                    proc, port = self.redis_start(f"redis-{run_i}-{n}{'-paced' if pace else ''}")
                    opts.update(shared=f"redis://127.0.0.1:{port}", **more)
                ms = []
                watch = None
                try:
                    if shared:
                        watch = RedisKeyEvents(port)
                    ms = self.fleet_mounts(n, opts, "fleet")
                    for m in ms:
                        wait_until(lambda: all(m.path(r).exists() for r in hot), 30,
                                   "the new objects")
                    mark = self.nginx.mark()
                    # each mount starts at its own share, as brokers tailing different
                    # partitions of the same objects
                    cmds = [[str(common.PREADER), "seq"] + (["--rate", pace] if pace else []) +
                            [str(m.path(r)) for r in hot[i * len(hot) // n:] +
                             hot[:i * len(hot) // n]]
                            for i, m in enumerate(ms)]
                    rds = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True)
                           for c in cmds]
                    outs = [json.loads(r.communicate(timeout=600)[0].strip()
                                       .splitlines()[-1]) for r in rds]
                    sts = [m.stats() for m in ms]
                finally:
                    for m in ms:
                        self.close_mount(m, "scenario 12")
                    events = watch.stop() if watch else None
                    if proc:
                        stop_proc(proc)
                time.sleep(0.3)  # nginx logs a request when it ends
                at = self.nginx.bytes_for(mark, lambda u: u.startswith("/hot/"),
                                          self.nginx.json_port)
                e = {"server_per_byte": at / total,
                     "p99_ms": max(o["lat_us"]["p99"] for o in outs) / 1e3,
                     "p50_ms": statistics.median(o["lat_us"]["p50"] for o in outs) / 1e3,
                     "hits": sum(self.stat_sum(st, "fleet_hits_total") for st in sts),
                     "timeouts": sum(self.stat_sum(st, "fleet_timeouts_total")
                                     for st in sts),
                     "shared_stats": [{k: v for k, v in st.items() if "shared" in k}
                                      for st in sts] if shared else None,
                     "get_lat": self.get_latency(sts) if shared else None,
                     "key_events": events}
                res["fetch"].setdefault(key, []).append(e)
                log(f"shared {key} run {run_i + 1}: server bytes {e['server_per_byte']:.2f}x "
                    f"the objects, read p99 {e['p99_ms']:.1f} ms, hits {e['hits']:.0f}, "
                    f"timeouts {e['timeouts']:.0f}" + (
                        "; GETs answered within " + ", ".join(
                            f"{le * 1e3:g} ms {n:.0f}" for le, n in e["get_lat"]
                            if le in (0.01, 0.05, 0.2, 1.0, float("inf")))
                        if shared else "") + (
                        f"; Redis evicted {events['evicted_values']} of the run's values; "
                        f"{events['expired_locks']} fetch locks expired, "
                        f"{events['expired_locks_without_value']} before their value"
                        if events else ""))
            # 11: the fleet budget
            if "budget" not in rows:
                continue
            proc, port = self.redis_start(f"redis-{run_i}-rate")
            rate = parse_size(p["fleet_rate"])
            opts = {"hot_size": "256M", "lagging_rate": "0", "shared": f"redis://127.0.0.1:{port}",
                    "fleet_lagging_rate": p["fleet_rate"], **more}
            ms = []
            try:
                ms = self.fleet_mounts(3, opts, "fleet-rate")
                paths = [m.path(old[i % len(old)]) for i, m in enumerate(ms)]
                wait_until(lambda: all(x.exists() for x in paths), 30, "old objects")
                mark = self.nginx.mark()
                rds = [subprocess.Popen([str(common.PREADER), "seq", "--threads", "4", "--duration",
                                         str(p["fleet_seconds"]), str(x)],
                                        stdout=subprocess.PIPE, text=True) for x in paths]
                for r in rds:
                    r.communicate(timeout=p["fleet_seconds"] + 120)
                sts = [m.stats() for m in ms]
            finally:
                for m in ms:
                    self.close_mount(m, "scenario 13")
                stop_proc(proc)
            time.sleep(0.3)
            reqs = sorted((q for q in self.nginx.requests(mark) if q[5] == "GET" and
                           q[6].startswith("/old/") and q[2] == self.nginx.json_port),
                          key=lambda q: q[0])
            t0 = reqs[0][0] + 1.0
            t1 = reqs[0][0] + p["fleet_seconds"] - 0.5
            pts, cum = [], 0
            for q in reqs:
                if t0 <= q[0] <= t1:
                    cum += q[4]
                    pts.append((q[0], cum))
            mx = sum(x for x, _ in pts) / len(pts)
            my = sum(y for _, y in pts) / len(pts)
            slope = (sum((x - mx) * (y - my) for x, y in pts) /
                     sum((x - mx) ** 2 for x, _ in pts))
            e = {"rate": slope, "accuracy": slope / rate, "window": t1 - t0,
                 "calls": sum(self.stat_sum(st, "fleet_budget_calls_total") for st in sts),
                 "grants": [self.stat_sum(st, "fleet_budget_grants_total") for st in sts]}
            res["fleet"].append(e)
            log(f"fleet rate {p['fleet_rate']} run {run_i + 1}: {slope / MiB:.2f} MiB/s = "
                f"{e['accuracy']:.3f}x over {e['window']:.1f} s, calls {e['calls']:.0f}, "
                f"grants {e['grants']}")
        self.raw["runs"]["shared"] = res
        return res



def shared_report(b, cols):
    """Rows and targets of scenarios 12, 12c and 13 (none if they did not run)."""
    rows, targets = mac_report(b, cols)
    r = b.raw["runs"].get("shared")
    if not r:
        return rows, targets
    f = r["fetch"]

    def one(key):
        runs = f.get(key) or []
        return (cell([e["server_per_byte"] for e in runs], "x"),
                cell([e["p99_ms"] for e in runs], " ms"),
                median([e["timeouts"] for e in runs]))

    for n in (1, 2, 3):
        if f"{n} alone" not in f and f"{n} shared" not in f:
            continue
        (ax, ap, _), (sx, sp, st) = one(f"{n} alone"), one(f"{n} shared")
        spb = median([e["server_per_byte"] for e in f.get(f"{n} shared") or []])
        rows.append((f"12. fleet: {n} mount{'s' if n > 1 else ''} read the same "
                     f"{r['hot_bytes'] // MiB} MiB of new objects at once: bytes at the server "
                     f"per byte of the objects; p99 of 1 MiB reads; alone / shared",
                     f"{ax}; {ap} / {sx}; {sp} ({fmt_num(st)} Redis timeouts)",
                     {k: ("n/a", None) for k in cols}, "shared <= 1.1x", spb is not None
                     and spb <= 1.1))
        targets.append((f"fleet of {n}, shared: server bytes / object bytes", spb, 1.1, "max"))
    paced = f.get("3 shared paced")
    if paced:
        (sx, sp, st), spb = one("3 shared paced"), median([e["server_per_byte"] for e in paced])
        rows.append((f"12b. fleet: 3 mounts tail the same objects, each reader paced at "
                     f"{b.p['shared_pace']}/s (a broker's rate, not full speed), shared: bytes "
                     f"at the server per byte; p99 of 1 MiB reads",
                     f"{sx}; {sp} ({fmt_num(st)} Redis timeouts)",
                     {k: ("n/a", None) for k in cols}, "<= 1.1x", spb is not None
                     and spb <= 1.1))
        targets.append(("fleet of 3 paced, shared: server bytes / object bytes", spb, 1.1,
                        "max"))
    acc = [e["accuracy"] for e in r["fleet"]]
    if not acc:
        return rows, targets
    a = median(acc)
    rows.append((f"13. fleet_lagging_rate={b.p['fleet_rate']} over 3 replaying mounts: bytes/s "
                 f"at the server / the rate (slope past the first second); Redis calls",
                 f"{cell(acc)}; {fmt_num(median([e['calls'] for e in r['fleet']]))} calls",
                 {k: ("n/a", None) for k in cols}, "0.95-1.05",
                 a is not None and 0.95 <= a <= 1.05))
    targets.append(("fleet lagging rate accuracy", a, (0.95, 1.05), "band"))
    return rows, targets
