/*
 * boundaries/no-io/openssl/params.h - put in front of the real one on the include path of cache/
 * and fs/ (see meson.build): OpenSSL belongs to backend/. fs/ reaches the store through
 * backend.h, cache/ reaches the world through struct cache_env.
 */
#error "<openssl/params.h> is for backend/ only, not cache/ or fs/ (see meson.build)"
