/*
 * mac.h - the fleet's keyed MAC over the fleet tier's values (shared_key), from OpenSSL.
 *
 * tiers/fleet_value.c frames and checks values but holds no cryptography (tiers/ may not
 * include OpenSSL); tiers/fleet.c hands it bk_mac_tag as a function (struct fv_mac). The MAC is GMAC (AES-256)
 * under a key derived for each value from the fleet's key and the value's salt: see mac.c for
 * the construction and why it is a MAC for this use.
 */
#ifndef TIERFS_MAC_H
#define TIERFS_MAC_H

#include <stddef.h>

#define BK_MAC_KEY_MIN  32u   /* bytes of the fleet's key, at least: 256 bits of a random source */
#define BK_MAC_KEY_MAX  4096u /* ... and at most */
#define BK_MAC_SALT_LEN 16u
#define BK_MAC_TAG_LEN  16u

struct bk_mac;

/* A MAC keyed with @key (@len bytes, BK_MAC_KEY_MIN..BK_MAC_KEY_MAX). The key is not kept:
 * only what is derived from it (the caller zeroes its copy). @return 0 and *ret; -EINVAL a
 * length out of range; -ENOMEM; -ENOTSUP this OpenSSL lacks HMAC-SHA256 or GMAC. */
int bk_mac_new(const void *key, size_t len, struct bk_mac **ret);
/* Zeroes what was derived from the key. Accepts NULL. */
void bk_mac_free(struct bk_mac *m);

/* A fresh salt (BK_MAC_SALT_LEN random bytes from OpenSSL's generator) for a value about to
 * be written. @return 0 or -EIO. Any thread. */
int bk_mac_salt(struct bk_mac *m, unsigned char *ret_salt);

/* The tag (BK_MAC_TAG_LEN bytes, into @ret_tag) of @a (@alen bytes) followed by @b (@blen),
 * under @salt (BK_MAC_SALT_LEN bytes). @return 0, -ENOMEM or -EIO. Any thread. */
int bk_mac_tag(struct bk_mac *m, const unsigned char *salt, const void *a, size_t alen,
	       const void *b, size_t blen, unsigned char *ret_tag);

#endif
