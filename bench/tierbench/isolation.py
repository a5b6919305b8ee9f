"""Scenario 5: the tail's re-reads alone and during a replay."""
from . import common
from .common import *  # noqa: F401,F403


class IsolationScenario:
    # -- scenario 5 -------------------------------------------------------------------------

    def scen_isolation(self):
        p = self.p
        opts = {"hot_size": size_opt(p["iso_hot_size"]), "hot_ttl": "3600",
                "lagging_size": size_opt(p["iso_lagging_size"]), "lagging_rate": p["iso_rate"]}
        self.rewarm([r for r in self.files if r.startswith(("hot/", "old/"))])
        m = Tierfs("tierfs", self.mnt("tierfs-iso"), self.http_url, opts,
                   self.run_dir / "tierfs-iso.log").start()
        hot = [m.path(r) for r in self.files if r.startswith("hot/")]
        old = [m.path(r) for r in self.files if r.startswith("old/")]
        res = {"alone": [], "replay": [], "hit_ratio": [], "hot_misses": [], "opts": opts}
        try:
            wait_until(lambda: all(f.exists() for f in hot + old), 30, "the data set to list")
            # the working set into the hot tier
            preader(["seq", "--direct"] + hot)
            # The replay runs throughout; it pauses (a pause file: its readers wait before their
            # next read) for every "alone" slice and goes on for every "with replay" slice:
            # A B A B ... a second each, so both see the same noise from the rest of the machine.
            pause = self.run_dir / "replay.pause"
            pause.unlink(missing_ok=True)
            rep = subprocess.Popen(
                [str(common.PREADER), "seq", "--threads", "2", "--loop", "--duration", "3600",
                 "--pause-file", str(pause)]
                + [str(x) for x in old], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True)
            STATE.add_proc(rep)
            lag_key = 'tierfs_cache_fetched_bytes_total{tier="lagging"}'
            hits = miss = lag = 0
            st_start = m.stats()
            try:
                for i in range(p["iso_pairs"]):
                    pause.touch()
                    time.sleep(0.3)  # reads and fetches already started finish
                    a = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                    pause.unlink()
                    time.sleep(0.3)  # the replay under way again
                    st0 = m.stats()
                    w = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                    st1 = m.stats()
                    if rep.poll() is not None:
                        raise RuntimeError(f"replay ended: {rep.stderr.read()[-500:]}")
                    res["alone"].append(a)
                    res["replay"].append(w)
                    h = stat_delta(st0, st1, 'tierfs_cache_hits_total{tier="hot"}')
                    mi = stat_delta(st0, st1, 'tierfs_cache_misses_total{tier="hot"}')
                    hits, miss = hits + h, miss + mi
                    lag += stat_delta(st0, st1, lag_key)
                    res["hit_ratio"].append(h / (h + mi) if h + mi else None)
                    res["hot_misses"].append(mi)
            finally:
                pause.unlink(missing_ok=True)
                stop_proc(rep)
            st_end = m.stats()
            res["machine"] = self.iso_machine_floor(hot)
            res["replay_bytes"] = {"lagging_fetched": stat_delta(st_start, st_end, lag_key),
                                   "during_with_slices": lag,
                                   "cache_bytes": m.cache_bytes}
            res["total_hit_ratio"] = hits / (hits + miss) if hits + miss else None
            a99 = [x["lat_us"]["p99"] for x in res["alone"]]
            w99 = [x["lat_us"]["p99"] for x in res["replay"]]
            log(f"isolation: {len(a99)} pairs of {p['iso_slice']} s slices: tail p50/p99 alone "
                f"{median([x['lat_us']['p50'] for x in res['alone']]):.1f}/{median(a99):.1f}us, "
                f"with replay {median([x['lat_us']['p50'] for x in res['replay']]):.1f}/"
                f"{median(w99):.1f}us, p99 ratio (median of pairs) "
                f"{median([x / y for x, y in zip(w99, a99)]):.2f}, alone/next alone "
                f"{median([y / x for x, y in zip(a99, a99[1:])] or [0]):.2f}; replay fetched "
                f"{res['replay_bytes']['lagging_fetched'] / MiB:.0f} MiB = "
                f"{res['replay_bytes']['lagging_fetched'] / m.cache_bytes:.1f}x the cache; "
                f"tail hit ratio {res['total_hit_ratio']:.4f}")
        finally:
            self.close_mount(m, "scenario 5")
        self.raw["runs"]["isolation"] = res
        return res

    def iso_machine_floor(self, hot):
        """What the replay's bytes cost the tail when tierfs does not carry them: the same
        alone/with pairs, the "with" slices beside two curl processes reading the old objects
        straight from nginx at iso_rate together (each at half; paused with SIGSTOP for the
        alone slices). The tail still reads through tierfs, so the ratio is what moving that
        many bytes over loopback costs the tail on this machine."""
        p = self.p
        urls = [self.http_url + r for r in self.files if r.startswith("old/")]
        per = parse_size(p["iso_rate"]) // 2
        total = sum(p["old_file_size"] for r in self.files if r.startswith("old/"))
        rounds = int(p["iso_pairs"] * p["iso_slice"] * per / total) + 2
        out = {"alone": [], "curl": [], "rate": p["iso_rate"]}
        kids = []
        try:
            for _ in range(2):
                k = subprocess.Popen(["curl", "-sS", "--noproxy", "*", "--limit-rate", str(per)]
                                     + [a for u in urls * rounds for a in ("-o", "/dev/null", u)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
                STATE.add_proc(k)
                kids.append(k)
            for _ in range(p["iso_pairs"]):
                for k in kids:
                    k.send_signal(signal.SIGSTOP)
                time.sleep(0.3)
                a = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                for k in kids:
                    k.send_signal(signal.SIGCONT)
                time.sleep(0.3)
                w = preader(["rand", "--direct", "--duration", p["iso_slice"]] + hot)
                for k in kids:
                    if k.poll() is not None:
                        raise RuntimeError(f"curl stream ended: {k.stderr.read()[-300:]}")
                out["alone"].append(a)
                out["curl"].append(w)
        finally:
            for k in kids:
                if k.poll() is None:
                    k.send_signal(signal.SIGCONT)
                stop_proc(k)
        a99 = [x["lat_us"]["p99"] for x in out["alone"]]
        c99 = [x["lat_us"]["p99"] for x in out["curl"]]
        log(f"isolation, machine floor: tail p99 alone {median(a99):.1f}us, beside a "
            f"{p['iso_rate']}B/s curl stream {median(c99):.1f}us, ratio (median of pairs) "
            f"{median([x / y for x, y in zip(c99, a99)]):.2f}")
        return out
