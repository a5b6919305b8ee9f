#!/bin/sh
# meson install script: make mount(8) find mount.tierfs whatever the prefix.
#
#   install-helper.sh HELPER_DIR TIERFS
#
# util-linux looks for mount.TYPE helpers in /sbin, /sbin/fs.d and /sbin/fs only, so with the
# default /usr/local prefix the sbindir link alone is not found. This links
# $DESTDIR/HELPER_DIR/mount.tierfs to TIERFS (the installed program's absolute path, without
# DESTDIR: the link is read on the target system). fuse3 gets the same effect by being
# packaged with prefix /usr, where sbindir is /usr/sbin (/sbin on merged-/usr systems).
set -eu
dir=$1
target=$2
dest=${DESTDIR:-}$dir
if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
	echo "would link $dest/mount.tierfs -> $target"
	exit 0
fi
mkdir -p "$dest"
ln -sfn "$target" "$dest/mount.tierfs"
echo "Installing symlink pointing to $target to $dest/mount.tierfs"
