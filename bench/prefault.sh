#!/bin/bash
# bench/prefault.sh: RSS after mount, mount time, and a cold read of a 512 MiB object (MB/s,
# tierfs CPU seconds and minor faults during the read), prefault=on vs off, defaults otherwise,
# file:// store. As root (it mounts). ROUNDS (5) interleaved rounds; PF_DIR the work directory
# (default: a new one under /var/tmp, removed at the end); TIERFS the binary.
set -u
T=${TIERFS:-$(dirname "$0")/../build/tierfs}
dir=${PF_DIR:-$(mktemp -d /var/tmp/prefault-XXXXXX)}
made=$([ -z "${PF_DIR:-}" ] && echo 1)
mkdir -p "$dir/store" "$dir/mnt" || exit 1
pid=
cleanup() {
	mountpoint -q "$dir/mnt" && fusermount3 -u "$dir/mnt"
	[ -n "$pid" ] && while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	[ -n "$made" ] && rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
obj=$dir/store/obj.bin
[ -s "$obj" ] || head -c 512M /dev/urandom > "$obj" || exit 1
cat "$obj" > /dev/null   # source warm in the page cache
now() { date +%s.%N; }
st() { awk '{print $10, $14+$15}' "/proc/$1/stat"; }   # minflt, utime+stime (ticks)
rss() { awk '/VmRSS/{print int($2/1024)}' "/proc/$1/status"; }
for round in $(seq "${ROUNDS:-5}"); do
	for pf in on off; do
		m0=$(now)
		"$T" "file://$dir/store" "$dir/mnt" -o "prefault=$pf,hot_ttl=86400" || exit 1
		m1=$(now)
		pid=$(pgrep -nf "tierfs file://$dir/store")
		rss0=$(rss "$pid")
		read -r f0 c0 < <(st "$pid")
		t0=$(now); dd if="$dir/mnt/obj.bin" of=/dev/null bs=1M status=none; t1=$(now)
		read -r f1 c1 < <(st "$pid")
		rss1=$(rss "$pid")
		awk -v pf="$pf" -v m="$(awk -v a="$m0" -v b="$m1" 'BEGIN{print b-a}')" \
			-v r0="$rss0" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" \
			-v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v f="$((f1 - f0))" -v r1="$rss1" \
			'BEGIN{printf "round %d prefault=%-3s mount_s=%.2f rss_mount_MiB=%d cold_MBps=%.0f cpu_s=%.2f minflt=%d rss_read_MiB=%d\n",
			       '"$round"', pf, m, r0, 536.870912 / t, c / hz, f, r1}'
		fusermount3 -u "$dir/mnt"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
		pid=
	done
done
