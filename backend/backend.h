/*
 * backend.h - the object store behind a mount: stat, list, read a range.
 *
 * Three schemes share this interface: s3://bucket[/prefix], http(s)://base/ and file:///dir.
 * Paths are relative to the mount's root, '/'-separated, without a leading slash ("" is the
 * root). Metadata calls come in two forms: synchronous (backend_stat, backend_list: the
 * caller waits, so never from a FUSE worker) and asynchronous (backend_stat_async,
 * backend_list_async); range reads are asynchronous. Asynchronous calls complete on the
 * backend's single I/O thread. Every error crossing this interface is a -errno: HTTP status
 * and curl codes are mapped inside backend/ and never leave it.
 *
 * Writing (s3 and file; http is read-only) is new objects only, each written whole by one
 * upload: see "writing" at the end.
 */
#ifndef TIERFS_BACKEND_H
#define TIERFS_BACKEND_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/statvfs.h>

#include "hist.h"

#define BK_ETAG_MAX 128

struct bk_meta {
	uint64_t size;
	int64_t mtime;          /* seconds since epoch; INT64_MIN if the store gave none */
	uint32_t mtime_ns;      /* its fraction in ns, 0..999999999; 0 where the store gives
				 * whole seconds (HTTP Last-Modified; S3, whose HEAD does) */
	char etag[BK_ETAG_MAX]; /* as the store sends it (quotes included); "" if none */
	bool have_perm;         /* the store has permission bits (file://); false for s3, http */
	uint32_t perm;          /* with have_perm: the store's permission bits, 0..0777 */
};

struct backend_cfg {
	const char *url;         /* s3://, http://, https:// or file:// */
	const char *endpoint;    /* s3: http(s)://host[:port]; NULL = AWS for the region */
	const char *region;      /* s3: NULL = us-east-1 */
	bool path_style;         /* s3: bucket in the path instead of the host name */
	const char *profile;     /* s3: credentials profile */
	const char *credentials; /* s3: credentials file */
	const char *manifest;    /* http: file of relative paths, one per line, instead of index */
	const char *ca_file;     /* https: extra CA bundle */
	bool insecure;           /* https: do not verify the peer */
	unsigned max_conns;      /* parallel transfers (>= 2) */
	unsigned timeout_s;      /* per request */
	unsigned retries;        /* extra attempts for retryable failures */
	/* The mount writes (allow_write): without it every write call below is -EROFS, and
	 * backend_start touches nothing in the store (file:// removes leftover temporary files
	 * only with it). */
	bool writable;
	/* A listing's bounds; 0 = BK_LIST_MAX_KEYS, BK_LIST_MAX_BYTES, or less if the environment
	 * says so (TIERFS_LIST_MAX_KEYS, TIERFS_LIST_MAX_BYTES: for tests; never more) */
	uint64_t list_max_keys;
	uint64_t list_max_bytes;
	/* Where the backend reports failures worth a log line (never a secret); may be NULL.
	 * Called from any thread. level: 0 error, 1 warning, 2 info, 3 debug. */
	void (*log)(void *log_arg, int level, const char *line);
	void *log_arg;
};

struct backend;

/*
 * Parse @cfg->url and set up (credentials loaded, no thread yet, no network yet).
 * @return 0 and *ret; or -errno with one line for the user in @err.
 */
int backend_new(const struct backend_cfg *cfg, struct backend **ret, char *err, size_t errlen);
void backend_free(struct backend *b);

/* Does @url start with a scheme this backend serves (s3://, http://, https://, file://, in any
 * case)? The one list of schemes; option parsing asks it through backend_url_check. */
bool backend_scheme_known(const char *url);

/*
 * Check @url against the rules of its scheme (backend.c's table, url.c), before anything is
 * set up, and lower-case its scheme in place ("HTTPS://h" -> "https://h": schemes are compared
 * byte for byte later). A scheme must be there and known; s3:// names a bucket, http(s):// a
 * host, file:// an absolute path; no scheme takes user:password@. @url holds no control
 * character (the caller's check).
 * @return 0; -EINVAL with one line in @err; -EACCES with one line in @err when the URL
 * carries a password, which the caller may word its own way (where credentials go instead).
 */
int backend_url_check(char *url, char *err, size_t errlen);

/* The one error helper of URLs and mount options (url.c, backend.c, fs/opts.c): one line into
 * @err (if any; control characters become '?'), and @r returned. */
int bk_fail(char *err, size_t errlen, int r, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int bk_vfail(char *err, size_t errlen, int r, const char *fmt, va_list ap);

/* Start / stop the I/O thread. Metadata calls and reads need it running. Stopping fails every
 * queued or running read with -ESHUTDOWN. @return 0 or -errno. */
int backend_start(struct backend *b);
void backend_stop(struct backend *b);

/*
 * Check the store answers at the root (bucket exists, credentials accepted, server up).
 * @return 0, or -errno with one line for the user in @err.
 */
int backend_check(struct backend *b, char *err, size_t errlen);

/* The store's room, where it can tell (file: the statvfs of the filesystem it is on), into
 * *ret. @return 0, or -ENOTSUP: an object store's API tells no capacity. */
int backend_space(struct backend *b, struct statvfs *ret);

/* HEAD (or stat) one object; *ret is written whole (fields a store lacks are zero).
 * @return 0 and *ret, -ENOENT, -EACCES, -EIO, -ETIMEDOUT... */
int backend_stat(struct backend *b, const char *path, struct bk_meta *ret);

/*
 * Called once per entry of a directory: @name is one path segment; @meta is NULL if the listing
 * gave no metadata for a file (then the caller stats it). For a directory @meta is NULL, or
 * carries only have_perm and perm (file://). Return 0 to go on, negative to stop.
 */
typedef int (*bk_list_fn)(void *arg, const char *name, bool is_dir, const struct bk_meta *meta);

/*
 * A listing's bounds, for every scheme, counted as the entries reach the caller's callback
 * (repeats included: the caller holds every entry until the listing ends). Past either one
 * the listing stops and fails with -EFBIG, and one line is logged. They are far above a real
 * directory (a broker's largest hold some hundreds of thousands of keys) and keep a hostile
 * or broken store, which may page forever, from filling memory: at the key bound a listing
 * is thousands of S3 requests and a few hundred MiB held, per refresh.
 */
#define BK_LIST_MAX_KEYS 4000000u          /* entries in one directory's listing */
#define BK_LIST_MAX_BYTES (256ull << 20)   /* bytes of their names and ETags together */

/* List directory @dir ("" = root). Entries may repeat and come in any order.
 * @return 0, the callback's negative value, or -errno (-EFBIG: over the bounds above). */
int backend_list(struct backend *b, const char *dir, bk_list_fn fn, void *arg);

/* Completion of a read: 0 when exactly the requested bytes are in dst, else -errno
 * (-ESTALE: the object is no longer the version @etag named). */
typedef void (*bk_done_fn)(void *arg, int err);

/* How soon a read is wanted. Background reads use only part of the connection slots, so urgent
 * reads always have some; urgent ones start first. */
enum bk_prio {
	BK_URGENT = 0,
	BK_BACKGROUND = 1,
};

/*
 * Read @len bytes at @off of @path into @dst, asynchronously, with priority @prio. If @etag is
 * non-empty the request is conditional on it. @done runs exactly once, on the I/O thread, also
 * on failure; until then @dst must stay valid.
 * @return 0 (queued) or -errno (not queued, @done not called).
 */
int backend_read(struct backend *b, const char *path, const char *etag, uint64_t off,
		 uint32_t len, void *dst, enum bk_prio prio, bk_done_fn done, void *arg);

/* Run @cb(@arg) on the I/O thread after @delay_ns. @return 0 or -errno. */
int backend_defer(struct backend *b, uint64_t delay_ns, void (*cb)(void *arg), void *arg);

/* What a request to the store does, as its latency is labelled (op="get", bk_op_name). */
enum bk_op {
	BK_OP_GET,  /* a range read */
	BK_OP_HEAD, /* an object's metadata */
	BK_OP_LIST, /* a listing (or an index, or the check at mount) */
	BK_OP_PUT,  /* a write of bytes: PutObject, UploadPart, CopyObject */
	BK_OP_POST, /* a multipart upload started or completed */
	BK_OP_DELETE, /* an object removed, or a multipart upload aborted */
	BK_OP_N,
};

/* "get", "head", "list", "put", "post", "delete". */
const char *bk_op_name(enum bk_op op);

struct bk_stats {
	uint64_t requests;   /* HTTP requests (or file reads) started, retries included */
	uint64_t retries;
	uint64_t errors;     /* requests that finished with an error after retries */
	uint64_t absent;     /* HEADs answered 404: a name the store does not have (a new name
			      * looked up before it is written), not counted in errors */
	uint64_t bytes;      /* body bytes received for range reads */
	uint64_t active;     /* transfers running now */
	uint64_t queued;     /* reads waiting for a connection slot */
	uint64_t slowdowns;  /* 503 SlowDown / 429 answers received */
	uint64_t window;     /* transfers allowed at once now (AIMD), <= max_conns */
	uint64_t merged;     /* range reads that went out inside another's request (io.c) */

	/* writes (backend_upload_*, s3 and file) */
	uint64_t uploads_started;   /* backend_upload_new calls that made an upload */
	uint64_t uploads_completed; /* commits the store acknowledged: the object is there */
	uint64_t uploads_failed;    /* commits that ended in an error: the object is not there */
	uint64_t uploads_aborted;   /* uploads undone, counted when the undoing is over:
				     * backend_upload_abort, or a failed commit (S3's
				     * AbortMultipartUpload answered, file://'s temp removed) */
	uint64_t abort_errors;	    /* S3 aborts the store refused or never answered (parts left
				     * for the bucket's lifecycle rule, docs/semantics.md) */
	uint64_t parts;		    /* parts the store acknowledged (a PutObject counts one) */
	uint64_t bytes_up;	    /* body bytes of those parts */
	uint64_t upload_retries;    /* write requests sent again (parts, PutObject, Complete...) */
	uint64_t tmp_removed;	    /* file://: leftover temporary files removed at start */
	/* time from a request sent to its answer, each attempt on its own, by what it does
	 * (file://: a read's pread) */
	struct bk_hist lat[BK_OP_N];
};
/* Hold this thread's range reads until backend_unplug and submit them together, so that
 * consecutive ones can go to the store as one request (io_plug). s3 and http: file's reads
 * are jobs (io_defer), which a plug does not hold. */
void backend_plug(struct backend *b);
void backend_unplug(struct backend *b);
void backend_get_stats(struct backend *b, struct bk_stats *ret);

/* The scheme @b serves: "s3", "http" or "file" (https:// is "http"). */
const char *backend_scheme(const struct backend *b);

/* ---- asynchronous metadata ---------------------------------------------------------------- */

/* Completion of backend_stat_async: @err 0 with @meta (valid during the call only), or -errno
 * as backend_stat returns it (-EISDIR: a directory on a store that has them). */
typedef void (*bk_stat_done_fn)(void *arg, int err, const struct bk_meta *meta);

/*
 * backend_stat without waiting: HEAD through the I/O loop (s3, http), or a job on the I/O
 * thread (file). @done runs exactly once, on the I/O thread, also on failure.
 * @return 0 (queued) or -errno (not queued, @done not called).
 */
int backend_stat_async(struct backend *b, const char *path, bk_stat_done_fn done, void *arg);

/*
 * backend_list without waiting: @fn is called for each entry and then @done once with 0, the
 * callback's negative value or -errno (-EFBIG: over BK_LIST_MAX_*), all on the I/O thread. S3
 * pages are asked one after another, each as the previous one arrives; @fn sees every page's
 * entries as it is parsed.
 * @return 0 (queued) or -errno (not queued, neither @fn nor @done called).
 */
int backend_list_async(struct backend *b, const char *dir, bk_list_fn fn, bk_done_fn done,
		       void *arg);

/* ---- writing ------------------------------------------------------------------------------- */

/*
 * An upload writes ONE new object, whole or not at all: nothing appears under its name until
 * backend_upload_commit's done reports success, which comes only after the store acknowledged
 * the whole object; a failed or abandoned upload leaves nothing new under the name.
 *
 *   backend_upload_new ─► backend_upload_part × N (in order) ─► backend_upload_commit ─► done
 *                                     └──────────────────────────► backend_upload_abort
 *
 *   s3    one part that was never sent goes up as ONE PutObject at commit; from the second
 *         part on, CreateMultipartUpload, UploadPart per part (several in flight), and
 *         CompleteMultipartUpload; AbortMultipartUpload if it fails or is abandoned
 *   file  a hidden temporary file beside the name (".tierfs-tmp-*", never listed nor opened by
 *         the read path), written part by part, then fsync, rename into place beneath the
 *         root (never following a symlink), fsync of the directory
 *
 * Threads: part, commit and abort of one upload are called by one thread at a time (any
 * thread, never blocking on the store); every done runs once, on the I/O thread (once
 * backend_stop has begun, possibly on the thread that stops it or calls abort). Hashing a
 * part's bytes (S3: SHA-256 signed into the request, Content-MD5) is done by the caller's
 * thread in backend_upload_part.
 */
struct bk_upload;

#define BK_PART_SIZE_DEFAULT (8ull << 20) /* 8 MiB */
#define BK_PART_SIZE_MIN     (5ull << 20) /* S3: every part but the last is at least 5 MiB */
#define BK_PART_SIZE_MAX     (5ull << 30) /* S3: at most 5 GiB */
#define BK_PARTS_MAX	     10000u	  /* S3: part numbers 1..10000 */
#define BK_IN_FLIGHT_DEFAULT 4u
#define BK_IN_FLIGHT_MAX     64u

struct bk_upload_cfg {
	/* Every part but the last is exactly this many bytes; 0: BK_PART_SIZE_DEFAULT. s3: from
	 * BK_PART_SIZE_MIN, and at most BK_PARTS_MAX parts (80,000 MiB at the default; a part
	 * past that is -EFBIG); file: any size. At most BK_PART_SIZE_MAX. */
	uint64_t part_size;
	/* Parts handed over whose done has not run yet, at most; 0: BK_IN_FLIGHT_DEFAULT; 2..
	 * BK_IN_FLIGHT_MAX (s3 holds the first part back, see backend_upload_part, so one
	 * would never do). */
	unsigned max_parts_in_flight;
	/* May the object replace one already under the name? false: the store refuses it at
	 * commit (-EEXIST). s3: "If-None-Match: *" on PutObject and CompleteMultipartUpload,
	 * which AWS S3 honours since 2024 (412); a store that ignores it (s3rver 3) overwrites.
	 * file: rename(2) with RENAME_NOREPLACE, or link(2) where that is not supported. */
	bool overwrite;
	/* The priority of the upload's requests on the I/O loop (s3): the caller's policy. */
	enum bk_prio prio;
};

/* May this mount write (backend_cfg.writable, and a scheme that can: s3 and file)? */
bool backend_writable(const struct backend *b);

/*
 * Prepare an upload of a new object at @path ('/'-separated, relative to the root, not "").
 * No I/O yet: the store hears of it with the first part sent (or at commit). @cfg NULL:
 * defaults. *ret is the caller's until backend_upload_commit or backend_upload_abort.
 * @return 0 and *ret; -EROFS (not writable), -EINVAL (a bad @cfg or @path, or a name the
 * store reserves), -ENOMEM.
 */
int backend_upload_new(struct backend *b, const char *path, const struct bk_upload_cfg *cfg,
		       struct bk_upload **ret);

/*
 * Hand over the next @len bytes of the object. Every part but the last is exactly part_size
 * bytes; a shorter part is the last one (another part then is -EINVAL); an empty object has
 * no part at all (commit at once). @done runs once, on the I/O thread, when the bytes are
 * safely with the store (s3: the part acknowledged, its ETag checked against the MD5 of what
 * was sent; file: written to the temporary file) or with -errno when they are not; @data must
 * stay valid and unchanged until then.
 *
 * s3 holds a first part back, unsent, until the next call: a second part starts a multipart
 * upload and sends both, a commit sends it as one PutObject. Its done therefore comes only
 * after the next part or the commit: never wait for one part's done before handing over the
 * next while fewer than max_parts_in_flight are in flight.
 *
 * The caller bounds what it has in flight: more than max_parts_in_flight is refused with
 * -EAGAIN (nothing is queued beyond it). A part after a failure (an earlier part's done got
 * an error) is refused with that error: the upload is lost, abort it (or commit, which
 * reports the error).
 * @return 0 (taken: done will run), or -errno (not taken, done not called): -EAGAIN,
 * -EINVAL (the contract above; after commit or abort), -EFBIG, -ENOMEM, a failure already seen.
 */
int backend_upload_part(struct bk_upload *u, const void *data, size_t len, bk_done_fn done,
			void *arg);

/* Completion of a commit: @err 0 with @meta (valid during the call only), or -errno. */
typedef void (*bk_commit_fn)(void *arg, int err, const struct bk_meta *meta);

/*
 * Finish the upload: once every part's done has run, make the object appear (s3: PutObject or
 * CompleteMultipartUpload; file: fsync, rename into place, fsync of the directory). @done
 * runs once, on the I/O thread, after every part's done: with 0 and the new object's size,
 * mtime and version (meta.etag: s3, the ETag the store answered; file, the same
 * "dev-ino-size-mtime_ns" string the read path computes), so the caller can key cache blocks
 * by it; or with -errno (the part failure first seen, -EEXIST, -ENOSPC, -EIO...), and then
 * nothing was left under the name (s3: the multipart upload aborted; file: the temporary file
 * removed). mtime is the store's clock when it answered (s3: its Date header; file: the
 * file's mtime), which a later listing may show a second apart on S3.
 * After this call @u is the backend's: it is freed after @done, and must not be used again.
 * @return 0 (done will run) or -errno (done not called; @u is still the caller's, to abort).
 */
int backend_upload_commit(struct bk_upload *u, bk_commit_fn done, void *arg);

/*
 * Abandon the upload: nothing appears under the name. Parts in flight finish first (their
 * done runs as usual; parts s3 has not sent yet, the held first one or those waiting for
 * CreateMultipartUpload's answer, get -ECANCELED); then s3 sends AbortMultipartUpload (best
 * effort: a failure is counted in abort_errors and logged) and file removes its temporary
 * file. Frees @u when that is over (uploads_aborted counts it then); @u must not be used
 * again. NULL is allowed; after a commit that returned 0, nothing happens.
 */
void backend_upload_abort(struct bk_upload *u);
/* backend_upload_abort, and @done(@arg, 0) once the undoing is over (then nothing of the upload
 * is left: no temporary file, no multipart upload but one whose abort the store refused,
 * counted in abort_errors). @done may run before this returns (nothing was sent yet), so call
 * it without a lock @done takes. With NULL @u, @done runs at once. */
void backend_upload_abort_then(struct bk_upload *u, bk_done_fn done, void *arg);

/*
 * Remove the object (s3: DeleteObject, which S3 answers 204 whether or not it was there;
 * file: unlinkat beneath the root, a symlink itself and not its target). @done runs once, on
 * the I/O thread. @return 0 (done will run) or -errno (not queued): -EROFS...
 */
int backend_unlink_async(struct backend *b, const char *path, bk_done_fn done, void *arg);

/*
 * Rename @from to @to, objects or directories. file: renameat beneath the root (with
 * RENAME_NOREPLACE unless @overwrite, else -EEXIST), then fsync of both directories. s3 has
 * no rename: -EXDEV at once, so mv(1) and Java's Files.move copy and unlink themselves (a copy
 * is a new upload), and the store never holds a half-renamed state (mountpoint-s3 does not
 * emulate rename either; s3fs copies and deletes inside the mount, which is not atomic).
 * @return 0 (done will run) or -errno (not queued): -EXDEV, -EROFS...
 */
int backend_rename_async(struct backend *b, const char *from, const char *to, bool overwrite,
			 bk_done_fn done, void *arg);

/*
 * Make directory @path (file: mkdirat beneath the root, 0755, fsync of its parent; -EEXIST if
 * something is there) or remove an empty one (file: unlinkat AT_REMOVEDIR). s3 has no
 * directories (key prefixes are): both succeed at once, done(0) on the I/O thread, and no
 * marker object is written, so a directory with nothing in it is not in the store.
 * @return 0 (done will run) or -errno (not queued).
 */
int backend_mkdir_async(struct backend *b, const char *path, bk_done_fn done, void *arg);
int backend_rmdir_async(struct backend *b, const char *path, bk_done_fn done, void *arg);

#endif
