#!/bin/bash
# bench/disk_hit.sh: a disk-tier hit against reading the same bytes from a local file on the
# same disk, the page cache dropped before each (echo 3), both with dd bs=1M (the same
# access mode). The store is file:// on another path of the same disk; a first mount fills
# the disk tier and is unmounted; each round then mounts again (so the memory tiers are
# empty), drops the caches and reads the object through tierfs (every block a disk hit: the
# stats must show no fetch), then drops the caches and reads the local copy.
#   SIZE_MB=1024 ROUNDS=3 bench/disk_hit.sh        (root: drop_caches)
# EXTRA=prefault=on adds mount options: prefault faults the hot ring in at mount, so that the
# read does not also pay for zeroing hot_size of fresh pages (most of a first read's time).
T=${TIERFS:-$(dirname "$0")/../build/tierfs}
D=${DIR:-/var/tmp/tierfs-diskhit}
SIZE_MB=${SIZE_MB:-1024}
OPTS="cache_dir=$D/cache,disk_size=$((SIZE_MB * 2))M,hot_ttl=86400,immutable${EXTRA:+,$EXTRA}"
mkdir -p $D/store $D/mnt $D/cache
[ -s $D/store/obj.bin ] || head -c ${SIZE_MB}M /dev/urandom > $D/store/obj.bin
[ $(stat -c %s $D/store/obj.bin) = $((SIZE_MB << 20)) ] || head -c ${SIZE_MB}M /dev/urandom > $D/store/obj.bin
cp $D/store/obj.bin $D/local.bin
mnt() { $T file://$D/store $D/mnt -o $OPTS || exit 1; }
umnt() { pid=$(pgrep -nf "tierfs file://$D/store"); fusermount3 -u $D/mnt
         while kill -0 $pid 2>/dev/null; do sleep 0.1; done; }
rd() { sync; echo 3 > /proc/sys/vm/drop_caches; t0=$(date +%s.%N)
       dd if=$1 of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
       echo "$SIZE_MB*1.048576/($t1-$t0)" | bc -l; }
# fill: 32 MiB at a time, letting the writer catch up (a store faster than the disk would
# otherwise fill the write queue, and blocks that find it full are not written)
drained() { grep -q "^tierfs_disk_queued_bytes{tier=\"disk\"} 0$" $D/mnt/.tierfs/stats; }
mnt
for ((i = 0; i < SIZE_MB / 32; i++)); do
  dd if=$D/mnt/obj.bin of=/dev/null bs=1M skip=$((i * 32)) count=32 status=none
  until drained; do sleep 0.1; done
done
umnt
for round in $(seq ${ROUNDS:-3}); do
  mnt
  disk=$(rd $D/mnt/obj.bin)
  fetched=$(awk '/^tierfs_cache_fetches_total/{s+=$2} END{print s}' $D/mnt/.tierfs/stats)
  hits=$(awk '/^tierfs_cache_hits_total{tier="disk"}/{print $2}' $D/mnt/.tierfs/stats)
  umnt
  local=$(rd $D/local.bin)
  printf "disk_hit_MBps=%.0f local_file_MBps=%.0f ratio=%.2f disk_hits=%s store_fetches=%s\n" \
    $disk $local $(echo "$disk/$local" | bc -l) $hits $fetched
done
