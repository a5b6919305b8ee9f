"""Scenario trace: the cost of trace=FILE on cached reads (its rows are in sim.py)."""
from . import common
from .common import *  # noqa: F401,F403


class TraceScenario:
    # -- trace and sim (issue 31) ----------------------------------------------------------

    def scen_trace(self):
        """Cached reads at full speed, trace=FILE on and off: two mounts of seq.bin, warmed,
        then interleaved passes with every kernel cache dropped before each (as scenario 2),
        1 MiB sequential and 4 KiB O_DIRECT random."""
        size = self.p["seq_size"]
        tdir = self.run_dir / "trace"
        shutil.rmtree(tdir, ignore_errors=True)
        tdir.mkdir(parents=True)
        opts = {"off": self.seq_opts(), "on": dict(self.seq_opts(), trace=str(tdir / "t.trace"))}
        mounts = {k: Tierfs(f"tierfs-trace-{k}", self.mnt(f"trace-{k}"), self.http_url, o,
                            self.run_dir / f"trace-{k}.log").start() for k, o in opts.items()}
        res = {k: {"seq": [], "rand": [], "invalid": []} for k in mounts}
        try:
            for m in mounts.values():
                preader(["seq", m.path("seq.bin")])  # fills the hot tier
            for i in range(self.p["trace_runs"]):
                order = ["off", "on"] if i % 2 == 0 else ["on", "off"]
                for k in order:
                    self.trace_pass(mounts[k], res[k], size, i)
            recs = mounts["on"].stats()
        finally:
            for m in mounts.values():
                self.close_mount(m, "trace")
        ratios = {w: [a / b for a, b in zip(res["on"][w], res["off"][w]) if a and b]
                  for w in ("seq", "rand")}
        self.raw["runs"]["trace"] = {
            "res": res, "ratios": ratios,
            "records": recs.get("tierfs_trace_records_total"),
            "reads": recs.get("tierfs_reads_total"),
            "dropped": recs.get("tierfs_trace_dropped_total")}
        log(f"trace: on/off seq {ratios['seq']}, rand {ratios['rand']}; records "
            f"{recs.get('tierfs_trace_records_total')} of {recs.get('tierfs_reads_total')} "
            f"reads, dropped {recs.get('tierfs_trace_dropped_total')}")

    def trace_pass(self, m, out, size, i):
        """One sequential and one random pass of @m, kernel caches dropped, each counted only
        if tierfs served it (scenario 2's check)."""
        drop_caches()
        sa = m.stats()
        c = preader(["seq", m.path("seq.bin")])
        why = served_check(sa, m.stats(), size)
        out["seq"].append(None if why else c["mbps"])
        drop_caches()
        sa = m.stats()
        rr = preader(["rand", "--direct", "--duration", self.p["trace_rand_seconds"],
                      "--seed", i + 1, m.path("seq.bin")])
        why2 = served_check(sa, m.stats(), rr["ops"] * 4096)
        out["rand"].append(None if why2 else rr["iops"])
        for w in (why, why2):
            if w:
                out["invalid"].append(w)
                log(f"trace {m.name} pass {i + 1}: INVALID: {w}")
