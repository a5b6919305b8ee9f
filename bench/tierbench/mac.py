"""Scenario mac: the shared tier's values with and without shared_key; and its rows."""
from . import common
from .common import *  # noqa: F401,F403


class MacScenario:
    # -- scenario 12c: the MAC's cost on a shared hit ----------------------------------------

    def mac_prime(self, kind, hot, opts):
        """A Redis holding every block of @hot, put by a mount with @opts: (process, port)."""
        proc, port = self.redis_start(f"redis-mac-{kind}", fill=False)
        o = dict(opts, shared=f"redis://127.0.0.1:{port}")
        m = Tierfs("tierfs", self.mnt(f"tierfs-mac-prime-{kind}"), self.http_url, o,
                   self.run_dir / f"tierfs-mac-prime-{kind}.log").start()
        try:
            wait_until(lambda: all(m.path(r).exists() for r in hot), 30, "the new objects")
            run([str(common.PREADER), "seq"] + [str(m.path(r)) for r in hot], timeout=600)
            blocks = sum(-(-self.files[r] // (4 * MiB)) for r in hot)
            wait_until(lambda: self.stat_sum(m.stats(), "fleet_puts_total") >= blocks and
                       self.stat_sum(m.stats(), "fleet_put_queued_bytes") == 0, 120,
                       f"the {kind} values in Redis")
        finally:
            self.close_mount(m, "scenario 12c prime")
        return proc, port

    def mac_read(self, kind, hot, opts, port):
        """One round: a fresh mount reads @hot from Redis: {"mbps", "hits", "blocks"}."""
        o = dict(opts, shared=f"redis://127.0.0.1:{port}", prefault="on")
        m = Tierfs("tierfs", self.mnt(f"tierfs-mac-{kind}"), self.http_url, o,
                   self.run_dir / f"tierfs-mac-{kind}.log").start()
        try:
            wait_until(lambda: all(m.path(r).exists() for r in hot), 30, "the new objects")
            drop_caches()
            out = preader(["seq"] + [m.path(r) for r in hot])
            st = m.stats()
        finally:
            self.close_mount(m, "scenario 12c")
        return {"mbps": out["mbps"] * 1e6 / MiB, "hits": self.stat_sum(st, "fleet_hits_total"),
                "blocks": sum(-(-self.files[r] // (4 * MiB)) for r in hot)}

    def scen_mac(self):
        """12c: see the module's docstring. A round counts only if every block was a hit."""
        hot = sorted(r for r in self.files if r.startswith("hot/"))
        total = sum(self.files[r] for r in hot)
        key = self.run_dir / "fleet.key"
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        base = {"block_size": "4M", "hot_size": f"{total // MiB + 128}M", "lagging": "off",
                "hot_ttl": "100000000", "readahead": "4"}
        opts = {"plain": base, "keyed": dict(base, shared_key=str(key))}
        self.rewarm(hot)
        res, procs = {"plain": [], "keyed": [], "bytes": total}, []
        try:
            ports = {}
            for kind in ("plain", "keyed"):
                proc, ports[kind] = self.mac_prime(kind, hot, opts[kind])
                procs.append(proc)
            for i in range(self.p["mac_rounds"]):
                for kind in ("plain", "keyed") if i % 2 == 0 else ("keyed", "plain"):
                    e = self.mac_read(kind, hot, opts[kind], ports[kind])
                    res[kind].append(e)
                    log(f"shared hit {kind} round {i + 1}: {e['mbps']:.0f} MiB/s, "
                        f"{e['hits']:.0f} of {e['blocks']} blocks from Redis")
        finally:
            for proc in procs:
                stop_proc(proc)
        self.raw["runs"]["mac"] = res
        return res



def mac_report(b, cols):
    """Row and target of scenario 12c (none if it did not run): rounds where a block missed
    Redis do not count."""
    r = b.raw["runs"].get("mac")
    if not r:
        return [], []
    ok = {k: [e["mbps"] for e in r[k] if e["hits"] == e["blocks"]] for k in ("plain", "keyed")}
    ratio = (median(ok["keyed"]) / median(ok["plain"])
             if ok["keyed"] and ok["plain"] else None)
    row = (f"12c. shared hit: a fresh mount reads {r['bytes'] // MiB} MiB of new objects, every "
           f"block from Redis: MiB/s without / with shared_key (the MAC); rounds interleaved",
           f"{cell(ok['plain'])} / {cell(ok['keyed'])} = {fmt_num(ratio)}x",
           {k: ("n/a", None) for k in cols}, ">= 0.8x", ratio is not None and ratio >= 0.8)
    return [row], [("shared hit with the MAC / without", ratio, 0.8, "min")]
