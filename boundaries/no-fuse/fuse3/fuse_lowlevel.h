/*
 * boundaries/no-fuse/fuse3/fuse_lowlevel.h - put in front of the real one on the include path of cache/
 * and backend/ (see meson.build): FUSE belongs to fs/, which includes it as <fuse_lowlevel.h> through
 * fuse3's pkg-config. cache/ answers through callbacks, backend/ through its interface.
 */
#error "<fuse3/fuse_lowlevel.h> is for fs/ only, not cache/ or backend/ (see meson.build)"
