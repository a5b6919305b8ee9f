/*
 * probe.h - is a server there? A connect with a deadline, for the warnings a mount gives
 * before it serves (a shared tier nobody answers is otherwise silent: its reads just go to
 * the store).
 */
#ifndef TIERFS_PROBE_H
#define TIERFS_PROBE_H

/* Called for each server of the list that did not answer: @server as written ("host:port"),
 * @err the -errno of its connect (-ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -ENOENT for a
 * name that does not resolve, -EINVAL for a malformed entry). */
typedef void (*bk_probe_fn)(void *arg, const char *server, int err);

/*
 * Connect (TCP, then close at once) to each server of @servers, "[redis://]host:port[,...]"
 * as shared= takes it, each within @timeout_ms; report each that failed through @bad.
 * Blocks the caller for up to @timeout_ms per server that does not answer: at mount only.
 * @return the number of servers that failed.
 */
int bk_probe_servers(const char *servers, unsigned timeout_ms, bk_probe_fn bad, void *arg);

#endif
