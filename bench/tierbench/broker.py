"""Scenario 9: a broker on http and s3, and its rows."""
from . import common
from .common import *  # noqa: F401,F403


class BrokerScenario:
    # -- scenario 9 -------------------------------------------------------------------------

    def scen_broker(self):
        """Producer, tail and lagging consumer (broker_sim) on one mount per backend. Bytes at
        the server for the old segments come from nginx's access log (the S3 mount goes
        through the logging proxy)."""
        p = self.p
        bp = {"live": p["broker_live"], "old": p["broker_old"], "interval": p["broker_interval"]}
        res = {}
        for backend in ("http", "s3"):
            work = self.run_dir / f"broker-{backend}"
            if backend == "http":
                d = f"broker-{os.getpid()}"  # under nginx's root (kept between runs)
                root = self.data / d
                shutil.rmtree(root, ignore_errors=True)
                store = broker_sim.DirStore(root, self.data / f".{d}-staging")
                url, opts, env = self.http_url + d + "/", {"hot_ttl": "60"}, None
                port, uri = self.nginx.json_port, f"/{d}/"
            else:
                root = None
                bucket = f"broker{os.getpid()}"
                store = broker_sim.S3Store(f"http://127.0.0.1:{self.s3.port}", bucket,
                                           work / "staging")
                # metadata_ttl: s3rver lists partial objects during a PUT (broker_sim.S3Store)
                url = f"s3://{bucket}"
                opts = {"hot_ttl": "5", "metadata_ttl": "3600", "endpoint": self.s3_endpoint,
                        "path_style": None, "region": "us-east-1"}
                env, port, uri = self.s3_env, self.nginx.proxy_port, f"/{bucket}/"
            try:
                log(f"broker {backend}: making {bp['old']} old segments")
                old = broker_sim.make_old(store, dict(broker_sim.DEFAULTS, **bp))
                m = Tierfs(f"tierfs-{backend}", self.mnt(f"tierfs-broker-{backend}"), url, opts,
                           self.run_dir / f"tierfs-broker-{backend}.log", env=env).start()
                try:
                    olds = [m.path(broker_sim.seg_name(b, "log")) for b, _ in old]
                    wait_until(lambda: all(os.getxattr(x, "user.tierfs.tier") == b"lagging"
                                           for x in olds), 60, "the old segments to be lagging")
                    names = {uri + broker_sim.seg_name(b, e) for b, _ in old
                             for e in ("log", "index", "timeindex")}
                    mark = self.nginx.mark()
                    r = broker_sim.run(m.mnt, store, old, bp, work, log=log)
                    m.st = m.stats()
                finally:
                    self.close_mount(m, "scenario 9")
                time.sleep(0.3)  # nginx logs a request when it ends; the unmount ended them
                at = self.nginx.bytes_for(mark, lambda u: u in names, port)
                r["server_bytes_old"] = at
                r["server_per_byte"] = at / r["lagging_bytes_read"] if r["lagging_bytes_read"] \
                    else None
                res[backend] = r
                log(f"broker {backend}: {broker_sim.summary(r)}; old segments' bytes at the "
                    f"server per byte read {fmt_num(r['server_per_byte'])}")
            finally:
                if root is not None:
                    shutil.rmtree(root, ignore_errors=True)
                    shutil.rmtree(store.staging, ignore_errors=True)
                shutil.rmtree(work / "staging", ignore_errors=True)
        self.raw["runs"]["broker"] = res
        return res



def broker_report(b, cols):
    """Rows and targets of scenario 9, one row per backend (none if it did not run)."""
    rows, targets = [], []
    for backend, r in (b.raw["runs"].get("broker") or {}).items():
        p = r["params"]
        fb_lim = p["negative_ttl"] + 2
        a, w = r["tail_p99_alone_ms"], r["tail_p99_replay_ms"]
        w_lim = max(3 * a, a + 100) if a is not None else None
        hr, spb = r["hot_hit_ratio"], r["server_per_byte"]
        checks = [
            (f"broker {backend}: segments read right / uploaded",
             (r["segments_read"] / r["segments_uploaded"]
              if r["segments_uploaded"] and not r["n_errors"] else 0.0), 1.0, "min"),
            (f"broker {backend}: upload->first byte p99 s", r["first_byte_p99_s"], fb_lim,
             "max"),
            (f"broker {backend}: tail p99 during replay ms", w, w_lim, "max"),
            (f"broker {backend}: follower hot hit ratio", hr, 0.9, "min"),
            (f"broker {backend}: lagging server bytes / byte read", spb, 32, "max"),
        ]
        ok = all(lim is not None and target_ok(v, lim, k) for _, v, lim, k in checks)
        targets += checks
        rows.append((
            f"9. broker on {backend}: {r['segments_uploaded']} segments of "
            f"{p['seg_size'] // MiB} MiB every {p['interval']:g} s; upload->first byte "
            f"p50/p99; tail read p50/p99 alone / during replay; follower hot hit ratio; "
            f"lagging consumer ({r['lagging_ops']} index lookups + {p['lag_read'] // 1024} KiB "
            f"reads): bytes at the server per byte read",
            f"{r['segments_read']} read, {r['n_errors']} byte errors; "
            f"{fmt_num(r['first_byte_p50_s'])}/{fmt_num(r['first_byte_p99_s'])} s; "
            f"{fmt_num(r['tail_p50_alone_ms'])}/{fmt_num(a)} ms / "
            f"{fmt_num(r['tail_p50_replay_ms'])}/{fmt_num(w)} ms; "
            f"{'n/a' if hr is None else f'{100 * hr:.2f}%'}; {fmt_num(spb)}x",
            {k: ("n/a", None) for k in cols},
            f"every byte right, p99 first byte <= {fb_lim:g} s, replay p99 <= max(3x, +100 ms), "
            f"hit ratio >= 90%, <= 32x (parts of 64 KiB for 8 KiB reads: 8x at best)", ok))
    return rows, targets
