/*
 * wedgeshim.c - an LD_PRELOAD shim that stops one of tierfs's loops on demand, for
 * test_operating.py's systemd tests.
 *
 *   $TIERFS_WEDGE_CTL  while this file exists, the backend's I/O loop stops turning: it waits
 *                      in curl_multi_poll at every turn (backend/io.c), and nothing else calls
 *                      it, so this curl_multi_poll sleeps instead. The watchdog's pings must
 *                      stop.
 *   $TIERFS_HOLD_CTL   while this file exists, the FUSE session loop does not start
 *                      (fuse_session_loop_mt / fuse_session_loop wait before libfuse's): the
 *                      mount exists but does not answer. READY=1 must not come before.
 *   $TIERFS_EARLY_CTL  while this file exists, stat() of $TIERFS_EARLY_PATH (the mountpoint)
 *                      answers with its parent's attributes: what a stat made before the
 *                      mount was in place sees. READY=1 must wait, not give up.
 *
 * Only the loop named stops; the other threads run on. Signals cannot do this: SIGSTOP to one
 * thread stops the whole process. Not for production: an access() per call.
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void hold(const char *env)
{
	const char *ctl = getenv(env);

	while (ctl && access(ctl, F_OK) == 0)
		usleep(10000);
}

CURLMcode curl_multi_poll(CURLM *multi, struct curl_waitfd extra_fds[], unsigned int extra_nfds,
			  int timeout_ms, int *numfds)
{
	static CURLMcode (*real)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);

	if (!real)
		real = (CURLMcode(*)(CURLM *, struct curl_waitfd[], unsigned int, int, int *))dlsym(
		    RTLD_NEXT, "curl_multi_poll");
	hold("TIERFS_WEDGE_CTL");
	return real(multi, extra_fds, extra_nfds, timeout_ms, numfds);
}

/* libfuse 3.12+'s versioned loops (FUSE_USE_VERSION 314); the session and config are opaque
 * here. */
int fuse_session_loop_mt(void *se, void *config);
int fuse_session_loop_mt(void *se, void *config)
{
	int (*real)(void *, void *) =
	    (int (*)(void *, void *))dlvsym(RTLD_NEXT, "fuse_session_loop_mt", "FUSE_3.12");

	hold("TIERFS_HOLD_CTL");
	return real(se, config);
}

int fuse_session_loop(void *se);
int fuse_session_loop(void *se)
{
	int (*real)(void *) = (int (*)(void *))dlvsym(RTLD_NEXT, "fuse_session_loop", "FUSE_3.0");

	hold("TIERFS_HOLD_CTL");
	return real(se);
}

/* tierfs is built with _FILE_OFFSET_BITS=64: its stat() is glibc's stat64. */
int stat64(const char *path, struct stat64 *st);
int stat64(const char *path, struct stat64 *st)
{
	static int (*real)(const char *, struct stat64 *);
	const char *ctl = getenv("TIERFS_EARLY_CTL"), *mnt = getenv("TIERFS_EARLY_PATH");
	char parent[PATH_MAX];

	if (!real)
		real = (int (*)(const char *, struct stat64 *))dlsym(RTLD_NEXT, "stat64");
	if (ctl && mnt && strcmp(path, mnt) == 0 && access(ctl, F_OK) == 0 &&
	    strlen(mnt) < sizeof(parent)) {
		strcpy(parent, mnt);
		return real(dirname(parent), st);
	}
	return real(path, st);
}
