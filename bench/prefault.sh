#!/bin/bash
# bench/prefault.sh: RSS after mount, mount time, and a cold read of a 512 MiB object (MB/s,
# tierfs CPU seconds and minor faults during the read), prefault=on vs off, defaults otherwise, file:// store.
T=${TIERFS:-$(dirname "$0")/../build/tierfs}
# needs a 512 MiB /tmp/pf/store/obj.bin (head -c 512M /dev/urandom) and /tmp/pf/mnt
cat /tmp/pf/store/obj.bin > /dev/null   # source warm in the page cache
st() { awk '{print $10, $14+$15}' /proc/$1/stat; }   # minflt, utime+stime (ticks)
for round in $(seq ${ROUNDS:-5}); do
  for pf in on off; do
    m0=$(date +%s.%N)
    $T file:///tmp/pf/store /tmp/pf/mnt -o prefault=$pf,hot_ttl=86400 || exit 1
    m1=$(date +%s.%N)
    pid=$(pgrep -nf "tierfs file:///tmp/pf/store")
    rss0=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
    read f0 c0 < <(st $pid)
    t0=$(date +%s.%N); dd if=/tmp/pf/mnt/obj.bin of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
    read f1 c1 < <(st $pid)
    rss1=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
    printf "prefault=%-3s mount_s=%.2f rss_mount_MiB=%d cold_MBps=%.0f cpu_s=%.2f minflt=%d rss_read_MiB=%d\n" \
      $pf $(echo "$m1-$m0" | bc -l) $((rss0/1024)) $(echo "536.870912/($t1-$t0)" | bc -l) \
      $(echo "($c1-$c0)/100" | bc -l) $((f1-f0)) $((rss1/1024))
    fusermount3 -u /tmp/pf/mnt
    while kill -0 $pid 2>/dev/null; do sleep 0.1; done
  done
done
