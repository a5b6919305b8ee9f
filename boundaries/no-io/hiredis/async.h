/*
 * boundaries/no-io/hiredis/async.h - put in front of the real one on the include path of cache/
 * and fs/ (see meson.build): hiredis belongs to backend/. fs/ reaches the shared tier
 * through backend/redis.h.
 */
#error "<hiredis/async.h> is for backend/ only, not cache/ or fs/ (see meson.build)"
