"""Scenario 4: 16 readers of one cold object."""
from . import common
from .common import *  # noqa: F401,F403


class MultiScenario:
    # -- scenario 4 -------------------------------------------------------------------------

    def scen_multi(self):
        systems = ["tierfs", "nullfs"] + (["s3fs", "rclone", "httpdirfs"] if self.peers else [])
        res = {s: [] for s in systems}
        size = self.p["seq_size"]
        self.rewarm(["seq.bin"])
        for run_i in range(self.p["multi_runs"]):
            for s in systems:
                try:
                    m = self.new_mount(s)
                    try:
                        mark = self.nginx.mark()
                        st0 = m.stats() if isinstance(m, Tierfs) else None
                        r = preader(["multi", "--threads", 16, m.path("seq.bin")])
                        st1 = m.stats() if isinstance(m, Tierfs) else None
                    finally:
                        self.close_mount(m, "scenario 4")
                    if r["bytes"] != 16 * size:
                        raise RuntimeError(f"{s}: 16 readers read {r['bytes']} of {16 * size}")
                except Exception as e:
                    self.peer_failed(s, f"scenario 4 run {run_i + 1}", e)
                    continue
                time.sleep(0.3)  # nginx logs a request when it ends; the unmount ended them
                if s == "nullfs":
                    fetched = None
                else:
                    fetched = self.nginx.bytes_for(mark, lambda u: u.endswith("/seq.bin"))
                e = {"mbps": r["mbps"], "seconds": r["seconds"],
                     "fetched": fetched, "ratio": fetched / size if fetched is not None else None}
                if st0 is not None:
                    e["stats_received"] = stat_delta(st0, st1,
                                                     "tierfs_backend_received_bytes_total")
                    e["stats_joins"] = stat_delta(
                        st0, st1, 'tierfs_cache_singleflight_joins_total{tier="hot"}')
                res[s].append(e)
                log(f"run {run_i + 1} {s}: 16 readers {r['mbps']:.0f} MB/s aggregate, "
                    f"server bytes / object = "
                    f"{'n/a' if fetched is None else f'{fetched / size:.3f}'}")
        self.raw["runs"]["multi"] = res
        return res
