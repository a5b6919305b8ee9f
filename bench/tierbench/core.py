"""The bench's state and what several scenarios share: parameters, the servers, mounts
and their clean-up, Redis servers and fleets of mounts, the S3 client, the machine's description."""
from . import common
from .common import *  # noqa: F401,F403


class BenchCore:
    FILL_IDLE = 3  # s: see redis_fill

    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        q = self.quick
        self.p = {
            "seq_size": 256 * MiB if q else GiB,
            "runs": args.runs or (3 if q else 5),
            "rand_seconds": 2 if q else 5,  # per system and run, in 0.5 s slices
            "cached_passes": 2 if q else 3,  # cached re-reads per system and run
            # seconds before each cold read of scenario 1: this VM's host takes back guest
            # memory freed a few seconds earlier, so without a pause a system read just after
            # another was unmounted (the prefault mounts free 640 MiB) gets memory still backed
            # and one read after a system that kept its memory gets none: the order decided
            "cold_settle": 4,
            "multi_runs": 2 if q else 3,
            "hot_files": 4,
            "hot_file_size": 32 * MiB if q else 64 * MiB,
            "old_files": 4 if q else 10,
            "old_file_size": 256 * MiB,
            "lagrand_rate": "50M",  # scenario 11: tierfs's default lagging_rate
            "lagrand_seconds": 15,
            "iso_hot_size": 192 * MiB if q else 384 * MiB,
            "iso_lagging_size": 32 * MiB,  # the smallest lagging tier (8 blocks of 4M)
            "iso_rate": "100M",
            "iso_slice": 1,  # seconds of tail reads per slice
            "iso_pairs": 15,  # alone / with replay slice pairs (5 left the quick figure at 0.99-1.59 per pair)
            "rate_seconds": 6 if q else 20,
            "rate_runs": 1 if q else 2,
            "rates": ["20M", "100M"],
            "broker_live": 10 if q else 30,  # segments uploaded while the consumers run
            "broker_old": 4 if q else 8,  # old segments for the lagging consumer
            "broker_interval": 3.0,
            "meta_uploads": 15 if q else 50,  # 10: new objects, each read by name
            "meta_upload_size": 64 * 1024,
            "meta_poll": 0.01,  # seconds between a reader's attempts
            "meta_first_byte_deadline": 30,
            "meta_keys": 20000 if q else 100000,  # 10: ls -l of one prefix
            "meta_ls_runs": 1 if q else 3,
            "meta_ls_timeout": 300,
            "meta_hang_ops": 200,  # 10: stats and cached reads during a hung store
            "meta_hang_timeout": 10,
            "meta_hang_stale_ops": 100,  # 10c stale: rounds of stat, ls, cat stats, open+read
            "meta_hang_stale_seconds": 3.0,  # ... spread over this much of the hang at least
            # the parts of scenario 10 to run, e.g. --set meta_parts=hang,hang_stale
            "meta_parts": "first_byte,ls,hang,hang_stale",
            "disk_runs": 3 if q else 5,  # disk hit / local file pairs
            "disk_recover_size": 2 * GiB if q else 10 * GiB,  # records filled for recovery
            "disk_recover_runs": 3,
            "shared_runs": 1 if q else 3,
            "shared_timeout": "",  # "": tierfs's default
            "shared_pace": "64M",  # 12b: each paced reader's bytes a second ("": no 12b)
            # the rows of scenarios 12-13 to run: "alone" and "shared" (1, 2 and 3 mounts at full
            # speed), "paced" (12b), "budget" (13); e.g. --set shared_rows=paced
            "shared_rows": "alone,shared,paced,budget",
            "shared_opts": "",  # more mount options for scenario 12's mounts, e.g. prefault=on
            # a command redis-server runs under, e.g. "chrt -f 1": Redis as on its own host,
            # served as soon as it can run (an experiment; "": as any other process)
            "redis_wrap": "",
            "fleet_rate": "30M",
            "fleet_seconds": 6 if q else 15,
            "mac_rounds": 5 if q else 9,  # 12c: rounds of (plain, keyed) shared-hit reads
            "trace_runs": 5 if q else 9,  # trace: interleaved on/off pairs
            "trace_rand_seconds": 1.0,  # trace: each random-read pass
            "sim_mounts": 100,  # sim: brokers of the fleet replayed together
            "sim_duration": "1h",  # sim: their trace's span
            # scenario write (issue 29): the size of every written file (seq.bin's bytes),
            # interleaved runs of W1, seconds of quiet before each timed write (the previous
            # one's memory given back), the parts to run
            "write_runs": 2 if q else 3,
            "write_settle": 2,
            "write_rows": "seq,readback,rss",
        }
        for kv in args.set:
            k, v = kv.split("=", 1)
            if k not in self.p:
                raise SystemExit(f"--set: no parameter {k} (have: {', '.join(self.p)})")
            self.p[k] = type(self.p[k])(json.loads(v) if not isinstance(self.p[k], str) else v)
        self.peers = args.peers if args.peers is not None else not q
        self.work = Path(args.work)
        self.out = Path(args.out)
        self.raw = {"params": self.p, "peers": self.peers, "runs": {}}
        self.notes = []

    # -- setup ----------------------------------------------------------------------------

    def setup(self):
        self.work.mkdir(parents=True, exist_ok=True)
        self.data = self.work / ("data-quick" if self.quick else "data-full")
        self.run_dir = Path(os.environ.get("BENCH_RUN_DIR") or
                            (self.work / f"run-{os.getpid()}"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        STATE.file = self.run_dir / "state"
        STATE.save()
        t0 = time.monotonic()
        self.files = make_dataset(self.data, self.p)
        self.s3 = S3rver(self.run_dir / "s3rver").start()
        self.nginx = Nginx(self.run_dir / "nginx", self.data, self.s3.port).start()
        log(f"nginx on 127.0.0.1:{self.nginx.json_port} (json) {self.nginx.html_port} (html) "
            f"{self.nginx.proxy_port} (s3 proxy); s3rver on 127.0.0.1:{self.s3.port}")
        self.bucket = "bench"
        self.s3.upload(self.bucket, "seq.bin", self.data / "seq.bin")
        warm([self.data / r for r in self.files])
        self.http_url = f"http://127.0.0.1:{self.nginx.json_port}/"
        self.html_url = f"http://127.0.0.1:{self.nginx.html_port}/"
        self.s3_endpoint = f"http://127.0.0.1:{self.nginx.proxy_port}"
        self.s3_env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy",
                  "ALL_PROXY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            self.s3_env.pop(k, None)
        pw = self.run_dir / "s3fs.passwd"
        pw.write_text("S3RVER:S3RVER\n")
        pw.chmod(0o600)
        self.s3fs_passwd = pw
        self.mnt_n = 0
        self.hwm = []  # (system, VmHWM, configured cache bytes, opts)
        log(f"setup took {time.monotonic() - t0:.1f}s")

    def rewarm(self, rels):
        """Read the sources of @rels (and s3rver's copies) again: drop_caches in a cached
        scenario drops the servers' pages too, and cold reads are measured from warm
        servers."""
        warm([self.data / r for r in rels])
        warm([f for f in (self.s3.dir / "data").rglob("*") if f.is_file()
              and any(f.name.startswith(Path(r).name) for r in rels)])

    def mnt(self, name):
        self.mnt_n += 1
        return self.run_dir / "mnt" / f"{name}-{self.mnt_n}"

    def fresh_cache_dir(self, name):
        d = self.run_dir / "cache" / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    # -- systems ---------------------------------------------------------------------------

    def seq_opts(self):
        hot = 512 * MiB if self.quick else 2 * GiB
        return {"hot_size": size_opt(hot), "hot_ttl": "100000000"}

    def new_mount(self, system, opts=None):
        """A fresh, cold mount of @system; its seq object is m.path(m.seq)."""
        name = system
        logp = self.run_dir / f"{system}.log"
        if system in ("tierfs", "tierfs-pf"):
            o = opts or dict(self.seq_opts(), **({"prefault": "on"} if system == "tierfs-pf" else {}))
            m = Tierfs(system, self.mnt(name), self.http_url, o, logp)
        elif system in ("tierfs-s3", "tierfs-s3-pf"):
            o = dict(self.seq_opts(), endpoint=self.s3_endpoint, path_style=None,
                     region="us-east-1", **({"prefault": "on"} if system.endswith("-pf") else {}))
            m = Tierfs(system, self.mnt(name), f"s3://{self.bucket}", o, logp,
                       env=self.s3_env)
        elif system == "nullfs":
            mp = self.mnt(name)
            m = Mount("nullfs", mp, [str(common.NULLFS), str(mp), f"seq.bin={self.p['seq_size']}",
                                     "-f"], log_path=logp)
        elif system == "s3fs":
            cache = self.fresh_cache_dir("s3fs")
            mp = self.mnt(name)
            m = Mount("s3fs", mp, [
                "s3fs", self.bucket, str(mp), "-f", "-o",
                f"url={self.s3_endpoint},use_path_request_style,passwd_file={self.s3fs_passwd},"
                f"use_cache={cache},ro,endpoint=us-east-1,dbglevel=warn"],
                env=self.s3_env, log_path=logp)
        elif system == "rclone":
            cache = self.fresh_cache_dir("rclone")
            mp = self.mnt(name)
            m = Mount("rclone", mp, [
                "rclone", "mount", ":http:", str(mp), "--http-url", self.html_url,
                "--vfs-cache-mode", "full", "--cache-dir", str(cache), "--read-only",
                "--config", str(self.run_dir / "rclone.conf"), "--log-level", "ERROR"],
                log_path=logp)
        elif system == "httpdirfs":
            cache = self.fresh_cache_dir("httpdirfs")
            mp = self.mnt(name)
            m = Mount("httpdirfs", mp, [
                "httpdirfs", "-f", "--cache", "--cache-location", str(cache), "--no-range-check",
                self.html_url,
                str(mp)], log_path=logp)
        else:
            raise ValueError(system)
        m.start()
        # first lookup of the object (namespace listing, HEAD) is not part of the read
        try:
            wait_until(lambda: m.path("seq.bin").exists(), 30, f"{system} to list seq.bin")
            # and one open (httpdirfs sets up its cache file at the first open, and concurrent
            # first opens race in it: ENOENT)
            os.close(os.open(m.path("seq.bin"), os.O_RDONLY))
        except BaseException:
            self.close_mount(m, "failed")
            raise
        return m

    def peer_failed(self, s, scen, e):
        """A peer that fails is noted and left out of that run; tierfs failing stops the bench."""
        if s.startswith("tierfs"):
            raise e
        msg = f"{s} failed in {scen}: {str(e)[-300:]}"
        log(msg)
        self.notes.append(msg)

    def close_mount(self, m, note=""):
        h = m.hwm()
        if h and isinstance(m, Tierfs):
            try:
                st = m.stats()
                keep = {k: v for k, v in st.items()
                        if re.match(r"tierfs_cache_(bounces|evictions|fetches|misses|hits)_total"
                                    r"|tierfs_backend_(requests|received_bytes)_total", k)}
            except OSError:
                keep = {}
            self.hwm.append({"system": m.name, "vm_hwm": h, "cache_bytes": m.cache_bytes,
                             "opts": m.opts, "note": note, "stats": keep})
        elif h:
            self.hwm.append({"system": m.name, "vm_hwm": h, "cache_bytes": None, "note": note})
        m.stop()

    @staticmethod
    def redis_fill(port, maxmemory=1 << 30):
        """Fill a new redis-server past its maxmemory with 4 MiB values of other keys, so that
        it runs as a fleet's Redis runs after its first hour: full, evicting, its memory in
        use. An empty one stores every value in memory it has never touched, and on this VM
        that ingests 4 MiB SETs at about 200 MB/s (about 20 ms each) against 1.3-2 GB/s once
        it is full (redis-benchmark -t set -d 4194304): its GETs then wait behind SETs for
        tens of ms, which is the VM's page faults, not the shared tier."""
        n = maxmemory // (4 << 20) + 32
        run(["redis-benchmark", "-p", str(port), "-t", "set", "-d", str(4 << 20), "-n", str(n),
             "-r", "1000000000", "-c", "2", "-q"], timeout=300)

        # Redis's LRU clock counts whole seconds: values written in the same second or two as
        # the fill look as old as it, and allkeys-lru evicted a run's own fresh values (4-11
        # of 64 with one mount) for the fill's, which a second mount then fetched again. After an
        # hour the fill would be an hour old: wait until Redis sees it FILL_IDLE s old.
        def idle():
            key = subprocess.run(["redis-cli", "-p", str(port), "randomkey"], text=True,
                                 capture_output=True, timeout=10).stdout.strip()
            out = subprocess.run(["redis-cli", "-p", str(port), "object", "idletime", key],
                                 text=True, capture_output=True, timeout=10).stdout.strip()
            return int(out) if out.isdigit() else 0
        wait_until(lambda: idle() >= BenchCore.FILL_IDLE, 30, "the fill to age in Redis's LRU clock",
                   interval=0.2)

    def redis_start(self, name, fill=True, maxmemory="1gb"):
        """A redis-server as docs/caching.md says a fleet runs it (no persistence, allkeys-lru), on a
        free port, filled past its maxmemory unless not @fill; @return (process, port)."""
        d = self.run_dir / name
        d.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            port = free_port()
            out = open(d / "redis.log", "ab")
            proc = subprocess.Popen(
                self.p["redis_wrap"].split() + [
                    "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--maxmemory", str(maxmemory), "--maxmemory-policy",
                    "allkeys-lru", "--dir", str(d)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)
            out.close()
            STATE.add_proc(proc)
            try:
                wait_until(lambda: proc.poll() is not None or port_open(port), 20,
                           "redis-server")
                if proc.poll() is None:
                    if fill:
                        self.redis_fill(port)
                    return proc, port
            except TimeoutError:
                pass
            stop_proc(proc)
        raise RuntimeError("redis-server did not start: "
                           + (d / "redis.log").read_text(errors="replace")[-1000:])

    @staticmethod
    def stat_sum(st, name):
        return sum(v for k, v in st.items() if k.split("{")[0] == f"tierfs_{name}")

    @staticmethod
    def get_latency(sts):
        """The GET latency histogram summed over mounts' stats @sts: [(bound s, GETs
        answered within it, late answers included)], cumulative, the last bound inf."""
        pre = 'tierfs_fleet_get_seconds_bucket{tier="fleet",le="'
        h = {}
        for st in sts:
            for k, v in st.items():
                if k.startswith(pre):
                    le = float(k[len(pre):].split('"')[0])
                    h[le] = h.get(le, 0) + v
        return sorted(h.items())

    def fleet_mounts(self, n, opts, tag):
        ms = []
        try:
            for i in range(n):
                ms.append(Tierfs("tierfs", self.mnt(f"tierfs-{tag}{i}"), self.http_url, opts,
                                 self.run_dir / f"tierfs-{tag}{i}.log").start())
        except BaseException:
            for m in ms:
                self.close_mount(m, "failed")
            raise
        return ms

    def run_parts(self, what, parts):
        """Run each (name, fn) of @parts into a dict of results; a part that fails is logged,
        noted and recorded as {"error": ...}, and the others still run."""
        res = {}
        for part, fn in parts:
            try:
                res[part] = fn()
            except Exception as e:
                msg = f"{what} ({part}) failed: {str(e)[-500:]}"
                log(msg)
                self.notes.append(msg)
                res[part] = {"error": str(e)[-500:]}
        return res

    def s3_client(self):
        import botocore.session
        from botocore.config import Config

        return botocore.session.get_session().create_client(
            "s3", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{self.s3.port}",
            aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
            config=Config(s3={"addressing_style": "path"}, proxies={},
                          retries={"max_attempts": 3}, max_pool_connections=16))

    # -- report -----------------------------------------------------------------------------

    def machine(self):
        def ver(cmd, pat=None):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
                t = (r.stdout + r.stderr).strip()
                if pat:
                    m = re.search(pat, t)
                    return m.group(1) if m else t.splitlines()[0]
                return t.splitlines()[0] if t else "?"
            except Exception:
                return "not found"

        cpu = "?"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        s3v = json.loads((REPO / "tests/integration/node_modules/s3rver/package.json")
                         .read_text())["version"]
        git = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                             capture_output=True, text=True).stdout.strip()
        return {
            "nproc": os.cpu_count(), "cpu": cpu, "memory": f"{mem / 1024 / 1024:.1f} GiB",
            "kernel": platform.release(), "os": ver(["cat", "/etc/debian_version"]),
            "tierfs": f"{ver([str(common.TIERFS), '-V'])} (git {git})",
            "libfuse": ver(["pkg-config", "--modversion", "fuse3"]),
            "nginx": ver(["nginx", "-v"], r"nginx/(\S+)"),
            "node": ver(["node", "--version"]), "s3rver": s3v,
            "curl": ver(["curl", "--version"], r"curl (\S+)"),
            "s3fs": ver(["s3fs", "--version"], r"V(\S+)"),
            "rclone": ver(["rclone", "version"], r"rclone (\S+)"),
            "httpdirfs": ver(["httpdirfs", "--version"], r"HTTPDirFS version (\S+)"),
            "gnuplot": ver(["gnuplot", "--version"]),
            "loadavg_start": self.load_start, "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
        }
