"""Scenario 6: the lagging limiter's accuracy."""
from . import common
from .common import *  # noqa: F401,F403


class RateScenario:
    # -- scenario 6 -------------------------------------------------------------------------

    def scen_rate(self):
        p = self.p
        res = {r: [] for r in p["rates"]}
        old_rel = [r for r in self.files if r.startswith("old/")]
        self.rewarm(old_rel)
        for run_i in range(p["rate_runs"]):
            for rate in p["rates"]:
                opts = {"hot_size": "256M", "lagging_rate": rate}
                m = Tierfs("tierfs", self.mnt("tierfs-rate"), self.http_url, opts,
                           self.run_dir / "tierfs-rate.log").start()
                try:
                    old = [m.path(r) for r in old_rel]
                    wait_until(lambda: all(f.exists() for f in old), 30, "old objects")
                    mark = self.nginx.mark()
                    st0 = m.stats()
                    r = preader(["seq", "--threads", 4, "--duration", p["rate_seconds"]] + old)
                    st1 = m.stats()
                finally:
                    self.close_mount(m, "scenario 6")
                time.sleep(0.3)
                reqs = [q for q in self.nginx.requests(mark)
                        if q[5] == "GET" and q[6].startswith("/old/") and q[2] == self.nginx.json_port]
                e = self.rate_estimate(reqs, parse_size(rate), p["rate_seconds"])
                e["stats_fetched"] = stat_delta(
                    st0, st1, 'tierfs_cache_fetched_bytes_total{tier="lagging"}')
                e["reader_bytes"] = r["bytes"]
                res[rate].append(e)
                log(f"rate {rate} run {run_i + 1}: measured {e['rate'] / MiB:.2f} MiB/s = "
                    f"{e['accuracy']:.3f}x (regression {e['slope'] / MiB:.2f} MiB/s)")
        self.raw["runs"]["rate"] = res
        return res

    @staticmethod
    def rate_estimate(reqs, rate, seconds):
        """Bytes at the server over time, the burst subtracted.

        The limiter lets a fetch start when the bucket holds its bytes: by the start of fetch k,
        bytes(<= k) = burst + rate * (t_k - t_0) when the reader always wants more. So the rate is
        (bytes of all fetches started up to the last one in the window - burst) / (its start -
        the first start). Also a least-squares slope of cumulative bytes over start times, past
        the burst, as a check that needs no burst figure."""
        burst = 2 * rate
        if not reqs:
            raise RuntimeError("no lagging requests at the server")
        reqs = sorted(reqs, key=lambda q: q[0])
        t0 = reqs[0][0]
        inwin = [q for q in reqs if q[0] - t0 <= seconds]
        cum, pts = 0, []
        for q in inwin:
            cum += q[4]
            pts.append((q[0] - t0, cum))
        tl, bl = pts[-1]
        est = (bl - burst) / tl if tl > 0 else 0
        post = [pt for pt in pts if pt[1] > burst]
        slope = 0.0
        if len(post) >= 3:
            mx = sum(x for x, _ in post) / len(post)
            my = sum(y for _, y in post) / len(post)
            sxx = sum((x - mx) ** 2 for x, _ in post)
            slope = sum((x - mx) * (y - my) for x, y in post) / sxx if sxx else 0.0
        return {"rate": est, "accuracy": est / rate, "slope": slope,
                "slope_accuracy": slope / rate, "requests": len(inwin), "window": tl,
                "bytes": bl, "burst": burst, "total_bytes": sum(q[4] for q in reqs)}

    # -- scenarios 12-13: the shared tier and the fleet budget -------------------------------
