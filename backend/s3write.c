/*
 * s3write.c - writing to S3: PutObject, multipart uploads, AbortMultipartUpload, DeleteObject.
 *
 * An upload (upload.h) becomes one of two request sequences, decided by its second call:
 *
 *   part 1 ──held──┬── commit ──► PutObject(part 1, or empty) ─────────────────► done
 *                  └── part 2 ──► CreateMultipartUpload ──► UploadPart 1, 2, 3 ... (several
 *                                   (parts wait in pend)      in flight, any order)
 *                                                           commit, all parts done ──►
 *                          [no overwrite: HEAD, 404 ──►] CompleteMultipartUpload ──► done
 *                                          [answered no ETag: HEAD ──►]
 *                      any failure, or abort ──► AbortMultipartUpload ──► done(err) / free
 *
 * An object of one part therefore costs one request, and a multipart upload exists in the
 * store only once a second part is known to come.
 *
 * No overwrite without allow_overwrite. PutObject and Complete carry "If-None-Match: *", which
 * AWS S3 honours on both. Not every store does: Ceph RGW 16 honours it on PutObject only, and
 * a Complete to a name another client took meanwhile silently replaced that object. So a
 * multipart upload also HEADs its name just before Complete, and a name found taken ends the
 * upload with -EEXIST (aborted, the other object untouched), on every store: one small request
 * per object of several parts. What is left on a store that ignores the condition is the time
 * between that HEAD's answer and the store's handling of Complete: an object made in that
 * window is replaced. docs/semantics.md has the table of stores.
 *
 * Complete's answer carries the object's ETag, except on stores that send an empty one (Ceph
 * RGW 16: <ETag></ETag>). The upload succeeded all the same: a HEAD learns the ETag, which is
 * taken only if it is the one our parts make (the MD5 of their MD5s, "-N"); otherwise (another
 * writer came after us, a HEAD that failed, a store with ETags of its own) the object is
 * reported under that computed ETag, so nothing cached from our bytes is ever served for
 * someone else's object: a read of another version gets 412 to If-Match, never our bytes.
 *
 * Bytes are checked end to end by their MD5. Every body (a part, a PutObject, Complete's
 * document) goes with its MD5 as Content-MD5, a signed header, computed by the caller's thread
 * when it hands the part over, so S3 refuses bytes damaged or changed on the way (BadDigest:
 * tried again, as a corrupt answer is); the header being signed, nobody on the way can change
 * the bytes and their MD5 together. The payload's SHA-256 would check the same bytes a second
 * time, so it is not computed: x-amz-content-sha256 is UNSIGNED-PAYLOAD (as the AWS SDKs send
 * over TLS, with a checksum of their own); it cost the mount and the store each about 0.7 CPU
 * seconds a GiB written (docs/performance.md).
 * The ETag S3 answers for a part or a PutObject is the MD5 of what it stored unless the bucket
 * encrypts with KMS (x-amz-server-side-encryption: aws:kms); a 32-hex-digit ETag that differs
 * from what we sent is -EIO and the part goes again. Every request goes through io.c's
 * retries and backoff, its body handed to curl whole again by each attempt.
 *
 * Retried requests that may have succeeded the first time. A PutObject or Complete sent with
 * "If-None-Match: *" (overwrite not allowed) whose first answer was lost gets 412 on the
 * retry, and a retried Complete whose first attempt went through gets 404 NoSuchUpload. Not
 * every retry is ours to count: curl itself sends a request again, once, when a kept-alive
 * connection dies before any answer. So every such 412 or 404 is looked into with a HEAD: the
 * upload succeeded if the object's ETag is the one our bytes make (the part's MD5; for a
 * multipart object the MD5 of the parts' MD5s, "-N"), which is also the case when another
 * writer put exactly these bytes there first.
 * CreateMultipartUpload retried after a lost answer can leave an unused upload behind, which
 * the bucket's lifecycle rule (docs/semantics.md) removes, as it does the parts of a killed
 * process.
 *
 * Locking: u->lock guards the s3up fields marked so; the I/O thread alone runs advance(), the
 * request completions and every done. Requests are submitted with no lock held, from the
 * caller's thread (parts, once the upload id is known) or the I/O thread. Workload: one
 * request per part of several MiB, and a few small ones per object.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>

#include "s3_i.h"
#include "s3xml.h"
#include "scheme.h"

/* The S3 state of one upload. */
struct s3up {
	struct s3 *s;
	struct bk_upload *u;
	char *upload_id;	   /* u->lock; NULL until CreateMultipartUpload answered */
	bool creating;		   /* u->lock: CreateMultipartUpload in flight */
	bool end_seen;		   /* u->lock: the I/O thread has taken the commit or abort in
				    * (end_job): only then may advance() finish */
	bool aborting;		   /* u->lock, with end_seen: it was an abort */
	bool finishing;		   /* u->lock: advance() sent (or ended) the last requests */
	unsigned busy;		   /* u->lock: completions calling a done: advance() waits */
	struct bk_part *held;	   /* u->lock: part 1, not sent yet */
	struct bk_part *pend;	   /* u->lock: parts waiting for the upload id, in order */
	char **etags;		   /* u->lock: [no - 1], the ETag each part was answered */
	unsigned char (*md5s)[16]; /* u->lock: [no - 1], the MD5 of each part */
	uint32_t cap;		   /* u->lock: entries of etags and md5s */
	int err;		   /* I/O thread: the failure a commit ends with after Abort */
};

enum op_kind {
	OP_CREATE,
	OP_PART,
	OP_PUT,
	OP_COMPLETE,
	OP_ABORT,
	OP_CONFIRM,  /* HEAD after a 412 or 404 to PutObject or Complete: did an earlier attempt
		      * of ours go in? */
	OP_PRECHECK, /* HEAD before Complete without overwrite: is the name still free? */
	OP_LEARN,    /* HEAD after a Complete answered without an ETag: the object's ETag */
	OP_DELETE,
};

/* One request of an upload (or a DeleteObject), its io_req's arg: what signing it and
 * reading its answer need. Owned by the request's completion. */
struct s3op {
	enum op_kind kind;
	struct backend *b;
	struct s3 *s;
	struct s3up *su;	/* NULL for OP_DELETE */
	struct bk_part *p;	/* OP_PART; OP_PUT and OP_CONFIRM: the held part, or NULL */
	char md5_b64[25];	/* Content-MD5 of the body; "" for none (no body) */
	char want_etag[64];	/* the ETag our bytes make, quotes included; "" unknown */
	char *body;		/* owned: the Complete document */
	enum op_kind was;	/* OP_CONFIRM: OP_PUT or OP_COMPLETE */
	char etag[BK_ETAG_MAX]; /* OP_COMPLETE: the ETag its answer's body carries, "" none */
	int64_t date;		/* OP_LEARN: Complete's answer's Date, INT64_MIN if none */
	int err;		/* OP_CONFIRM: what to report if the object is not ours */
	bk_done_fn done;	/* OP_DELETE */
	void *arg;
};

static void advance(struct s3up *su);

/* ---- pure helpers ------------------------------------------------------------------------- */

static void hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

void s3_multipart_etag(const unsigned char (*md5s)[16], uint32_t n, char *ret, size_t retlen)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char h[33];

	if (!EVP_Digest(md5s, (size_t)n * 16, md, &mdlen, EVP_md5(), NULL) || mdlen != 16) {
		snprintf(ret, retlen, "%s", "");
		return;
	}
	hex(md, 16, h);
	snprintf(ret, retlen, "\"%s-%u\"", h, n);
}

/* The MD5 of @len bytes at @data. @return 0 or -ENOMEM. */
static int md5_of(const void *data, size_t len, unsigned char md5[16])
{
	unsigned int n = 0;

	return EVP_Digest(data, len, md5, &n, EVP_md5(), NULL) && n == 16 ? 0 : -ENOMEM;
}

static void md5_b64(const unsigned char md5[16], char ret[25])
{
	EVP_EncodeBlock((unsigned char *)ret, md5, 16);
}

/* Is @etag (as answered, quotes included) an MD5 that differs from @want ("\"hex\"")? A
 * store whose ETags are something else (40 hex digits, "-N", a version) is not judged. */
static bool etag_differs(const char *etag, const char *want)
{
	size_t n = strlen(etag);

	if (n >= 2 && etag[0] == '"' && etag[n - 1] == '"') {
		etag++;
		n -= 2;
	}
	if (n != 32 || strspn(etag, "0123456789abcdefABCDEF") < 32)
		return false;
	return strncasecmp(etag, want + 1, 32) != 0;
}

/* ---- requests ----------------------------------------------------------------------------- */

static struct s3op *op_new(enum op_kind kind, struct backend *b, struct s3up *su)
{
	struct s3op *op = calloc(1, sizeof(*op));

	if (op) {
		op->kind = kind;
		op->b = b;
		op->s = b->priv;
		op->su = su;
	}
	return op;
}

static void op_free(struct s3op *op)
{
	if (op) {
		free(op->body);
		free(op);
	}
}

/* The signer: a body is protected by its Content-MD5, signed, so its payload is
 * UNSIGNED-PAYLOAD; a request without one signs the empty body's SHA-256. */
static int sign_op(struct io_req *r, struct curl_slist **list, void *arg)
{
	struct s3op *op = arg;
	struct kv md5 = {"content-md5", op->md5_b64};

	if (!op->md5_b64[0])
		return s3_sign(op->s, r, list, EMPTY_SHA256, NULL, 0);
	return s3_sign(op->s, r, list, "UNSIGNED-PAYLOAD", &md5, 1);
}

/* An S3 error code in @r's body that says the bytes were damaged or late on the way. */
static bool damaged(const struct io_req *r)
{
	static const char *const codes[] = {"BadDigest", "XAmzContentSHA256Mismatch",
					    "IncompleteBody", "RequestTimeout"};
	char code[64] = "";

	if (r->status != 400 || !r->body ||
	    s3xml_parse_error(r->body, r->body_len, code, sizeof(code), NULL, 0) < 0)
		return false;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strcmp(code, codes[i]) == 0)
			return true;
	return false;
}

static bool kms(const struct io_req *r)
{
	return strncasecmp(r->sse, "aws:kms", 7) == 0;
}

/* io_check_fn: what the status alone would pass or refuse, looked at closer. */
static void check_op(struct io_req *r, bool *retry)
{
	struct s3op *op = r->arg;
	char code[64];

	if (r->err) {
		if (damaged(r)) {
			r->err = -EIO;
			*retry = true;
		}
		return;
	}
	if ((op->kind == OP_PART || op->kind == OP_PUT) && op->want_etag[0] && !kms(r) &&
	    etag_differs(r->etag_got, op->want_etag)) {
		snprintf(r->errmsg, sizeof(r->errmsg),
			 "ETag %s is not the MD5 of the bytes sent %s", r->etag_got, op->want_etag);
		r->err = -EIO;
		*retry = true;
	} else if (op->kind == OP_COMPLETE &&
		   s3xml_parse_complete(r->body, r->body_len, op->etag, sizeof(op->etag), code,
					sizeof(code)) < 0) {
		snprintf(r->errmsg, sizeof(r->errmsg), "status %ld with %s%s", r->status,
			 code[0] ? "error " : "no CompleteMultipartUploadResult", code);
		r->err = -EIO;
		*retry = true;
	}
}

static void op_done(struct io_req *r);

/*
 * Send @op for the object's key with @query (NULL: none), @method, and the body @body of
 * @len bytes (not copied; valid until the answer). @return 0, or -errno (op not freed).
 */
static int op_submit(struct s3op *op, const char *key, const char *query, const char *method,
		     const void *body, size_t len)
{
	const struct bk_upload_cfg *cfg = op->su ? &op->su->u->cfg : NULL;
	struct io_req *r = s3_new_req(op->s, key, query);
	int e = -ENOMEM;

	if (!r)
		return -ENOMEM;
	r->method = method;
	r->head = op->kind == OP_CONFIRM || op->kind == OP_PRECHECK || op->kind == OP_LEARN;
	r->upload = body;
	r->upload_len = len;
	r->prio = cfg ? cfg->prio : BK_URGENT;
	r->check = check_op;
	r->done = op_done;
	r->arg = op;
	if (body || op->kind == OP_PUT) { /* signed with the body's hash */
		r->sign = sign_op;
		r->sign_arg = op;
	}
	if (method && strcmp(method, "DELETE")) { /* PUT, POST */
		/* Create's Content-Type becomes the object's, as PutObject's does */
		if (io_req_header(r, "Expect", "") < 0 || /* no 100-continue round trip */
		    io_req_header(r, "Content-Type",
				  op->kind == OP_COMPLETE ? "application/xml"
							  : "application/octet-stream") < 0 ||
		    (op->md5_b64[0] && io_req_header(r, "Content-MD5", op->md5_b64) < 0))
			goto fail;
		if ((op->kind == OP_PUT || op->kind == OP_COMPLETE) && !cfg->overwrite &&
		    io_req_header(r, "If-None-Match", "*") < 0)
			goto fail;
	}
	e = io_submit(op->b->io, r);
	if (e == 0)
		return 0;
fail:
	r->arg = NULL;
	io_req_free(r);
	return e;
}

/* UploadPart @p, the upload id being @id. @return 0 or -errno (p still ours). */
static int send_part(struct s3up *su, struct bk_part *p, const char *id)
{
	struct s3op *op = op_new(OP_PART, su->u->b, su);
	char num[16], *query;
	int e;

	if (!op)
		return -ENOMEM;
	snprintf(num, sizeof(num), "%u", p->no);
	struct kv q[] = {{"partNumber", num}, {"uploadId", id}};
	query = sigv4_canonical_query(q, 2);
	if (!query) {
		op_free(op);
		return -ENOMEM;
	}
	op->p = p;
	md5_b64(p->md5, op->md5_b64);
	op->want_etag[0] = '"';
	hex(p->md5, 16, op->want_etag + 1);
	strcat(op->want_etag, "\"");
	e = op_submit(op, su->u->path, query, "PUT", p->data, p->len);
	free(query);
	if (e < 0)
		op_free(op);
	return e;
}

/* ---- the upload's life --------------------------------------------------------------------- */

static void su_free(struct s3up *su)
{
	for (uint32_t i = 0; i < su->cap; i++)
		free(su->etags[i]);
	free(su->etags);
	free(su->md5s);
	free(su->upload_id);
	free(su);
}

int s3_upload_init(struct bk_upload *u)
{
	struct s3up *su = calloc(1, sizeof(*su));

	if (!su)
		return -ENOMEM;
	su->s = u->b->priv;
	su->u = u;
	u->priv = su;
	return 0;
}

/* Room for part @no's ETag and MD5. Under u->lock. @return 0 or -ENOMEM. */
static int grow(struct s3up *su, uint32_t no)
{
	uint32_t cap = su->cap ? su->cap : 16;
	char **e;
	unsigned char(*m)[16];

	if (no <= su->cap)
		return 0;
	while (cap < no)
		cap *= 2;
	e = realloc(su->etags, cap * sizeof(*e));
	if (!e)
		return -ENOMEM;
	su->etags = e;
	memset(e + su->cap, 0, (cap - su->cap) * sizeof(*e));
	m = realloc(su->md5s, cap * sizeof(*m));
	if (!m)
		return -ENOMEM;
	su->md5s = m;
	su->cap = cap;
	return 0;
}

/* CreateMultipartUpload, for the held part and @p: both wait in pend for the upload id. Under
 * u->lock. @return 0 or -errno (nothing changed). */
static int start_multipart(struct s3up *su, struct bk_part *p)
{
	struct s3op *op = op_new(OP_CREATE, su->u->b, su);
	int e;

	if (!op)
		return -ENOMEM;
	e = op_submit(op, su->u->path, "uploads=", "POST", NULL, 0);
	if (e < 0) {
		op_free(op);
		return e;
	}
	su->creating = true;
	su->held->next = p;
	su->pend = su->held;
	su->held = NULL;
	return 0;
}

int s3_upload_part(struct bk_upload *u, struct bk_part *p, int step)
{
	struct s3up *su = u->priv;
	char *id = NULL;
	int e = md5_of(p->data, p->len, p->md5);

	if (e < 0)
		return e;
	pthread_mutex_lock(&u->lock);
	e = grow(su, p->no);
	if (e == 0) {
		memcpy(su->md5s[p->no - 1], p->md5, 16);
		if (step == UPLOAD_HOLD) {
			su->held = p;
		} else if (step == UPLOAD_START) {
			e = start_multipart(su, p);
		} else if (su->creating) {
			struct bk_part **pp = &su->pend;

			while (*pp)
				pp = &(*pp)->next;
			*pp = p;
		} else if (su->upload_id) {
			id = su->upload_id; /* set once, before any part is sent */
		} else {
			e = u->plan.err ? u->plan.err : -EIO; /* Create failed just now */
		}
	}
	pthread_mutex_unlock(&u->lock);
	return e == 0 && id ? send_part(su, p, id) : e;
}

/* The answer to CreateMultipartUpload: send the parts that waited for it, or end them. */
static void create_done(struct s3op *op, struct io_req *r)
{
	struct s3up *su = op->su;
	struct bk_upload *u = su->u;
	struct bk_part *p, *next;
	char *id = NULL;
	int e = r->err;

	if (e == 0 && s3xml_parse_initiate(r->body, r->body_len, &id) < 0)
		e = -EIO;
	pthread_mutex_lock(&u->lock);
	su->busy++;
	su->creating = false;
	su->upload_id = id;
	if (e && !u->plan.err)
		u->plan.err = e; /* no part after this one is taken */
	p = su->pend;
	su->pend = NULL;
	if (e == 0 && u->plan.ended && !u->commit_done)
		e = -ECANCELED; /* aborted meanwhile: the waiting parts are not sent */
	pthread_mutex_unlock(&u->lock);
	for (; p; p = next) {
		int pe = e;

		next = p->next;
		p->next = NULL;
		if (pe == 0)
			pe = send_part(su, p, id);
		if (pe < 0)
			upload_part_end(p, pe);
	}
	pthread_mutex_lock(&u->lock);
	su->busy--;
	pthread_mutex_unlock(&u->lock);
	advance(su);
}

/* A part's answer: its ETag kept for Complete, its done called. */
static void part_done(struct s3op *op, struct io_req *r)
{
	struct s3up *su = op->su;
	char *etag = NULL;
	int e = r->err;

	if (e == -ENOENT)
		e = -EIO; /* NoSuchUpload: the upload is gone (a lifecycle rule, another abort) */
	if (e == 0 && !(etag = strdup(r->etag_got)))
		e = -ENOMEM;
	pthread_mutex_lock(&su->u->lock);
	su->busy++;
	if (etag) {
		free(su->etags[op->p->no - 1]);
		su->etags[op->p->no - 1] = etag;
	}
	pthread_mutex_unlock(&su->u->lock);
	upload_part_end(op->p, e);
	pthread_mutex_lock(&su->u->lock);
	su->busy--;
	pthread_mutex_unlock(&su->u->lock);
	advance(su);
}

/* The upload is over: freed, and the caller told (a commit) or not (an abort). */
static void su_end(struct s3up *su, int err, const struct bk_meta *meta)
{
	struct bk_upload *u = su->u;

	su_free(su);
	u->priv = NULL;
	upload_end(u, err, meta);
}

/* AbortMultipartUpload, then su_end(@err); or su_end at once without an upload id. */
static void send_abort(struct s3up *su, int err)
{
	struct s3op *op;
	char *query, *id;

	su->err = err;
	pthread_mutex_lock(&su->u->lock);
	id = su->upload_id;
	pthread_mutex_unlock(&su->u->lock);
	if (!id) {
		su_end(su, err, NULL);
		return;
	}
	struct kv q[] = {{"uploadId", id}};
	query = sigv4_canonical_query(q, 1);
	op = query ? op_new(OP_ABORT, su->u->b, su) : NULL;
	if (op && op_submit(op, su->u->path, query, "DELETE", NULL, 0) == 0) {
		free(query);
		return;
	}
	free(query);
	op_free(op);
	WSTAT_ADD(su->u->b, abort_errors, 1);
	su_end(su, err, NULL);
}

static void abort_done(struct s3op *op, struct io_req *r)
{
	struct s3up *su = op->su;

	/* 404 NoSuchUpload: gone already, which is what was asked */
	if (r->err && r->err != -ENOENT)
		WSTAT_ADD(su->u->b, abort_errors, 1);
	su_end(su, su->err, NULL);
}

/* PutObject of the held part @p (NULL: an empty object). */
static void send_put(struct s3up *su, struct bk_part *p)
{
	struct s3op *op = op_new(OP_PUT, su->u->b, su);
	unsigned char md5[16];
	int e = -ENOMEM;

	if (!op)
		goto fail;
	op->p = p;
	if (p)
		memcpy(md5, p->md5, 16);
	else if ((e = md5_of("", 0, md5)) < 0)
		goto fail;
	md5_b64(md5, op->md5_b64);
	op->want_etag[0] = '"';
	hex(md5, 16, op->want_etag + 1);
	strcat(op->want_etag, "\"");
	e = op_submit(op, su->u->path, NULL, "PUT", p ? p->data : NULL, p ? p->len : 0);
	if (e == 0)
		return;
fail:
	op_free(op);
	if (p)
		upload_part_end(p, e);
	su_end(su, e, NULL);
}

/* CompleteMultipartUpload of parts 1..n. */
static void send_complete(struct s3up *su)
{
	struct bk_upload *u = su->u;
	struct s3op *op = op_new(OP_COMPLETE, u->b, su);
	unsigned char md5[16];
	char *query = NULL;
	size_t len = 0;
	int e = -ENOMEM;

	if (!op)
		goto fail;
	/* every part is done: nothing else touches etags now */
	op->body = s3xml_complete_body((const char *const *)su->etags, u->plan.nparts, &len);
	struct kv q[] = {{"uploadId", su->upload_id}};
	query = sigv4_canonical_query(q, 1);
	if (!op->body || !query || (e = md5_of(op->body, len, md5)) < 0)
		goto fail;
	md5_b64(md5, op->md5_b64);
	s3_multipart_etag((const unsigned char(*)[16])su->md5s, u->plan.nparts, op->want_etag,
			  sizeof(op->want_etag));
	e = op_submit(op, u->path, query, "POST", op->body, len);
	free(query);
	if (e == 0)
		return;
	query = NULL;
fail:
	free(query);
	op_free(op);
	send_abort(su, e);
}

/* HEAD the name before Complete (no overwrite): precheck_done goes on. */
static void send_precheck(struct s3up *su)
{
	struct s3op *op = op_new(OP_PRECHECK, su->u->b, su);
	int e = op ? op_submit(op, su->u->path, NULL, NULL, NULL, 0) : -ENOMEM;

	if (e < 0) {
		op_free(op);
		send_abort(su, e);
	}
}

/* The name is free (404): Complete. Taken: -EEXIST. HEAD refused (403: credentials that may
 * write but not read): Complete, guarded by If-None-Match alone. Any other failure of the
 * HEAD: that failure. Either way but the Complete, the upload is aborted. */
static void precheck_done(struct s3op *op, struct io_req *r)
{
	if (r->err == -ENOENT || r->err == -EACCES)
		send_complete(op->su);
	else
		send_abort(op->su, r->err ? r->err : -EEXIST);
}

/*
 * The last step, once the plan has ended and every part sent is done: PutObject, Complete, or
 * (after a failure, or an abort) Abort. Runs once, started by end_job or by the last part to
 * end after it. A completion that calls a part's done holds su->busy meanwhile and calls
 * advance() after: the done may end the plan itself (commit or abort from inside the
 * callback), and an abort on a stopped loop runs end_job at once, on whatever thread called
 * it; busy keeps su from being finished, and freed, under the completion's feet.
 */
static void advance(struct s3up *su)
{
	struct bk_upload *u = su->u;
	struct bk_part *held;
	bool multipart;
	int err;

	pthread_mutex_lock(&u->lock);
	if (!su->end_seen || su->finishing || su->creating || su->busy ||
	    u->plan.in_flight > (su->held ? 1u : 0u)) {
		pthread_mutex_unlock(&u->lock);
		return;
	}
	su->finishing = true;
	held = su->held;
	su->held = NULL;
	multipart = su->upload_id != NULL;
	err = su->aborting ? -ECANCELED : u->plan.err;
	pthread_mutex_unlock(&u->lock);
	if (err) {
		if (held)
			upload_part_end(held, err);
		send_abort(su, err);
	} else if (!multipart) {
		send_put(su, held);
	} else if (!u->cfg.overwrite) {
		send_precheck(su);
	} else {
		send_complete(su);
	}
}

/* On the I/O thread: the commit or abort taken in; from here on advance() may finish. */
static void end_job(void *arg)
{
	struct s3up *su = arg;

	pthread_mutex_lock(&su->u->lock);
	su->end_seen = true;
	su->aborting = !su->u->commit_done;
	pthread_mutex_unlock(&su->u->lock);
	advance(su);
}

int s3_upload_commit(struct bk_upload *u)
{
	return io_defer(u->b->io, 0, end_job, u->priv);
}

void s3_upload_abort(struct bk_upload *u)
{
	/* The loop is stopping or stopped (or no memory for a timer): the end runs here, on the
	 * caller's thread, and advance() finishes once no request nor completion of the upload
	 * is left, here or on the I/O thread. */
	if (io_defer(u->b->io, 0, end_job, u->priv) < 0)
		end_job(u->priv);
}

/* The request the upload ended with succeeded: @meta is the object. */
static void finish_ok(struct s3op *op, const struct bk_meta *meta)
{
	if (op->p)
		upload_part_end(op->p, 0);
	su_end(op->su, 0, meta);
}

static void finish_err(struct s3op *op, int err)
{
	enum op_kind k = op->kind == OP_CONFIRM ? op->was : op->kind;

	if (op->p)
		upload_part_end(op->p, err);
	if (k == OP_COMPLETE)
		send_abort(op->su, err);
	else
		su_end(op->su, err, NULL);
}

/* A retried PutObject or Complete was refused in a way its lost first attempt would explain:
 * HEAD the object, and see whether it is ours. @return 0 (asked) or -errno. */
static int confirm(struct s3op *op, int err)
{
	struct s3op *c = op_new(OP_CONFIRM, op->b, op->su);
	int e;

	if (!c)
		return -ENOMEM;
	c->was = op->kind;
	c->err = err;
	c->p = op->p;
	memcpy(c->want_etag, op->want_etag, sizeof(c->want_etag));
	e = op_submit(c, op->su->u->path, NULL, NULL, NULL, 0);
	if (e < 0) {
		op_free(c);
		return e;
	}
	op->p = NULL; /* the HEAD's now */
	return 0;
}

/* Complete succeeded without naming the ETag (Ceph RGW): HEAD the object, learn_done goes
 * on. @date is the answer's Date. @return 0 (asked) or -errno. */
static int learn(struct s3op *op, int64_t date)
{
	struct s3op *l = op_new(OP_LEARN, op->b, op->su);
	int e;

	if (!l)
		return -ENOMEM;
	l->date = date;
	memcpy(l->want_etag, op->want_etag, sizeof(l->want_etag));
	e = op_submit(l, op->su->u->path, NULL, NULL, NULL, 0);
	if (e < 0)
		op_free(l);
	return e;
}

/* The answer to PutObject or CompleteMultipartUpload. */
static void commit_done(struct s3op *op, struct io_req *r)
{
	int e = r->err;
	bool maybe_ours =
	    op->want_etag[0] && (e == -EEXIST || (op->kind == OP_COMPLETE && e == -ENOENT));

	if (e == -ENOENT && op->kind == OP_COMPLETE)
		e = -EIO; /* NoSuchUpload: the upload is gone, the object was not made */
	if (maybe_ours && confirm(op, e) == 0)
		return;
	if (e) {
		finish_err(op, e);
		return;
	}
	if (op->kind == OP_COMPLETE && !op->etag[0] && learn(op, r->date) == 0)
		return;
	struct bk_meta m = {.size = op->su->u->plan.size,
			    .mtime = r->date != INT64_MIN ? r->date : (int64_t)time(NULL)};
	/* a Complete without an ETag whose HEAD could not be sent: the one our parts make */
	const char *etag = op->kind == OP_PUT ? r->etag_got
			   : op->etag[0]      ? op->etag
					      : op->want_etag;

	snprintf(m.etag, sizeof(m.etag), "%s", etag);
	finish_ok(op, &m);
}

/* The HEAD after a Complete answered without an ETag: the object's ETag if it is the one our
 * parts make, else that computed one (see the essay). The upload succeeded either way. */
static void learn_done(struct s3op *op, struct io_req *r)
{
	bool ours = !r->err && op->want_etag[0] && strcmp(r->etag_got, op->want_etag) == 0;
	struct bk_meta m = {.size = op->su->u->plan.size};

	if (ours && r->mtime != INT64_MIN)
		m.mtime = r->mtime;
	else if (op->date != INT64_MIN)
		m.mtime = op->date;
	else
		m.mtime = (int64_t)time(NULL);
	snprintf(m.etag, sizeof(m.etag), "%s", op->want_etag);
	finish_ok(op, &m);
}

static void confirm_done(struct s3op *op, struct io_req *r)
{
	if (r->err || strcmp(r->etag_got, op->want_etag) != 0) {
		finish_err(op, op->err);
		return;
	}
	struct bk_meta m = {.size = r->length == UINT64_MAX ? 0 : r->length, .mtime = r->mtime};
	snprintf(m.etag, sizeof(m.etag), "%s", r->etag_got);
	finish_ok(op, &m);
}

/* Every request of this file ends here, on the I/O thread. */
static void op_done(struct io_req *r)
{
	struct s3op *op = r->arg;

	if (op->su && r->attempts > 1)
		WSTAT_ADD(op->b, retries, r->attempts - 1);
	switch (op->kind) {
	case OP_CREATE:
		create_done(op, r);
		break;
	case OP_PART:
		part_done(op, r);
		break;
	case OP_PUT:
	case OP_COMPLETE:
		commit_done(op, r);
		break;
	case OP_CONFIRM:
		confirm_done(op, r);
		break;
	case OP_PRECHECK:
		precheck_done(op, r);
		break;
	case OP_LEARN:
		learn_done(op, r);
		break;
	case OP_ABORT:
		abort_done(op, r);
		break;
	case OP_DELETE:
		op->done(op->arg, r->err);
		break;
	}
	io_req_free(r);
	op_free(op);
}

/* ---- unlink, rename, directories ------------------------------------------------------------ */

int s3_unlink(struct backend *b, const char *path, bk_done_fn done, void *arg)
{
	struct s3op *op = op_new(OP_DELETE, b, NULL);
	int e;

	if (!op)
		return -ENOMEM;
	op->done = done;
	op->arg = arg;
	e = op_submit(op, path, NULL, "DELETE", NULL, 0);
	if (e < 0)
		op_free(op);
	return e;
}

int s3_rename(struct backend *b, const char *from, const char *to, bool overwrite, bk_done_fn done,
	      void *arg)
{
	return -EXDEV; /* see backend.h */
}

struct now_job {
	bk_done_fn done;
	void *arg;
};

static void run_now_job(void *arg)
{
	struct now_job j = *(struct now_job *)arg;

	free(arg);
	j.done(j.arg, 0);
}

int s3_mkdir(struct backend *b, const char *path, bool rm, bk_done_fn done, void *arg)
{
	struct now_job *j = malloc(sizeof(*j));
	int e;

	if (!j)
		return -ENOMEM;
	*j = (struct now_job){done, arg};
	e = io_defer(b->io, 0, run_now_job, j);
	if (e < 0)
		free(j);
	return e;
}
