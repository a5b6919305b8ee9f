/*
 * creds.h - where S3 credentials come from: the environment, a shared credentials file, or
 * nowhere (anonymous).
 */
#ifndef TIERFS_CREDS_H
#define TIERFS_CREDS_H

#include <stddef.h>

struct s3_creds {
	char access_key[128];     /* empty: anonymous, requests go unsigned */
	char secret_key[128];
	char session_token[4096]; /* empty if none */
};

/*
 * Environment first (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the
 * shared credentials file @file (NULL: $AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials)
 * section @profile (NULL: $AWS_PROFILE, else "default"), else anonymous. A file or profile
 * that was named explicitly (argument or environment) and is missing is an error; the default
 * file or profile missing means anonymous. @err gets one line for the user and never a secret.
 * @return 0, -ENOENT, -EINVAL (malformed file, key without secret), -ENAMETOOLONG.
 */
int creds_load(const char *file, const char *profile, struct s3_creds *ret, char *err,
	       size_t errlen);

#endif
