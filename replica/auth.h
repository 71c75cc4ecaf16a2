/*
 * Authentication of the control connections between node agents: the
 * session state wire.c keeps per connection when a job key is set (auth.c
 * says how).  Agent code, never linked into libckpt.so.
 */
#ifndef CKPT_REPLICA_AUTH_H
#define CKPT_REPLICA_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_AUTH_KEY_MIN 16  /* characters of CKPT_JOB_KEY at least */
#define CKPT_AUTH_NONCE 16    /* bytes of each side's nonce */
#define CKPT_AUTH_TAG 32      /* bytes of a frame's tag */

/* Sets the job's key for every later connection (NULL or "": none).
 * Returns 0, or -EINVAL for a key shorter than CKPT_AUTH_KEY_MIN. */
int ckpt_auth_set_key(const char *key);
bool ckpt_auth_enabled(void);

#define CKPT_AUTH_NEW_KEY 64  /* hex characters of a key made by ckpt_auth_new_key: 256 bits */

/* A new job key: 256 random bits in hex, NUL-terminated.  Returns 0 or -errno. */
int ckpt_auth_new_key(char out[CKPT_AUTH_NEW_KEY + 1]);

/* Fresh random bytes for a handshake.  Returns 0 or -errno. */
int ckpt_auth_nonce(uint8_t nonce[CKPT_AUTH_NONCE]);

/* Starts fd's session from both nonces; client: this end connected.  Returns 0 or -ENOMEM. */
int ckpt_auth_start(int fd, bool client, const uint8_t mine[CKPT_AUTH_NONCE], const uint8_t theirs[CKPT_AUTH_NONCE]);

/* Forgets fd's session: a connection made without a key. */
void ckpt_auth_forget(int fd);

/* Whether fd's frames carry tags. */
bool ckpt_auth_on(int fd);

/* The tag of the next frame sent on fd: header, then a and b. */
void ckpt_auth_seal(int fd, const void *hdr, size_t hlen, const void *a, size_t alen, const void *b, size_t blen,
                    uint8_t out[CKPT_AUTH_TAG]);

/* Checks the tag of the next frame received on fd.  Returns 0 or -EACCES. */
int ckpt_auth_check(int fd, const void *hdr, size_t hlen, const void *payload, size_t len,
                    const uint8_t got[CKPT_AUTH_TAG]);

/* The tag of a message that travels through a third party rather than
 * over a connection (the agents' mailboxes in etcd): HMAC-SHA256, under a
 * key of its own drawn from the job key, of the name it is put under (its
 * mailbox and sequence number) and of what it says.  A message written
 * without the job key, altered, or moved to another name fails its tag. */
void ckpt_auth_mac(const char *name, const void *msg, size_t len, uint8_t out[CKPT_AUTH_TAG]);

/* Checks such a tag.  Returns 0 or -EACCES. */
int ckpt_auth_mac_check(const char *name, const void *msg, size_t len, const uint8_t got[CKPT_AUTH_TAG]);

#endif
