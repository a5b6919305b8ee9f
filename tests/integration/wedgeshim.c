/*
 * wedgeshim.c - an LD_PRELOAD shim that wedges tierfs's I/O loop on demand, for
 * test_operating.py's watchdog test: a loop that stops turning must stop the WATCHDOG=1 pings.
 *
 * The loop (backend/io.c) waits in curl_multi_poll at every turn, and nothing else calls it.
 * While the file named by $TIERFS_WEDGE_CTL exists, this curl_multi_poll sleeps instead of
 * returning; once the file is gone it calls libcurl's. Only the I/O thread stops: the session
 * loop, the metrics endpoint and the rest run on. Signals are not a way to do this: SIGSTOP
 * to one thread stops the whole process. Not for production: an access() per poll.
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

CURLMcode curl_multi_poll(CURLM *multi, struct curl_waitfd extra_fds[], unsigned int extra_nfds,
			  int timeout_ms, int *numfds)
{
	static CURLMcode (*real)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
	const char *ctl = getenv("TIERFS_WEDGE_CTL");

	if (!real)
		real = (CURLMcode(*)(CURLM *, struct curl_waitfd[], unsigned int, int, int *))dlsym(
		    RTLD_NEXT, "curl_multi_poll");
	while (ctl && access(ctl, F_OK) == 0)
		usleep(10000);
	return real(multi, extra_fds, extra_nfds, timeout_ms, numfds);
}
