"""Scenario sim: tierfs-sim's speed; and the rows of scenarios trace and sim."""
from . import common
from .common import *  # noqa: F401,F403


class SimScenario:
    def scen_sim(self):
        """tierfs-sim on one core: one broker's hour, then a fleet of sim_mounts brokers."""
        gdir = self.work / "sim-traces"
        gdir.mkdir(parents=True, exist_ok=True)
        out = {}
        for name, mounts in (("one", 1), ("fleet", self.p["sim_mounts"])):
            prefix = gdir / f"{name}-{mounts}-{self.p['sim_duration']}"
            files = [Path(f"{prefix}-{i:03d}.trace") for i in range(mounts)]
            if not all(f.exists() for f in files):
                t0 = time.monotonic()
                run([str(common.SIM), f"--generate={prefix}", f"--mounts={mounts}",
                     f"--duration={self.p['sim_duration']}"], timeout=1800)
                log(f"sim: generated {name} ({mounts} brokers) in "
                    f"{time.monotonic() - t0:.1f}s")
            t0 = time.monotonic()
            r = run([str(common.SIM), "--json", "-o", "hot_ttl=600,lagging_rate=0"] +
                    [str(f) for f in files], timeout=1800)
            wall = time.monotonic() - t0
            j = json.loads(r.stdout)
            out[name] = {"mounts": mounts, "reads": j["reads"], "cpu_s": j["cpu_s"],
                         "wall_s": wall, "reads_per_cpu_s": j["reads"] / j["cpu_s"],
                         "span_s": j["span_s"], "store_gets": j["store"]["gets"]}
            log(f"sim {name}: {j['reads']} reads of {mounts} mounts over {j['span_s']:.0f} s "
                f"replayed in {wall:.1f} s ({j['cpu_s']:.1f} s CPU, "
                f"{j['reads'] / j['cpu_s'] / 1e6:.2f}M reads/s)")
        self.raw["runs"]["sim"] = out



def sim_report(b, cols):
    """Rows and targets of scenarios trace and sim (none for one that did not run)."""
    rows, targets = [], []
    t = b.raw["runs"].get("trace")
    if t:
        for w, unit, what in (("seq", " MB/s", "1 MiB sequential"),
                              ("rand", " IOPS", "4 KiB O_DIRECT random")):
            ratio = median(t["ratios"][w])
            rows.append((f"trace: cached {what} reads, trace=FILE on / off (interleaved "
                         f"passes; {t['records']:.0f} of {t['reads']:.0f} reads recorded, "
                         f"{t['dropped']:.0f} dropped)",
                         f"{cell(t['res']['on'][w], unit)} / {cell(t['res']['off'][w], unit)} "
                         f"= {cell(t['ratios'][w], 'x')}",
                         {k: ("n/a", None) for k in cols}, ">= 0.95x",
                         ratio is not None and ratio >= 0.95))
            targets.append((f"trace on/off, cached {w} reads", ratio, 0.95, "min"))
        targets.append(("trace: reads dropped", t["dropped"], 0, "max"))
    s = b.raw["runs"].get("sim")
    if s:
        one, fleet = s["one"], s["fleet"]
        rows.append((f"sim: one broker's hour ({one['reads']} reads) replayed on one core",
                     f"{one['reads_per_cpu_s'] / 1e6:.2f}M reads/s",
                     {k: ("n/a", None) for k in cols}, ">= 1M reads/s",
                     one["reads_per_cpu_s"] >= 1e6))
        targets.append(("sim: reads replayed per CPU second", one["reads_per_cpu_s"], 1e6,
                        "min"))
        rows.append((f"sim: {fleet['mounts']} brokers over {fleet['span_s'] / 3600:.1f} h "
                     f"({fleet['reads']} reads) replayed",
                     f"{fleet['wall_s']:.1f} s ({fleet['cpu_s']:.1f} s CPU, "
                     f"{fleet['reads_per_cpu_s'] / 1e6:.2f}M reads/s)",
                     {k: ("n/a", None) for k in cols}, "< 60 s", fleet["wall_s"] < 60))
        targets.append((f"sim: {fleet['mounts']}-mount hour, seconds", fleet["wall_s"], 60,
                        "max"))
    return rows, targets
