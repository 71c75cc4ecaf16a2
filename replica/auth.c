/*
 * Authentication of the control connections between node agents (wire.h):
 * with a job key set (CKPT_JOB_KEY), every connection starts with an
 * exchange of fresh random nonces, each direction gets its own session key
 * HMAC-SHA256(job key, direction || client nonce || server nonce), and
 * every frame after that carries HMAC-SHA256(session key, sequence number
 * || frame header || payload).  A frame that is forged, altered, replayed,
 * reordered or dropped, or comes from a peer without the key, fails its
 * tag, and the connection with it.  The key itself never travels and is
 * never logged.  Sessions are kept per file descriptor: a connection is
 * made only by ckpt_wire_connect and ckpt_wire_accept, which start its
 * session afresh, so a reused descriptor never inherits one.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <nettle/hmac.h>
#include <nettle/memops.h>

#include "auth.h"

struct session {
    bool on;
    uint8_t send_key[SHA256_DIGEST_SIZE], recv_key[SHA256_DIGEST_SIZE];
    uint64_t send_seq, recv_seq;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t job_key[SHA256_DIGEST_SIZE];
static bool have_key;
static struct session **sessions; /* indexed by fd */
static size_t nsessions;

int ckpt_auth_set_key(const char *key)
{
    struct sha256_ctx h;

    if (!key || !*key) {
        have_key = false;
        return 0;
    }
    if (strlen(key) < CKPT_AUTH_KEY_MIN)
        return -EINVAL;
    /* Any length of secret becomes one HMAC key of the digest's size. */
    sha256_init(&h);
    sha256_update(&h, strlen(key), (const uint8_t *)key);
    sha256_digest(&h, sizeof(job_key), job_key);
    have_key = true;
    return 0;
}

bool ckpt_auth_enabled(void)
{
    return have_key;
}

/* The session of fd, made when absent; NULL without memory. */
static struct session *session_of(int fd)
{
    struct session *s = NULL;

    if (fd < 0)
        return NULL;
    pthread_mutex_lock(&lock);
    if ((size_t)fd >= nsessions) {
        size_t n = nsessions ? nsessions : 64;
        while (n <= (size_t)fd)
            n *= 2;
        struct session **grown = realloc(sessions, n * sizeof(*grown));
        if (grown) {
            memset(grown + nsessions, 0, (n - nsessions) * sizeof(*grown));
            sessions = grown;
            nsessions = n;
        }
    }
    if ((size_t)fd < nsessions) {
        if (!sessions[fd])
            sessions[fd] = calloc(1, sizeof(**sessions));
        s = sessions[fd];
    }
    pthread_mutex_unlock(&lock);
    return s;
}

void ckpt_auth_forget(int fd)
{
    struct session *s = fd >= 0 && (size_t)fd < nsessions ? session_of(fd) : NULL;
    if (s)
        memset(s, 0, sizeof(*s));
}

bool ckpt_auth_on(int fd)
{
    struct session *s = fd >= 0 && (size_t)fd < nsessions ? session_of(fd) : NULL;
    return s && s->on;
}

static void derive(uint8_t out[SHA256_DIGEST_SIZE], const char *dir, const uint8_t *nc, const uint8_t *ns)
{
    struct hmac_sha256_ctx h;
    hmac_sha256_set_key(&h, sizeof(job_key), job_key);
    hmac_sha256_update(&h, strlen(dir), (const uint8_t *)dir);
    hmac_sha256_update(&h, CKPT_AUTH_NONCE, nc);
    hmac_sha256_update(&h, CKPT_AUTH_NONCE, ns);
    hmac_sha256_digest(&h, SHA256_DIGEST_SIZE, out);
}

/* Fills buf with len bytes from the kernel's random source.  Returns 0 or -errno. */
static int random_bytes(uint8_t *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    return 0;
}

int ckpt_auth_nonce(uint8_t nonce[CKPT_AUTH_NONCE])
{
    return random_bytes(nonce, CKPT_AUTH_NONCE);
}

int ckpt_auth_new_key(char out[CKPT_AUTH_NEW_KEY + 1])
{
    uint8_t raw[CKPT_AUTH_NEW_KEY / 2];
    int rc = random_bytes(raw, sizeof(raw));
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    explicit_bzero(raw, sizeof(raw));
    return 0;
}

int ckpt_auth_start(int fd, bool client, const uint8_t mine[CKPT_AUTH_NONCE],
                    const uint8_t theirs[CKPT_AUTH_NONCE])
{
    struct session *s = session_of(fd);
    const uint8_t *nc = client ? mine : theirs, *ns = client ? theirs : mine;

    if (!s)
        return -ENOMEM;
    derive(client ? s->send_key : s->recv_key, "ckpt c2s", nc, ns);
    derive(client ? s->recv_key : s->send_key, "ckpt s2c", nc, ns);
    s->send_seq = s->recv_seq = 0;
    s->on = true;
    return 0;
}

static void tag(const uint8_t key[SHA256_DIGEST_SIZE], uint64_t seq, const void *hdr, size_t hlen, const void *a,
                size_t alen, const void *b, size_t blen, uint8_t out[CKPT_AUTH_TAG])
{
    struct hmac_sha256_ctx h;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(seq >> (8 * i));
    hmac_sha256_set_key(&h, SHA256_DIGEST_SIZE, key);
    hmac_sha256_update(&h, sizeof(le), le);
    hmac_sha256_update(&h, hlen, hdr);
    if (alen)
        hmac_sha256_update(&h, alen, a);
    if (blen)
        hmac_sha256_update(&h, blen, b);
    hmac_sha256_digest(&h, CKPT_AUTH_TAG, out);
}

void ckpt_auth_seal(int fd, const void *hdr, size_t hlen, const void *a, size_t alen, const void *b, size_t blen,
                    uint8_t out[CKPT_AUTH_TAG])
{
    struct session *s = session_of(fd);
    tag(s->send_key, s->send_seq++, hdr, hlen, a, alen, b, blen, out);
}

int ckpt_auth_check(int fd, const void *hdr, size_t hlen, const void *payload, size_t len,
                    const uint8_t got[CKPT_AUTH_TAG])
{
    struct session *s = session_of(fd);
    uint8_t want[CKPT_AUTH_TAG];
    tag(s->recv_key, s->recv_seq, hdr, hlen, payload, len, NULL, 0, want);
    if (!memeql_sec(want, got, CKPT_AUTH_TAG))
        return -EACCES;
    s->recv_seq++;
    return 0;
}

void ckpt_auth_mac(const char *name, const void *msg, size_t len, uint8_t out[CKPT_AUTH_TAG])
{
    static const uint8_t none[CKPT_AUTH_NONCE];
    uint8_t key[SHA256_DIGEST_SIZE];
    derive(key, "ckpt mailbox", none, none);
    /* The name's length in place of a sequence number: name and message cannot trade bytes. */
    tag(key, strlen(name), name, strlen(name), msg, len, NULL, 0, out);
    explicit_bzero(key, sizeof(key));
}

int ckpt_auth_mac_check(const char *name, const void *msg, size_t len, const uint8_t got[CKPT_AUTH_TAG])
{
    uint8_t want[CKPT_AUTH_TAG];
    ckpt_auth_mac(name, msg, len, want);
    return memeql_sec(want, got, CKPT_AUTH_TAG) ? 0 : -EACCES;
}
