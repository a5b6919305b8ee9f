"""Scenarios 7-8: peak RSS against the tiers' sizes, and under 64 cold readers."""
from . import common
from .common import *  # noqa: F401,F403


class MemoryScenario:
    # -- scenario 8 -------------------------------------------------------------------------

    def scen_memory(self):
        """64 threads read 64 different cold objects at once; the mount's VmHWM."""
        import threading
        n, bs, hot = 64, 4 * MiB, 32 * MiB
        d = self.data / "mem"
        d.mkdir(exist_ok=True)
        size = 2 * bs + bs // 2 + 4113
        for i in range(n):  # sparse: 4 KiB of data at every MiB
            f = d / f"m-{i:02d}.bin"
            if not f.exists() or f.stat().st_size != size:
                with open(f, "wb") as w:
                    w.truncate(size)
                    for off in range(0, size, MiB):
                        w.seek(off)
                        w.write(os.urandom(4096))
        opts = {"block_size": "4M", "hot_size": size_opt(hot), "lagging": "off",
                "max_conns": str(n), "hot_ttl": "100000000"}
        m = Tierfs("tierfs", self.mnt("tierfs-mem"), self.http_url, opts,
                   self.run_dir / "tierfs-mem.log").start()
        got, errs = [0] * n, []

        def rd(i):
            try:
                with open(m.path(f"mem/m-{i:02d}.bin"), "rb", buffering=0) as f:
                    while b := f.read(MiB):
                        got[i] += len(b)
            except OSError as e:
                errs.append(e)

        try:
            t0 = time.monotonic()
            ts = [threading.Thread(target=rd, args=(i,), daemon=True) for i in range(n)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=300)
            secs = time.monotonic() - t0
            h = m.hwm()
        finally:
            self.close_mount(m, "scenario 8")
        if errs or sum(got) != n * size:
            raise RuntimeError(f"64 cold readers read {sum(got)} of {n * size} bytes: {errs[:3]}")
        res = {"vm_hwm": h, "bound": hot + 64 * MiB, "seconds": secs, "bytes": sum(got)}
        log(f"64 cold readers: VmHWM {h / MiB:.0f} MiB (bound {res['bound'] / MiB:.0f} MiB), "
            f"{sum(got) / secs / 1e6:.0f} MB/s")
        self.raw["runs"]["memory"] = res
        return res
