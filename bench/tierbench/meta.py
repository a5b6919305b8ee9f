"""Scenario 10 (meta): first byte by name, ls -l of many keys, a hung store; and its rows."""
from . import common
from .common import *  # noqa: F401,F403


class MetaScenario:
    # -- scenario 10 ------------------------------------------------------------------------

    def scen_meta(self):
        """10. Metadata (issue 8): upload -> first byte by name, ls -l of many keys, lookups
        while the store hangs. Each part is its own row: one that fails is noted and the
        others still run."""
        want = set(self.p["meta_parts"].split(","))
        parts = (("first_byte", self.meta_first_byte), ("ls", self.meta_ls),
                 ("hang", self.meta_hang), ("hang_stale", self.meta_hang_stale))
        res = self.run_parts("scenario 10", [(n, fn) for n, fn in parts if n in want])
        self.raw["runs"]["meta"] = res
        return res

    def meta_s3_mount(self, system, bucket):
        """@system on @bucket with its documented freshness options (what the row states)."""
        mp = self.mnt(f"{system}-meta")
        logp = self.run_dir / f"{system}-meta.log"
        if system == "tierfs-s3":
            o = {"endpoint": self.s3_endpoint, "path_style": None, "region": "us-east-1"}
            return Tierfs("tierfs-s3", mp, f"s3://{bucket}", o, logp, env=self.s3_env)
        if system == "s3fs":
            return Mount("s3fs", mp, [
                "s3fs", bucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"ro,endpoint=us-east-1,dbglevel=warn,{META_S3FS_OPTS}"],
                env=self.s3_env, log_path=logp)
        if system == "rclone":
            # rclone's S3 client refuses to start with AWS_CA_BUNDLE set ("unsupported
            # transport"); the endpoint is plain http, so no bundle is needed
            env = {k: v for k, v in self.s3_env.items() if k != "AWS_CA_BUNDLE"}
            return Mount("rclone", mp, [
                "rclone", "mount", f":s3:{bucket}", str(mp), "--s3-provider", "Other",
                "--s3-endpoint", self.s3_endpoint, "--s3-access-key-id", "S3RVER",
                "--s3-secret-access-key", "S3RVER", "--s3-region", "us-east-1",
                "--s3-no-check-bucket", "--read-only", *META_RCLONE_OPTS.split(),
                "--config", str(self.run_dir / "rclone.conf"), "--log-level", "ERROR"],
                env=env, log_path=logp)
        raise ValueError(system)

    def meta_first_byte(self):
        """A writer PUTs new 64 KiB objects to s3rver, one at a time; for each, a reader per
        mount polls open(name) + read(1) every poll period, from a random 0-1.5 s before the
        PUT (a consumer waiting for the name, at any phase of the mounts' caches) until it gets
        the object's first byte. Time from the PUT's completion to that byte. The readers of
        all systems poll at once, so the noise falls on all of them alike."""
        import random
        import threading
        p = self.p
        n, size, period = p["meta_uploads"], p["meta_upload_size"], p["meta_poll"]
        systems = ["tierfs-s3"] + (["s3fs", "rclone"] if self.peers else [])
        bucket = f"meta{os.getpid()}"
        c = self.s3_client()
        c.create_bucket(Bucket=bucket)
        c.put_object(Bucket=bucket, Key="seed.bin", Body=b"seed")
        mounts, res = {}, {s: {"seconds": [], "polls": [], "missed": 0, "errors": []}
                           for s in systems}
        try:
            for s in systems:
                try:
                    m = mounts[s] = self.meta_s3_mount(s, bucket).start()
                    wait_until(lambda: m.path("seed.bin").exists(), 30, f"{s} to list seed.bin")
                except Exception as e:
                    if s in mounts:
                        self.close_mount(mounts.pop(s), "failed")
                    self.peer_failed(s, "scenario 10 (first byte)", e)
                    res.pop(s)
            rng = random.Random(10)
            deadline_s = p["meta_first_byte_deadline"]
            for i in range(n):
                name = f"new-{i:03d}.bin"
                body = bytes([1 + i % 250]) + os.urandom(size - 1)
                seen = {}

                def reader(s, m, stop):
                    polls, last = 0, None
                    while time.monotonic() < stop:
                        polls += 1
                        try:
                            with open(m.path(name), "rb", buffering=0) as f:
                                b = f.read(1)
                            if b == body[:1]:
                                seen[s] = (time.monotonic(), polls, None)
                                return
                            last = f"first byte {b!r}"
                        except OSError as e:
                            last = e.strerror
                        time.sleep(period)
                    seen[s] = (None, polls, last)

                stop = time.monotonic() + 1.5 + deadline_s
                ts = [threading.Thread(target=reader, args=(s, m, stop), daemon=True)
                      for s, m in mounts.items()]
                for t in ts:
                    t.start()
                time.sleep(rng.uniform(0, 1.5))
                c.put_object(Bucket=bucket, Key=name, Body=body)
                t_put = time.monotonic()
                for t in ts:
                    t.join(deadline_s + 10)
                for s in mounts:
                    t_seen, polls, last = seen.get(s, (None, 0, "reader did not end"))
                    res[s]["polls"].append(polls)
                    if t_seen is None:
                        res[s]["missed"] += 1
                        res[s]["errors"].append(f"{name}: {last}")
                    else:
                        # < 0: read before the PUT's answer reached the writer (s3rver writes
                        # in place); counted as 0
                        res[s]["seconds"].append(max(0.0, t_seen - t_put))
            for s, r in res.items():
                v = r["seconds"]
                r["p50"] = percentile(v, 50)
                r["p99"] = percentile(v, 99)
                r["uploads"] = n
                log(f"meta first byte {s}: p50 {fmt_num(r['p50'])} s, p99 {fmt_num(r['p99'])} s "
                    f"over {len(v)} of {n} uploads ({r['missed']} not seen within "
                    f"{deadline_s} s)")
        finally:
            for s, m in mounts.items():
                self.close_mount(m, "scenario 10 (first byte)")
        return {"systems": res, "poll_s": period, "size": size, "bucket": bucket,
                "deadline_s": deadline_s,
                "opts": {"tierfs-s3": "defaults (negative_ttl=1, metadata_ttl=60)",
                         "s3fs": META_S3FS_OPTS + " (noobj cache off: its default)",
                         "rclone": META_RCLONE_OPTS + " (--attr-timeout 1s: its default)"}}

    def meta_s3_put_rate(self, n=400, threads=8):
        """PUTs of empty objects per second into s3rver, @threads at once: whether a 100k-key
        prefix can be made there in reasonable time."""
        import threading
        bucket = f"putrate{os.getpid()}"
        self.s3_client().create_bucket(Bucket=bucket)

        def w(k):
            cl = self.s3_client()
            for i in range(k, n, threads):
                cl.put_object(Bucket=bucket, Key=f"p/k{i:06d}", Body=b"")

        t0 = time.monotonic()
        ts = [threading.Thread(target=w, args=(k,), daemon=True) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        return n / (time.monotonic() - t0)

    def meta_ls(self):
        """ls -l of N keys in one prefix, on the http backend (nginx over a directory of N
        1-byte files: JSON autoindex for tierfs, HTML for rclone and httpdirfs; httpdirfs
        drops empty files from its listings). Per run and
        system: drop_caches, the source directory read again (so nginx's readdir and stats
        are warm for all alike), a fresh mount of the root, then the timed `ls -l` of the
        prefix; peak RSS (VmHWM) of the filesystem's process, and its rise over the idle
        mount."""
        p = self.p
        n = p["meta_keys"]
        rel = f"meta-ls-{n}"
        d = self.data / rel
        last = d / f"key-{n - 1:06d}.bin"
        if not (last.exists() and last.stat().st_size == 1
                and sum(1 for _ in os.scandir(d)) == n):
            log(f"generating {n} files of 1 byte in {rel}/")
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            for i in range(n):
                (d / f"key-{i:06d}.bin").write_bytes(b"x")
            os.sync()  # else the first run pays the writeback of the new inodes
        rate = self.meta_s3_put_rate()
        log(f"s3rver takes {rate:.0f} PUT/s (8 threads): {n} keys would take "
            f"{n / rate / 60:.1f} min to make, so this row uses the http backend")
        systems = ["tierfs"] + (["rclone", "httpdirfs"] if self.peers else [])
        runs = p["meta_ls_runs"]
        res = {s: [] for s in systems}
        gave_up = set()
        env = dict(os.environ, LC_ALL="C")
        for run_i in range(runs):
            order = systems[run_i % len(systems):] + systems[:run_i % len(systems)]
            for s in order:
                if s in gave_up:
                    continue
                m = None
                try:
                    drop_caches()
                    for e in os.scandir(d):
                        e.stat()
                    if s == "tierfs":
                        m = Tierfs("tierfs", self.mnt("tierfs-ls"), self.http_url, {},
                                   self.run_dir / "tierfs-ls.log")
                    elif s == "rclone":
                        mp = self.mnt("rclone-ls")
                        m = Mount("rclone", mp, [
                            "rclone", "mount", ":http:", str(mp), "--http-url", self.html_url,
                            "--read-only", "--config", str(self.run_dir / "rclone.conf"),
                            "--log-level", "ERROR"], log_path=self.run_dir / "rclone-ls.log")
                    else:
                        cache = self.fresh_cache_dir("httpdirfs")
                        mp = self.mnt("httpdirfs-ls")
                        m = Mount("httpdirfs", mp, [
                            "httpdirfs", "-f", "--cache", "--cache-location", str(cache),
                            "--no-range-check", self.html_url, str(mp)],
                            log_path=self.run_dir / "httpdirfs-ls.log")
                    m.start()
                    idle = vm_hwm(m.proc.pid)
                    t0 = time.monotonic()
                    ls = subprocess.Popen(["ls", "-l", str(m.path(rel))], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=env,
                                          start_new_session=True)
                    try:
                        out, err = ls.communicate(timeout=p["meta_ls_timeout"])
                    except subprocess.TimeoutExpired:
                        # ls waits in the filesystem, unkillable: end the filesystem's process
                        # (ours), which fails its requests, then ls
                        stop_proc(m.proc)
                        stop_proc(ls)
                        raise
                    secs = time.monotonic() - t0
                    peak = m.hwm()
                    lines = out.count("\n")
                    if ls.returncode != 0 or lines != n + 1:
                        raise RuntimeError(f"ls -l: exit {ls.returncode}, {lines - 1} entries of "
                                           f"{n}: {err[-300:]}")
                    res[s].append({"seconds": secs, "vm_hwm": peak, "idle_hwm": idle})
                    log(f"ls -l run {run_i + 1} {s}: {secs:.2f} s, VmHWM {peak / MiB:.0f} MiB "
                        f"(+{(peak - idle) / MiB:.0f} MiB over the idle mount)")
                except Exception as e:
                    if isinstance(e, subprocess.TimeoutExpired):
                        gave_up.add(s)
                        e = RuntimeError(f"ls -l took over {p['meta_ls_timeout']} s: gave up")
                    self.peer_failed(s, f"scenario 10 (ls -l) run {run_i + 1}", e)
                    res[s].append({"error": str(e)[-300:]})
                finally:
                    if m is not None and m.proc is not None:
                        self.close_mount(m, "scenario 10 (ls -l)")
        return {"systems": res, "keys": n, "runs": runs, "s3rver_put_per_s": rate}

    def meta_hang_tree(self):
        """The store of 10c (both variants): k/ (meta_hang_ops names), u/00-u/31 with one name
        each, and a 16 MiB cached.bin. @return (its root, {rel: size}, cached.bin's bytes)."""
        root = self.data / "meta-hang"
        want = {f"k/f{i:03d}.bin": 100 for i in range(self.p["meta_hang_ops"])}
        want.update({f"u/{i:02d}/known.bin": 100 for i in range(32)})
        want["cached.bin"] = 4 * 4 * MiB  # 4 blocks of the default block_size
        for r, sz in want.items():
            f = root / r
            f.parent.mkdir(parents=True, exist_ok=True)
            if not f.exists() or f.stat().st_size != sz:
                write_object(f, sz)
        return root, want, (root / "cached.bin").read_bytes()

    def meta_hang(self):
        """tierfs behind tests/integration/faultproxy.py (in front of nginx's JSON listener):
        every directory listed and a 4-block object read once (O_DIRECT), then every request
        stalls at the proxy (accepted, never answered). 32 lookups of unknown names, one per
        directory, wait for `timeout`;
        meanwhile stats of known names (the kernel's dentries dropped, the directories held
        open so the kernel keeps their inodes: each stat is a LOOKUP answered by tierfs) and
        4 KiB O_DIRECT preads of the cached object are timed one at a time."""
        import mmap
        import threading
        from faultproxy import FaultProxy, faults
        p = self.p
        nops, timeout = p["meta_hang_ops"], p["meta_hang_timeout"]
        root, want, data = self.meta_hang_tree()
        bs = 4 * MiB  # the default block_size
        px = FaultProxy(self.nginx.json_port).start()
        opts = {"timeout": str(timeout), "retries": "0", "max_conns": "32",
                "metadata_ttl": "600", "hot_ttl": "100000000"}
        m = None
        fds, lookups, hang = [], [], None
        res = {"opts": opts, "ops": nops}
        try:
            m = Tierfs("tierfs", self.mnt("tierfs-hang"), px.url + "meta-hang/", opts,
                       self.run_dir / "tierfs-hang.log").start()
            if sorted(os.listdir(m.path("k"))) != sorted(Path(r).name for r in want
                                                          if r.startswith("k/")):
                raise RuntimeError("wrong listing of k/")
            for i in range(32):
                os.listdir(m.path(f"u/{i:02d}"))
            for dd in ["k", "u"] + [f"u/{i:02d}" for i in range(32)]:
                fds.append(os.open(m.path(dd), os.O_RDONLY | os.O_DIRECTORY))
            fd = os.open(m.path("cached.bin"), os.O_RDONLY | os.O_DIRECT)
            fds.append(fd)
            buf = mmap.mmap(-1, bs)
            for off in range(0, len(data), bs):
                if os.preadv(fd, [buf], off) != bs or buf[:] != data[off:off + bs]:
                    raise RuntimeError(f"cached.bin: wrong bytes at {off}")
            small = mmap.mmap(-1, 4096)
            drop_caches()  # dentries of k/*: each stat below is a LOOKUP to tierfs
            hang = faults.stall_headers()
            px.add_rule(lambda r: True, hang)

            def look(i):
                t = time.monotonic()
                try:
                    os.stat(m.path(f"u/{i:02d}/unknown-{os.getpid()}.bin"))
                    e = 0
                except OSError as ex:
                    e = ex.errno
                lookups[i] = (e, time.monotonic() - t)

            lookups = [None] * 32
            ths = [threading.Thread(target=look, args=(i,), daemon=True) for i in range(32)]
            for t in ths:
                t.start()
            try:
                wait_until(lambda: hang.waiting >= 32, 10, "32 lookups stalled at the proxy")
            except TimeoutError:
                pass  # measured anyway, and the number stalled is reported
            res["stalled_at_start"] = hang.waiting
            rng = __import__("random").Random(10)
            st_ms, rd_ms = [], []
            t = time.monotonic()
            st0 = m.stats()  # the control directory never waits on the store either
            res["cat_stats_ms"] = (time.monotonic() - t) * 1000
            t_ops = time.monotonic()
            for i in range(nops):
                t = time.monotonic()
                os.stat(m.path(f"k/f{i:03d}.bin"))
                st_ms.append((time.monotonic() - t) * 1000)
                off = rng.randrange(len(data) // 4096) * 4096
                t = time.monotonic()
                got = os.preadv(fd, [small], off)
                rd_ms.append((time.monotonic() - t) * 1000)
                if got != 4096 or small[:] != data[off:off + 4096]:
                    raise RuntimeError(f"cached.bin: wrong bytes at {off} during the hang")
            res["ops_seconds"] = time.monotonic() - t_ops
            res["stalled_at_end"] = hang.waiting
            # the reads reached tierfs and it fetched nothing; the stats were LOOKUPs (the same
            # stats again, from the kernel's dentries now, show what a dcache hit takes)
            res["check"] = served_check(st0, m.stats(), nops * 4096)
            again = []
            for i in range(nops):
                t = time.monotonic()
                os.stat(m.path(f"k/f{i:03d}.bin"))
                again.append((time.monotonic() - t) * 1000)
            res["stat_again_ms"] = {"p50": percentile(again, 50)}
            res["lookups_done_during_ops"] = sum(1 for x in lookups if x is not None)
            for t in ths:
                t.join(timeout + 30)
            done = [x for x in lookups if x is not None]
            res["unknown"] = {"errnos": sorted({os.strerror(e) if e else "found"
                                                for e, _ in done}),
                              "done": len(done),
                              "max_s": max((s for _, s in done), default=None),
                              "min_s": min((s for _, s in done), default=None)}
            res["stat_ms"] = {"p50": percentile(st_ms, 50), "p99": percentile(st_ms, 99),
                              "max": max(st_ms)}
            res["read_ms"] = {"p50": percentile(rd_ms, 50), "p99": percentile(rd_ms, 99),
                              "max": max(rd_ms)}
            allms = st_ms + rd_ms
            res["all_ms"] = {"p50": percentile(allms, 50), "p99": percentile(allms, 99)}
            log(f"hung store: {res['stalled_at_start']} lookups stalled (still "
                f"{res['stalled_at_end']} after the ops); {nops} stats p50/p99 "
                f"{fmt_num(res['stat_ms']['p50'])}/{fmt_num(res['stat_ms']['p99'])} ms, "
                f"{nops} cached 4 KiB reads p50/p99 {fmt_num(res['read_ms']['p50'])}/"
                f"{fmt_num(res['read_ms']['p99'])} ms (the stats again, from the dentries: p50 "
                f"{fmt_num(res['stat_again_ms']['p50'])} ms; cat .tierfs/stats "
                f"{fmt_num(res['cat_stats_ms'])} ms; check: {res['check'] or 'ok'}); unknown "
                f"names: "
                f"{', '.join(res['unknown']['errnos'])} after "
                f"{fmt_num(res['unknown']['min_s'])}-{fmt_num(res['unknown']['max_s'])} s")
        finally:
            if hang is not None:
                hang.release()
            px.clear_rules()
            px.release()
            for f in fds:
                os.close(f)
            if m is not None and m.proc is not None:
                self.close_mount(m, "scenario 10 (hung store)")
            left = px.stop()
            if left:
                log(f"faultproxy threads did not stop: {left}")
        return res

    def meta_hang_stale(self):
        """10c, stale: the same store and proxy, metadata_ttl=1. Every directory listed, the
        cached object read once (O_DIRECT), then 1.5 s for all of it to go stale, and every
        request stalls at the proxy for longer than metadata_ttl (until the end). 32 lookups
        of unknown names (u/NN/unknown) wait on it; meanwhile, one round at a time: a stat of a
        known name (its dentry expired: a LOOKUP), ls of a known directory, cat
        .tierfs/stats, and an open + 4 KiB O_DIRECT pread + close of the cached object, the
        rounds spread over meta_hang_stale_seconds (several times metadata_ttl, so what the
        rounds themselves refresh goes stale again during the hang). An operation over STUCK_S
        stops the rounds (a store-bound wait: timeout each)."""
        import mmap
        import threading
        from faultproxy import FaultProxy, faults
        STUCK_S = 2.0
        p = self.p
        rounds, timeout = p["meta_hang_stale_ops"], p["meta_hang_timeout"]
        root, want, data = self.meta_hang_tree()
        bs = 4 * MiB
        px = FaultProxy(self.nginx.json_port).start()
        opts = {"timeout": str(timeout), "retries": "0", "max_conns": "32",
                "metadata_ttl": "1", "hot_ttl": "100000000"}
        m, hang, lookups, ths = None, None, [None] * 32, []
        res = {"opts": opts, "rounds": rounds}
        try:
            m = Tierfs("tierfs", self.mnt("tierfs-stale"), px.url + "meta-hang/", opts,
                       self.run_dir / "tierfs-stale.log").start()
            knames = sorted(Path(r).name for r in want if r.startswith("k/"))
            if sorted(os.listdir(m.path("k"))) != knames:
                raise RuntimeError("wrong listing of k/")
            for i in range(32):
                os.listdir(m.path(f"u/{i:02d}"))
            buf = mmap.mmap(-1, bs)
            fd = os.open(m.path("cached.bin"), os.O_RDONLY | os.O_DIRECT)
            try:
                for off in range(0, len(data), bs):
                    if os.preadv(fd, [buf], off) != bs or buf[:] != data[off:off + bs]:
                        raise RuntimeError(f"cached.bin: wrong bytes at {off}")
            finally:
                os.close(fd)
            m.stats()
            time.sleep(1.5)  # names, listings, attributes and versions all past metadata_ttl
            hang = faults.stall_headers()
            px.add_rule(lambda r: True, hang)

            def look(i):
                t = time.monotonic()
                try:
                    os.stat(m.path(f"u/{i:02d}/unknown-{os.getpid()}.bin"))
                    e = 0
                except OSError as ex:
                    e = ex.errno
                lookups[i] = (e, time.monotonic() - t)

            ths = [threading.Thread(target=look, args=(i,), daemon=True) for i in range(32)]
            t_hang = time.monotonic()
            for t in ths:
                t.start()
            try:
                wait_until(lambda: hang.waiting >= 32, 10, "32 refreshes stalled at the proxy")
            except TimeoutError:
                pass  # measured anyway, and the number stalled is reported
            res["stalled_at_start"] = hang.waiting
            small = mmap.mmap(-1, 4096)
            rng = __import__("random").Random(10)

            def open_read():
                fd = os.open(m.path("cached.bin"), os.O_RDONLY | os.O_DIRECT)
                try:
                    off = rng.randrange(len(data) // 4096) * 4096
                    if os.preadv(fd, [small], off) != 4096 or small[:] != data[off:off + 4096]:
                        raise RuntimeError(f"cached.bin: wrong bytes at {off} during the hang")
                finally:
                    os.close(fd)

            ops = {
                "stat": lambda i: os.stat(m.path(f"k/{knames[i % len(knames)]}")),
                "ls": lambda i: os.listdir(m.path(f"u/{i % 32:02d}")),
                "cat_stats": lambda i: (m.mnt / ".tierfs" / "stats").read_bytes(),
                "open_read": lambda i: open_read(),
            }
            ms = {k: [] for k in ops}
            st0 = m.stats()
            res["stuck"] = None
            pace = p["meta_hang_stale_seconds"] / rounds
            for i in range(rounds):
                t_round = time.monotonic()
                for k, fn in ops.items():
                    t = time.monotonic()
                    fn(i)
                    took = time.monotonic() - t
                    ms[k].append(took * 1000)
                    if took > STUCK_S:
                        res["stuck"] = f"{k} took {took:.1f} s in round {i}"
                        break
                if res["stuck"]:
                    break
                time.sleep(max(0.0, pace - (time.monotonic() - t_round)))
            st1 = m.stats()
            res["hang_s"] = time.monotonic() - t_hang
            res["stalled_at_end"] = hang.waiting
            res["check"] = ("not measured: an operation was stuck" if res["stuck"]
                            else served_check(st0, st1, rounds * 4096))
            res["lookups_done_during_ops"] = sum(1 for x in lookups if x is not None)
            for k, v in ms.items():
                res[k + "_ms"] = {"n": len(v), "p50": percentile(v, 50) if v else None,
                                  "p99": percentile(v, 99) if v else None,
                                  "max": max(v) if v else None}
            hang.release()
            px.clear_rules()
            t_back = time.monotonic()
            for t in ths:
                t.join(timeout + 30)
            done = [x for x in lookups if x is not None]
            res["unknown"] = {"errnos": sorted({os.strerror(e) if e else "found"
                                                for e, _ in done}),
                              "done": len(done),
                              "after_back_s": time.monotonic() - t_back}
            log(f"hung store, stale metadata: {res['stalled_at_start']} refreshes stalled (still "
                f"{res['stalled_at_end']} after the ops, {fmt_num(res['hang_s'])} s into the "
                f"hang); p50/p99/max ms: " + ", ".join(
                    f"{k} {fmt_num(res[k + '_ms']['p50'])}/{fmt_num(res[k + '_ms']['p99'])}/"
                    f"{fmt_num(res[k + '_ms']['max'])}" for k in ops)
                + (f"; STUCK: {res['stuck']}" if res["stuck"] else "")
                + f"; check: {res['check'] or 'ok'}; unknown names: "
                f"{', '.join(res['unknown']['errnos'])}, all {res['unknown']['done']} within "
                f"{fmt_num(res['unknown']['after_back_s'])} s of the store's return")
        finally:
            if hang is not None:
                hang.release()
            px.clear_rules()
            px.release()
            if m is not None and m.proc is not None:
                self.close_mount(m, "scenario 10 (hung store, stale metadata)")
            left = px.stop()
            if left:
                log(f"faultproxy threads did not stop: {left}")
        return res



def meta_report(b, cols):
    """Rows and targets of scenario 10 (none if it did not run)."""
    meta = b.raw["runs"].get("meta")
    if not meta:
        return [], []
    rows, targets = [], []
    na = {k: ("n/a", None) for k in cols}

    def failed(part):
        return f"**failed**: {meta[part]['error'][-200:]}"

    # 10a upload -> first byte by name (a part left out by meta_parts has no row)
    fb = meta.get("first_byte")
    lim = 1 + 0.5  # tierfs's default negative_ttl + 0.5 s (issue 8)
    if fb is None:
        pass
    elif "error" in fb:
        rows.append(("10a. upload -> first byte by name", failed("first_byte"), na,
                     f"tierfs p99 <= negative_ttl + 0.5 s ({lim:g} s)", False))
        targets.append(("meta: upload->first byte p99 s (tierfs-s3)", None, lim, "max"))
    else:
        def fbcell(s):
            r = fb["systems"][s]
            return (f"p50/p99 {fmt_num(r['p50'])}/{fmt_num(r['p99'])} s"
                    + (f", **{r['missed']} of {r['uploads']} not seen in "
                       f"{fb['deadline_s']} s**" if r["missed"] else "")
                    + f" ({fb['opts'][s]})")
        cells = dict(na)
        for s in ("s3fs", "rclone"):
            if s in fb["systems"] and s in cells:
                cells[s] = (fbcell(s), None)
        t = fb["systems"].get("tierfs-s3")
        v = t["p99"] if t and not t["missed"] else None
        rows.append((
            f"10a. upload -> first byte by name: a writer PUTs {t['uploads'] if t else '?'} new "
            f"{fb['size'] // 1024} KiB objects to s3rver one at a time, a reader per mount "
            f"(all at once) polls open(name) + read(1) every {fb['poll_s'] * 1000:g} ms from a "
            f"random 0-1.5 s before the PUT; time from the PUT's answer to the first byte",
            fbcell("tierfs-s3") if t else "n/a", cells,
            f"tierfs p99 <= negative_ttl + 0.5 s ({lim:g} s), none missed",
            v is not None and v <= lim))
        targets.append(("meta: upload->first byte p99 s (tierfs-s3)", v, lim, "max"))
    # 10b ls -l of many keys
    ls = meta.get("ls")
    if ls is None:
        pass
    elif "error" in ls:
        rows.append(("10b. ls -l of one prefix of many keys", failed("ls"), na, "(info)", False))
    else:
        n = ls["keys"]

        def lscell(s):
            ok = [r for r in ls["systems"][s] if "error" not in r]
            bad = len(ls["systems"][s]) - len(ok)
            if not ok:
                return "**failed**: " + ls["systems"][s][-1]["error"][-200:]
            rise = median([r["vm_hwm"] - r["idle_hwm"] for r in ok])
            return (f"{cell([r['seconds'] for r in ok], ' s')}, VmHWM "
                    f"{fmt_num(median([r['vm_hwm'] for r in ok]) / MiB)} MiB (+"
                    f"{fmt_num(rise / MiB)} MiB = {rise / n:.0f} B/key over the idle mount)"
                    + (f"; {bad} runs failed" if bad else ""))
        cells = dict(na)
        for s in ("rclone", "httpdirfs"):
            if s in ls["systems"] and s in cells:
                cells[s] = (lscell(s), None)
        if "s3fs" in cells:
            cells["s3fs"] = (f"absent: S3 only, and s3rver takes {ls['s3rver_put_per_s']:.0f} "
                             f"PUT/s (8 threads), {n / ls['s3rver_put_per_s'] / 60:.0f} min for "
                             f"{n} keys", None)
        rows.append((
            f"10b. `ls -l` of {n} keys (1-byte files) in one prefix, http backend (nginx; "
            f"tierfs: JSON index, defaults; rclone `:http:` defaults (a HEAD per file for its "
            f"size); httpdirfs `--cache`): drop_caches, fresh mount, time of `ls -l` "
            f"(median of {ls['runs']} interleaved runs) and the process's VmHWM after it",
            lscell("tierfs"), cells, "(info)", None))
    # 10c lookups while the store hangs
    h = meta.get("hang")
    hl = 100
    if h is None:
        pass
    elif "error" in h:
        rows.append(("10c. stats and cached reads while the store hangs", failed("hang"), na,
                     f"p99 <= {hl} ms", False))
        targets.append(("meta: hung store, stat / cached read p99 ms", None, hl, "max"))
    else:
        v = max(h["stat_ms"]["p99"], h["read_ms"]["p99"])
        inflight = h["stalled_at_start"] == 32 and h["stalled_at_end"] == 32
        u = h["unknown"]
        rows.append((
            f"10c. tierfs behind faultproxy (nginx, `timeout={h['opts']['timeout']},retries=0,"
            f"max_conns=32,metadata_ttl=600`), directories listed and a 16 MiB object read; then "
            f"every request stalls and 32 lookups of unknown names wait on it; meanwhile "
            f"{h['ops']} stats of known names (dentries dropped) and {h['ops']} 4 KiB O_DIRECT "
            f"reads of cached blocks, one at a time: p50/p99",
            f"stat {fmt_num(h['stat_ms']['p50'])}/{fmt_num(h['stat_ms']['p99'])} ms, read "
            f"{fmt_num(h['read_ms']['p50'])}/{fmt_num(h['read_ms']['p99'])} ms; "
            f"{h['stalled_at_start']} / {h['stalled_at_end']} lookups stalled at the start / "
            f"end; unknown names: {', '.join(u['errnos'])} after {fmt_num(u['min_s'])}-"
            f"{fmt_num(u['max_s'])} s; the same stats from the kernel's dentries p50 "
            f"{fmt_num(h['stat_again_ms']['p50'])} ms; reads "
            + (f"**INVALID: {h['check']}**" if h["check"] else "all served by tierfs, none "
               "fetched"), na,
            f"p99 <= {hl} ms with 32 lookups in flight", inflight and v <= hl
            and not h["check"]))
        targets.append(("meta: hung store, stat / cached read p99 ms", v, hl, "max"))
        targets.append(("meta: hung store, lookups in flight during the ops (of 32)",
                        min(h["stalled_at_start"], h["stalled_at_end"]), 32, "min"))
    hang_stale_report(meta.get("hang_stale"), na, hl, rows, targets)
    return rows, targets


def hang_stale_report(h, na, hl, rows, targets):
    """Row 10c (stale) into @rows and @targets: each operation's p99 against @hl ms."""
    kinds = (("stat", "stat of a known name"), ("ls", "ls of a known directory"),
             ("cat_stats", "cat .tierfs/stats"), ("open_read", "open + 4 KiB read + close"))
    name = "meta: hung store past metadata_ttl, worst p99 ms (stat, ls, cat stats, open+read)"
    if h is None:
        return
    if "error" in h:
        rows.append(("10c (stale). stat, ls, cat stats, open+read while the store hangs past "
                     "metadata_ttl", f"**failed**: {h['error'][-200:]}", na,
                     f"each p99 <= {hl} ms", False))
        targets.append((name, None, hl, "max"))
        return
    v = None if h["stuck"] else max(h[k + "_ms"]["p99"] for k, _ in kinds)
    u = h["unknown"]
    rows.append((
        f"10c (stale). The same with `metadata_ttl=1`: listed, the object read, 1.5 s for "
        f"everything to go stale, then every request stalls (longer than metadata_ttl) and "
        f"32 lookups of unknown names wait on it; meanwhile {h['rounds']} rounds over "
        f"{fmt_num(h['hang_s'])} s of the hang, one operation at a time: p50/p99/max",
        "; ".join(f"{d} {fmt_num(h[k + '_ms']['p50'])}/{fmt_num(h[k + '_ms']['p99'])}/"
                  f"{fmt_num(h[k + '_ms']['max'])} ms" for k, d in kinds)
        + (f"; **STUCK: {h['stuck']}**" if h["stuck"] else "")
        + f"; {h['stalled_at_start']} / {h['stalled_at_end']} refreshes stalled at the start "
          f"/ end; unknown names: {', '.join(u['errnos'])} within "
          f"{fmt_num(u['after_back_s'])} s of the store's return; reads "
        + (f"**INVALID: {h['check']}**" if h["check"] else "all served by tierfs, none "
           "fetched"), na,
        f"each p99 <= {hl} ms with 32 lookups in flight", v is not None and v <= hl
        and not h["check"] and h["stalled_at_end"] >= 32))
    targets.append((name, v, hl, "max"))
