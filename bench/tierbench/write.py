"""Scenario write: writing through the mount; and its rows."""
from . import common
from .common import *  # noqa: F401,F403


class WriteScenario:
    WRITE_FILE_TARGET = 0.5
    WRITE_CEILING_TARGET = 0.8  # issue 40: file:// writes >= 0.8x the FUSE write ceiling

    def scen_write(self):
        """Writing through the mount (issue 29), `--only write`. Each part is its own row: one
        that fails is noted and the others still run. --set write_rows=seq,readback,rss."""
        want = set(self.p["write_rows"].split(","))
        self.wbucket = "wbench"
        c = self.wclient = self.s3_client()  # one client: creating one takes a while
        try:
            c.create_bucket(Bucket=self.wbucket)
        except c.exceptions.BucketAlreadyOwnedByYou:
            pass
        # what every writer writes: seq.bin's incompressible bytes, held in memory
        self.wdata = memoryview((self.data / "seq.bin").read_bytes())
        self.wsha = hashlib.sha256(self.wdata).hexdigest()
        parts = (("seq", self.write_seq), ("readback", self.write_readback),
                 ("rss", self.write_rss))
        res = self.run_parts("scenario write", [(n, fn) for n, fn in parts if n in want])
        self.raw["runs"]["write"] = res
        return res

    def write_mount(self, system, extra=None, tag="w"):
        """A writable mount of @system on the write bucket (tierfs-file: on the store
        directory), not started. tierfs: defaults plus allow_write and @extra. s3fs: its
        defaults (multipart_size 10 MB, parallel_count 5, a temporary file per written file).
        rclone: `--vfs-cache-mode writes`, what it needs to write sequentially, and
        `--vfs-write-back 0s`: it uploads at once after close (by default 5 s later)."""
        mp, logp = self.mnt(f"{system}-{tag}"), self.run_dir / f"{system}-{tag}.log"
        if system == "tierfs-s3":
            o = dict({"endpoint": self.s3_endpoint, "path_style": None, "region": "us-east-1",
                      "allow_write": None}, **(extra or {}))
            return Tierfs("tierfs-s3", mp, f"s3://{self.wbucket}", o, logp, env=self.s3_env)
        if system == "tierfs-file":
            return Tierfs("tierfs-file", mp, f"file://{self.wstore}",
                          dict({"allow_write": None}, **(extra or {})), logp)
        if system == "nullfs-w":  # the FUSE write ceiling: pwrite per request, fsync at close
            return Mount("nullfs-w", mp, [str(common.NULLFS), str(mp), "x=4K", "-w",
                                          str(self.wnull), "-f"], log_path=logp)
        if system == "s3fs":
            return Mount("s3fs", mp, [
                "s3fs", self.wbucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"endpoint=us-east-1,dbglevel=warn"], env=self.s3_env, log_path=logp)
        if system == "rclone":
            cache = self.fresh_cache_dir(f"rclone-{tag}")
            env = {k: v for k, v in self.s3_env.items() if k != "AWS_CA_BUNDLE"}
            return Mount("rclone", mp, [
                "rclone", "mount", f":s3:{self.wbucket}", str(mp), "--s3-provider", "Other",
                "--s3-endpoint", self.s3_endpoint, "--s3-access-key-id", "S3RVER",
                "--s3-secret-access-key", "S3RVER", "--s3-region", "us-east-1",
                "--s3-no-check-bucket", "--vfs-cache-mode", "writes", "--vfs-write-back", "0s",
                "--cache-dir", str(cache), "--config", str(self.run_dir / "rclone.conf"),
                "--log-level", "ERROR"], env=env, log_path=logp)
        raise ValueError(system)

    @staticmethod
    def write_file(path, bs, data, fsync=False):
        """Create @path (O_EXCL, as Files.copy does) and write @data to it in @bs writes, fsync
        it if @fsync, close it. @return the seconds from open to close's return."""
        t0 = time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            off, n = 0, len(data)
            while off < n:
                off += os.write(fd, data[off:off + bs])
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)  # tierfs and s3fs answer the upload's error here
        return time.monotonic() - t0

    def store_size(self, key):
        """The object's size in s3rver (botocore HEAD), None if it is not there."""
        try:
            return self.wclient.head_object(Bucket=self.wbucket, Key=key)["ContentLength"]
        except Exception as e:
            if "404" in str(e) or "Not Found" in str(e):
                return None
            raise

    def write_one(self, system, m, key, bs, cpu=None):
        """One timed write of self.wdata as @key through @m (None: the local directory).
        @return MB/s. S3: the object must be in s3rver whole when the time ends: tierfs and s3fs
        return from close() after the upload; rclone returns before it, so its time runs to
        the object's arrival (HEAD every 20 ms). file://: the file in the store directory.
        @cpu, a dict: filled with the CPU seconds per wall second that s3rver, nginx (the
        proxy in front of it) and the mount's process used during the write."""
        size = len(self.wdata)
        pids = {"s3rver": self.s3.proc.pid, "nginx": self.nginx.proc.pid}
        if m is not None:
            pids["fs"] = m.proc.pid
        c0, w0 = {k: cpu_seconds(v) for k, v in pids.items()}, time.monotonic()
        if system == "local":
            path = self.wlocal / key
            t = self.write_file(path, bs, self.wdata, fsync=True)
            got = path.stat().st_size
            path.unlink()
        elif system in ("tierfs-file", "nullfs-w"):
            under = self.wstore if system == "tierfs-file" else self.wnull
            t = self.write_file(m.path(key), bs, self.wdata)
            got = (under / key).stat().st_size
            (under / key).unlink()  # behind the mount's back: every key is new anyway
        else:
            t0 = time.monotonic()
            self.write_file(m.path(key), bs, self.wdata)
            t = time.monotonic() - t0
            got = self.store_size(key)
            if system == "rclone":
                deadline = time.monotonic() + 600
                while got != size and time.monotonic() < deadline:
                    time.sleep(0.02)
                    got = self.store_size(key)
                t = time.monotonic() - t0
            self.wclient.delete_object(Bucket=self.wbucket, Key=key)
        if cpu is not None:
            wall = time.monotonic() - w0
            for k, v in pids.items():
                c1 = cpu_seconds(v)
                cpu[k] = (c1 - c0[k]) / wall if c1 is not None and c0[k] is not None else None
        if got != size:
            raise RuntimeError(f"{key}: {got} bytes in the store of {size}"
                               + (" when close() returned" if system != "rclone" else ""))
        return size / t / 1e6

    def write_ceiling(self, key, part=8 * MiB, inflight=4):
        """s3rver's own ceiling for what tierfs sends it: botocore (in this process) uploads
        self.wdata as @key through the same proxy, a multipart upload of @part parts with
        @inflight in flight (tierfs's part_size and write_parts defaults). @return MB/s."""
        import botocore.session
        from botocore.config import Config

        if not getattr(self, "wclient_proxy", None):
            self.wclient_proxy = botocore.session.get_session().create_client(
                "s3", region_name="us-east-1", endpoint_url=self.s3_endpoint,
                aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                config=Config(s3={"addressing_style": "path"}, proxies={},
                              max_pool_connections=16))
        size = len(self.wdata)
        t0 = time.monotonic()
        multipart_upload(self.wclient_proxy, self.wbucket, key, self.wdata, part, inflight)
        t = time.monotonic() - t0
        got = self.store_size(key)
        self.wclient.delete_object(Bucket=self.wbucket, Key=key)
        if got != size:
            raise RuntimeError(f"{key}: {got} bytes in the store of {size}")
        return size / t / 1e6

    def write_seq(self):
        """W1. Every system mounted once, as a broker's mount runs, and given untimed writes
        first (connections open, memory backed): one for a peer; for tierfs as many as fill
        its hot tier (hot_size, 1G by default) once, since the first pass through the ring
        writes into memory this VM has not backed yet (docs/performance.md) and a mount that has run a
        while has it backed. Then write_runs runs, each of 1 MiB writes then 8 KiB writes,
        the systems in an order that rotates, os.sync() and write_settle s before each timed
        write; in each 1 MiB pass also s3rver's ceiling (write_ceiling)."""
        p, size = self.p, len(self.wdata)
        self.wstore = self.run_dir / "wstore"
        self.wlocal = self.run_dir / "wlocal"  # the same filesystem as the store directory
        self.wnull = self.run_dir / "wnull"  # nullfs -w's files, likewise
        for d in (self.wstore, self.wlocal, self.wnull):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        systems = ["tierfs-s3"]
        skipped = {}
        for peer in ("s3fs", "rclone"):
            if not self.peers:
                skipped[peer] = "no peers (--quick without --peers, or --no-peers)"
            elif not shutil.which(peer):
                skipped[peer] = f"{peer} is not installed (scripts/bench could not install it)"
            else:
                systems.append(peer)
        systems += ["tierfs-file", "nullfs-w", "local"]
        bss = [MiB, 8 * 1024]
        res = {"size": size, "skipped": skipped, "mbps": {s: {str(bs): [] for bs in bss}
                                                           for s in systems}, "stats": {},
               "cpu": {}, "ceiling": []}
        mounts = {}
        try:
            for s in systems:
                if s == "local":
                    continue
                try:
                    m = mounts[s] = self.write_mount(s).start()
                    for i in range((GiB + size - 1) // size if s.startswith("tierfs") else 1):
                        self.write_one(s, m, f"warm-{s}-{i}.bin", MiB)
                except Exception as e:
                    if s in mounts:
                        self.close_mount(mounts.pop(s), "failed")
                    self.peer_failed(s, "scenario write W1, mount and first write", e)
                    skipped[s] = f"failed: {str(e)[-200:]}"
            for run_i in range(p["write_runs"]):
                for bi, bs in enumerate(bss):
                    k = (run_i * len(bss) + bi) % len(systems)
                    for s in systems[k:] + systems[:k] + (["ceiling"] if bs == MiB else []):
                        if s not in ("local", "ceiling") and s not in mounts:
                            continue
                        os.sync()
                        time.sleep(p["write_settle"])
                        if s == "ceiling":
                            v = self.write_ceiling(f"ceiling-{run_i}.bin")
                            res["ceiling"].append(v)
                            log(f"write run {run_i + 1} s3rver ceiling (botocore multipart, "
                                f"8 MiB parts, 4 in flight): {v:.0f} MB/s")
                            continue
                        m = mounts.get(s)
                        st0 = m.stats() if isinstance(m, Tierfs) else None
                        cpu = {}
                        try:
                            v = self.write_one(s, m, f"{s}-{bs}-{run_i}.bin", bs, cpu)
                        except Exception as e:
                            if s in mounts:
                                self.close_mount(mounts.pop(s), "failed")
                            self.peer_failed(s, f"scenario write W1 run {run_i + 1}", e)
                            skipped[s] = f"failed: {str(e)[-200:]}"
                            continue
                        res["mbps"][s][str(bs)].append(v)
                        res["cpu"].setdefault(s, {}).setdefault(str(bs), []).append(cpu)
                        if st0 is not None:
                            st1 = m.stats()
                            res["stats"].setdefault(s, []).append({
                                "bs": bs, "waits": stat_delta(
                                    st0, st1, "tierfs_write_buffer_waits_total"),
                                "parts": stat_delta(st0, st1, "tierfs_backend_upload_parts_total"),
                                "retries": stat_delta(
                                    st0, st1, "tierfs_backend_upload_retries_total")})
                        log(f"write run {run_i + 1} {s}: {bs // 1024} KiB writes, "
                            f"{v:.0f} MB/s; CPU s/s " + ", ".join(
                                f"{k} {fmt_num(x)}" for k, x in cpu.items()))
        finally:
            for m in mounts.values():
                self.close_mount(m, "scenario write W1")
            shutil.rmtree(self.wstore, ignore_errors=True)
            shutil.rmtree(self.wlocal, ignore_errors=True)
            shutil.rmtree(self.wnull, ignore_errors=True)
        return res

    def write_wait_published(self, m, blocks, timeout=60):
        """Wait until the writer @m has put @blocks written blocks into Redis and has none
        queued (or has given up on the rest: drops, errors). @return its stats then."""
        def done():
            st = m.stats()
            settled = (self.stat_sum(st, "fleet_puts_total") +
                       self.stat_sum(st, "fleet_put_drops_total") +
                       self.stat_sum(st, "fleet_put_errors_total"))
            return self.stat_sum(st, "fleet_put_queued_bytes") == 0 and settled >= blocks
        try:
            wait_until(done, timeout, "the written blocks in Redis", interval=0.1)
        except TimeoutError as e:
            self.notes.append(f"scenario write W2: {e}")
        return m.stats()

    def read_back(self, m, key):
        """drop_caches, then read @key through @m, 1 MiB reads. @return (bytes fetched from
        the store meanwhile, sha256 of what was read, bytes read, seconds)."""
        drop_caches()
        st0 = m.stats()
        h, n = hashlib.sha256(), 0
        t0 = time.monotonic()
        with open(m.path(key), "rb", buffering=0) as f:
            while b := f.read(MiB):
                h.update(b)
                n += len(b)
        t = time.monotonic() - t0
        st1 = m.stats()
        return (stat_delta(st0, st1, "tierfs_backend_received_bytes_total"), h.hexdigest(), n,
                t, st0, st1)

    def write_readback(self):
        """W2. One object written with 1 MiB writes through a mount sharing a new Redis (no
        persistence, maxmemory twice the object, not filled: this counts bytes, not Redis's
        latency), hot_size twice the object (it holds it whole, as the read scenarios' mounts
        do); (a) page cache, dentries and inodes dropped, read back through the same mount;
        (b) once the writer has put every block into Redis, a second mount with the same
        shared= (read-only) reads it back, caches dropped first. Bytes fetched from the store:
        tierfs_backend_received_bytes_total of the reading mount."""
        size = len(self.wdata)
        bs = 4 * MiB  # block_size's default
        blocks = (size + bs - 1) // bs
        key = "readback.bin"
        res = {"size": size, "blocks": blocks}
        proc, port = self.redis_start("redis-write", fill=False,
                                      maxmemory=str(2 * size + 256 * MiB))
        shared = {"shared": f"redis://127.0.0.1:{port}"}
        opts = dict(self.seq_opts(), **shared)
        a = b = None
        try:
            a = self.write_mount("tierfs-s3", opts, tag="wa").start()
            t = self.write_file(a.path(key), MiB, self.wdata)
            got = self.store_size(key)
            if got != size:
                raise RuntimeError(f"{key}: {got} bytes in the store of {size} after close()")
            res["write_mbps"] = size / t / 1e6
            fa, ha, na, ta, _, sta = self.read_back(a, key)
            res["a"] = {"fetched": fa, "ok": ha == self.wsha and na == size, "seconds": ta,
                        "written_blocks": self.stat_sum(sta, "cache_written_blocks_total")}
            log(f"write read-back, this mount: {fa / MiB:.2f} MiB fetched of {size // MiB} MiB, "
                f"sha256 {'right' if res['a']['ok'] else 'WRONG'}")
            sw = self.write_wait_published(a, blocks)
            res["writer"] = {k: self.stat_sum(sw, k) for k in (
                "fleet_puts_total", "fleet_put_drops_total", "fleet_put_errors_total",
                "fleet_put_queued_bytes", "cache_published_blocks_total")}
            bo = {k: v for k, v in opts.items() if k != "allow_write"}
            b = Tierfs("tierfs-s3", self.mnt("tierfs-s3-wb"), f"s3://{self.wbucket}",
                       dict(bo, endpoint=self.s3_endpoint, path_style=None, region="us-east-1"),
                       self.run_dir / "tierfs-s3-wb.log", env=self.s3_env).start()
            wait_until(lambda: b.path(key).exists(), 30, f"the second mount to list {key}")
            fb, hb, nb, tb, s0, s1 = self.read_back(b, key)
            res["b"] = {"fetched": fb, "ok": hb == self.wsha and nb == size, "seconds": tb,
                        "shared_hits": (self.stat_sum(s1, "fleet_hits_total") -
                                        self.stat_sum(s0, "fleet_hits_total"))}
            log(f"write read-back, a second mount sharing Redis: {fb / MiB:.2f} MiB fetched of "
                f"{size // MiB} MiB, sha256 {'right' if res['b']['ok'] else 'WRONG'}; writer: "
                + ", ".join(f"{k} {v:.0f}" for k, v in res["writer"].items()))
        finally:
            for m in (b, a):
                if m:
                    self.close_mount(m, "scenario write W2")
            stop_proc(proc)
            STATE.save()
            try:
                self.wclient.delete_object(Bucket=self.wbucket, Key=key)
            except Exception:
                pass
        return res

    def write_rss(self):
        """W3. A fresh mount with tierfs's defaults (hot_size 1G, lagging_size 128M,
        write_buffer 64M) and allow_write; 4 threads each write a file of the write size at
        once with 1 MiB writes; VmHWM before unmounting against tierfs_memory_bound_bytes
        (hot_size + lagging_size + 64 MiB + write_buffer); every object then in the store
        whole."""
        import threading
        size = len(self.wdata)
        m = self.write_mount("tierfs-s3", tag="wr").start()
        errs, keys = [], [f"rss-{i}.bin" for i in range(4)]

        def writer(key):
            try:
                self.write_file(m.path(key), MiB, self.wdata)
            except OSError as e:
                errs.append(f"{key}: {e}")

        try:
            t0 = time.monotonic()
            ts = [threading.Thread(target=writer, args=(k,), daemon=True) for k in keys]
            for t in ts:
                t.start()
            for t in ts:
                t.join(timeout=1200)
            secs = time.monotonic() - t0
            h, st = m.hwm(), m.stats()
        finally:
            self.close_mount(m, "scenario write W3")
        sizes = [self.store_size(k) for k in keys]
        for k in keys:
            self.wclient.delete_object(Bucket=self.wbucket, Key=k)
        if errs or sizes != [size] * 4:
            raise RuntimeError(f"4 writers: {errs[:3]}; sizes in the store {sizes}")
        o = m.opts
        bound = (parse_size(o.get("hot_size", "1G")) + parse_size(o.get("lagging_size", "128M"))
                 + 64 * MiB + parse_size(o.get("write_buffer", "64M")))
        res = {"size": size, "vm_hwm": h, "bound": bound,
               "bound_stat": st.get("tierfs_memory_bound_bytes"),
               "seconds": secs, "mbps": 4 * size / secs / 1e6,
               "waits": st.get("tierfs_write_buffer_waits_total")}
        log(f"4 concurrent writes: VmHWM {h / MiB:.0f} MiB, bound {bound / MiB:.0f} MiB "
            f"(memory_bound_bytes {fmt_num((res['bound_stat'] or 0) / MiB)} MiB), "
            f"{res['mbps']:.0f} MB/s together, {res['waits']} buffer waits")
        return res



def write_report(b, cols):
    """Rows and targets of scenario write (none for a part that did not run or failed: the
    notes say why). A peer that could not run is SKIPPED, with why, never a figure."""
    rows, targets = [], []
    res = {k: v for k, v in (b.raw["runs"].get("write") or {}).items() if "error" not in v}
    none = {k: ("n/a", None) for k in cols}
    w = res.get("seq")
    if w:
        mb, mib = w["mbps"], w["size"] // MiB
        for bs in (str(MiB), str(8 * 1024)):
            bl = "1 MiB" if bs == str(MiB) else "8 KiB"
            t = mb["tierfs-s3"][bs]
            cells, met, skip = dict(none), [], []
            for peer, lim in (("s3fs", 1.2), ("rclone", 1.5)):
                v = mb.get(peer, {}).get(bs) or []
                r = per_run_ratio(t, v) if v else None
                if r is None:
                    skip.append(f"{peer} SKIPPED: {w['skipped'].get(peer, 'no figure')}")
                    continue
                cells[peer] = (cell(v, " MB/s"), r)
                met.append(r >= lim)
                targets.append((f"write {mib} MiB, {bl} writes, to s3rver: tierfs / {peer}", r,
                                lim, "min"))
            busy = []
            for s in ("tierfs-s3", "s3fs", "rclone"):
                cs = w["cpu"].get(s, {}).get(bs)
                if cs:
                    busy.append(f"{s} {fmt_num(median([c.get('s3rver') for c in cs]))}/"
                                f"{fmt_num(median([c.get('fs') for c in cs]))}")
            busy = "; ".join(busy)
            rows.append((
                f"W1. sequential write of a {mib} MiB file to s3rver through the mount, {bl} "
                f"writes, MB/s from open() to close()'s return (rclone: to the object's arrival, "
                f"it uploads after close); each object checked whole in the store (HEAD); "
                f"tierfs defaults (part_size 8M) + allow_write; in parentheses the CPU s/s of "
                f"s3rver / of the mount's process during each system's writes",
                f"{cell(t, ' MB/s')} ({busy}); s3rver's ceiling, botocore multipart 8 MiB "
                f"parts 4 in flight: {cell(w.get('ceiling') or [], ' MB/s')}, tierfs "
                f"{fmt_num(per_run_ratio(t, w.get('ceiling') or []))}x of it", cells,
                ">= 1.2x s3fs, >= 1.5x rclone" + (f" ({'; '.join(skip)})" if skip else ""),
                all(met) if met else None))
            tf, lo = mb["tierfs-file"][bs], mb["local"][bs]
            r = per_run_ratio(tf, lo)
            lim = WriteScenario.WRITE_FILE_TARGET
            rows.append((
                f"W1 file://. the same {mib} MiB, {bl} writes, through a file:// mount (tierfs "
                f"fsyncs and renames at close), against the same loop writing a local file on "
                f"the same filesystem + fsync: MB/s", f"{cell(tf, ' MB/s')} (local "
                f"{cell(lo, ' MB/s')}; ratio {fmt_num(r)})", none, f">= {lim}x the local file",
                r is not None and r >= lim))
            targets.append((f"write {mib} MiB, {bl} writes, file://: tierfs / local", r, lim,
                            "min"))
            nw = mb.get("nullfs-w", {}).get(bs) or []
            rc = per_run_ratio(tf, nw) if nw else None
            lim = WriteScenario.WRITE_CEILING_TARGET
            cpu = {s: w["cpu"].get(s, {}).get(bs) or [] for s in ("tierfs-file", "nullfs-w")}
            cps = {s: median([c.get("fs") for c in cs]) for s, cs in cpu.items() if cs}
            per_gib = {s: (cps[s] / median(mb[s][bs]) * GiB / 1e6)
                       for s in cps if cps[s] is not None and mb.get(s, {}).get(bs)}
            rows.append((
                f"W1 ceiling. the same {mib} MiB, {bl} writes: the FUSE write ceiling (bench/"
                f"nullfs -w: one pwrite per request into a local file, fsync at close, tierfs's "
                f"max_write and threads), a local file + fsync, and tierfs file://, side by side; "
                f"CPU s per GiB written of each mount's process",
                f"ceiling {cell(nw, ' MB/s')}, local {cell(lo, ' MB/s')}, tierfs "
                f"{cell(tf, ' MB/s')}: tierfs {fmt_num(rc)}x the ceiling; CPU s/GiB tierfs "
                f"{fmt_num(per_gib.get('tierfs-file'))}, ceiling "
                f"{fmt_num(per_gib.get('nullfs-w'))}", none, f">= {lim}x the FUSE ceiling",
                rc is not None and rc >= lim))
            targets.append((f"write {mib} MiB, {bl} writes, file://: tierfs / FUSE ceiling", rc,
                            lim, "min"))
    rb = res.get("readback")
    if rb:
        size, mib = rb["size"], rb["size"] // MiB
        for part, lim, what in (("a", 0.02, "this mount right after close"),
                                ("b", 0.10, "a second mount sharing Redis, once the writer's "
                                 "blocks were put")):
            e = rb.get(part)
            if not e:
                continue
            frac = e["fetched"] / size
            wr = rb.get("writer") if part == "b" else None
            rows.append((
                f"W2{part}. the written object ({mib} MiB, 1 MiB writes) read back after "
                f"drop_caches, {what}: bytes fetched from the store "
                f"(tierfs_backend_received_bytes_total) / object; sha256 of the bytes read",
                f"{e['fetched'] / MiB:.2f} MiB = {100 * frac:.2f}%, sha256 "
                + ("right" if e["ok"] else "**WRONG**")
                + (f"; the writer put {wr['fleet_puts_total']:.0f} of {rb['blocks']} blocks "
                   f"into Redis, dropped {wr['fleet_put_drops_total']:.0f}, "
                   f"{wr['fleet_put_queued_bytes'] / MiB:.1f} MiB still queued" if wr else ""),
                none, f"<= {100 * lim:g}%",
                frac <= lim and e["ok"]))
            targets.append((f"written object read back, {what.split(',')[0]}: fetched / object",
                            frac if e["ok"] else None, lim, "max"))
    rs = res.get("rss")
    if rs:
        r = rs["vm_hwm"] / rs["bound"]
        rows.append((
            f"W3. peak RSS (VmHWM) of tierfs while 4 files of {rs['size'] // MiB} MiB are "
            f"written at once (1 MiB writes, defaults + allow_write), against hot_size + "
            f"lagging_size + 64 MiB + write_buffer", f"{rs['vm_hwm'] / MiB:.0f} MiB of "
            f"{rs['bound'] / MiB:.0f} MiB (memory_bound_bytes "
            f"{fmt_num((rs['bound_stat'] or 0) / MiB)} MiB); {rs['mbps']:.0f} MB/s together, "
            f"{fmt_num(rs['waits'])} buffer waits", none, "<= the bound", r <= 1.0))
        targets.append(("peak RSS 4 concurrent writes / bound", r, 1.0, "max"))
    return rows, targets
