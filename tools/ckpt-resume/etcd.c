/*
 * The etcd client of etcd.h, over etcd's JSON gateway: each call is one
 * POST of a JSON request whose keys and values are base64, answered by
 * one JSON object (64-bit integers as strings).  Requests go to the member
 * that answered last; one that cannot be reached or has no quorum is
 * passed over for the next, once round the list.  With a user, a token
 * from /v3/auth/authenticate goes with every request, and is fetched
 * again once when etcd says it is no longer valid.  A watch holds a
 * streaming request open on a thread and client of its own, and says on
 * a pipe when anything under its prefix changed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <nettle/base64.h>

#include "etcd.h"

#define MAX_ENDPOINTS 16
#define CONNECT_MS 1000

struct etcd {
    CURL *curl;
    char *endpoints[MAX_ENDPOINTS];
    unsigned n, cur;
    int timeout_ms;         /* of a request */
    char *user, *password, *token;
    struct { char *data; size_t len, cap; } body;
    char curl_err[CURL_ERROR_SIZE];
};

/* ------------------------------------------------------------ encodings */

static char *b64(const void *data, size_t len)
{
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!out)
        return NULL;
    base64_encode_raw(out, len, data);
    out[BASE64_ENCODE_RAW_LENGTH(len)] = '\0';
    return out;
}

/* The bytes of base64 text, NUL-terminated (*len without it); NULL when damaged. */
static char *unb64(const char *text, size_t *len)
{
    struct base64_decode_ctx ctx;
    size_t n = strlen(text), cap = BASE64_DECODE_LENGTH(n) + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    base64_decode_init(&ctx);
    size_t got = cap;
    if (!base64_decode_update(&ctx, &got, (uint8_t *)out, n, text) || !base64_decode_final(&ctx)) {
        free(out);
        return NULL;
    }
    out[got] = '\0';
    *len = got;
    return out;
}

static void add_b64(json_object *o, const char *field, const void *data, size_t len)
{
    char *s = b64(data, len);
    json_object_object_add(o, field, s ? json_object_new_string(s) : NULL);
    free(s);
}

/* An int64 field, as etcd writes them (a string), or a plain number. */
static int64_t field_i64(json_object *o, const char *field)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, field, &v))
        return 0;
    return json_object_is_type(v, json_type_string) ? strtoll(json_object_get_string(v), NULL, 10)
                                                    : json_object_get_int64(v);
}

static void add_i64(json_object *o, const char *field, int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%lld", (long long)v);
    json_object_object_add(o, field, json_object_new_string(s));
}

/* range_end for a prefix: the key with its last byte that can be raised raised. */
static char *prefix_end(const char *key, size_t *len)
{
    size_t n = strlen(key);
    char *end = malloc(n + 1);
    if (!end)
        return NULL;
    memcpy(end, key, n + 1);
    while (n && (unsigned char)end[n - 1] == 0xff)
        n--;
    if (!n) { /* every key */
        end[0] = '\0';
        *len = 1;
        return end;
    }
    end[n - 1]++;
    *len = n;
    return end;
}

/* -------------------------------------------------------------- requests */

static size_t collect(char *data, size_t size, size_t count, void *arg)
{
    struct etcd *e = arg;
    size_t n = size * count;
    if (e->body.len + n + 1 > e->body.cap) {
        size_t cap = (e->body.len + n + 1) * 2;
        char *d = realloc(e->body.data, cap);
        if (!d)
            return 0;
        e->body.data = d;
        e->body.cap = cap;
    }
    memcpy(e->body.data + e->body.len, data, n);
    e->body.len += n;
    e->body.data[e->body.len] = '\0';
    return n;
}

/* etcd's gRPC status codes that a gateway error carries. */
enum { CODE_UNAVAILABLE = 14, CODE_PERMISSION = 7, CODE_UNAUTHENTICATED = 16, CODE_DEADLINE = 4,
       CODE_INVALID = 3, CODE_NOT_FOUND = 5 };

static int authenticate(struct etcd *e, char *why, size_t whylen);

/* One POST of text to path at member @ep: its JSON answer into *out and
 * the HTTP status into *status.  Returns 0, -ECONNREFUSED or -ETIMEDOUT
 * (not reached, not in time), -EPROTO (no JSON). */
static int post_at(struct etcd *e, const char *ep, const char *path, const char *text, long *status,
                   json_object **out, char *why, size_t whylen)
{
    char url[512], auth[600];
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (e->token) {
        snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
        headers = curl_slist_append(headers, auth);
    }
    snprintf(url, sizeof(url), "%s%s", ep, path);
    e->body.len = 0;
    e->curl_err[0] = '\0';
    curl_easy_setopt(e->curl, CURLOPT_URL, url);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, headers);
    CURLcode c = curl_easy_perform(e->curl);
    curl_slist_free_all(headers);
    *status = 0;
    *out = NULL;
    curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, status);
    if (c != CURLE_OK) {
        snprintf(why, whylen, "etcd at %s: %s", ep, e->curl_err[0] ? e->curl_err : curl_easy_strerror(c));
        return c == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED;
    }
    if (!(*out = e->body.len ? json_tokener_parse(e->body.data) : NULL)) {
        snprintf(why, whylen, "etcd at %s answered %s with HTTP %ld and no JSON", ep, path, *status);
        return -EPROTO;
    }
    return 0;
}

/* One POST of req to path at the members in turn; the answer into *out.
 * Takes req. */
static int call(struct etcd *e, const char *path, json_object *req, json_object **out, char *why, size_t whylen)
{
    const char *text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    int rc = -ECONNREFUSED;
    bool reauthed = false, no_quorum = false;
    char quorum_why[256] = "";
    *out = NULL;
    snprintf(why, whylen, "no etcd endpoint");
    for (unsigned tried = 0; tried < e->n; tried++) {
        const char *ep = e->endpoints[e->cur];
        long status;
        json_object *ans;
        rc = post_at(e, ep, path, text, &status, &ans, why, whylen);
        if (rc == -ETIMEDOUT || rc == -ECONNREFUSED) {
            rc = no_quorum ? -EAGAIN : rc;
            e->cur = (e->cur + 1) % e->n;
            continue;
        }
        if (rc < 0)
            break;
        json_object *err;
        if (status == 200 && !json_object_object_get_ex(ans, "error", &err)) {
            *out = ans;
            rc = 0;
            break;
        }
        int64_t code = field_i64(ans, "code");
        json_object *msg = NULL;
        if (!json_object_object_get_ex(ans, "message", &msg))
            json_object_object_get_ex(ans, "error", &msg);
        snprintf(why, whylen, "etcd at %s: %s", ep, msg ? json_object_get_string(msg) : "an error");
        json_object_put(ans);
        /* etcd 3.4 says some refusals of credentials as invalid arguments. */
        if (strstr(why, "invalid auth token")) /* expired: a new one, once */
            code = CODE_UNAUTHENTICATED;
        else if (strstr(why, "authentication failed") || strstr(why, "user name is empty") ||
                 strstr(why, "permission denied"))
            code = CODE_PERMISSION;
        if (code == CODE_UNAUTHENTICATED && e->user && !reauthed && strcmp(path, "/v3/auth/authenticate") != 0) {
            reauthed = true;
            if ((rc = authenticate(e, why, whylen)) < 0)
                break;
            tried--; /* the same member, with the new token */
            continue;
        }
        /* No leader, no quorum (a request that timed out inside etcd
         * says the same): the next member; if none does better, -EAGAIN. */
        if (code == CODE_UNAVAILABLE || status == 503 || strstr(why, "request timed out") ||
            strstr(why, "context deadline exceeded")) {
            rc = -EAGAIN;
            no_quorum = true;
            snprintf(quorum_why, sizeof(quorum_why), "%s", why);
            e->cur = (e->cur + 1) % e->n;
            continue;
        }
        rc = code == CODE_UNAUTHENTICATED || code == CODE_PERMISSION ? -EACCES
             : code == CODE_DEADLINE                                  ? -ETIMEDOUT
             : code == CODE_NOT_FOUND                                 ? -ENOENT
             : code == CODE_INVALID                                   ? -EINVAL
                                                                      : -EPROTO;
        break;
    }
    if (rc == -EAGAIN)
        snprintf(why, whylen, "%s", quorum_why);
    json_object_put(req);
    return rc;
}

static int authenticate(struct etcd *e, char *why, size_t whylen)
{
    json_object *req = json_object_new_object(), *ans, *tok;
    json_object_object_add(req, "name", json_object_new_string(e->user));
    json_object_object_add(req, "password", json_object_new_string(e->password ? e->password : ""));
    free(e->token);
    e->token = NULL;
    int rc = call(e, "/v3/auth/authenticate", req, &ans, why, whylen);
    if (rc < 0)
        return rc;
    if (json_object_object_get_ex(ans, "token", &tok))
        e->token = strdup(json_object_get_string(tok));
    json_object_put(ans);
    if (!e->token) {
        snprintf(why, whylen, "etcd gave no token for user %s", e->user);
        return -EACCES;
    }
    return 0;
}

/* ------------------------------------------------------------------- API */

int etcd_quorum(struct etcd *e, char *why, size_t whylen)
{
    int rc = -ECONNREFUSED;
    unsigned answered = 0;
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)(e->timeout_ms < CONNECT_MS ? e->timeout_ms : CONNECT_MS));
    snprintf(why, whylen, "no etcd endpoint");
    for (unsigned i = 0; i < e->n && rc != 1; i++) {
        long status;
        json_object *ans, *leader;
        if (post_at(e, e->endpoints[i], "/v3/maintenance/status", "{}", &status, &ans, why, whylen) < 0)
            continue;
        /* A member without a leader says none (and an error "no leader"). */
        bool led = json_object_object_get_ex(ans, "leader", &leader) && strcmp(json_object_get_string(leader), "0");
        rc = led ? 1 : 0;
        answered++;
        json_object_put(ans);
    }
    if (rc == 0)
        snprintf(why, whylen, "%u of %u etcd members answer, and none has a leader", answered, e->n);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
    return rc;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_start(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int etcd_open(struct etcd **out, const struct etcd_opts *o, char *why, size_t whylen)
{
    pthread_once(&curl_once, curl_start);
    struct etcd *e = calloc(1, sizeof(*e));
    *out = NULL;
    if (!e || !(e->curl = curl_easy_init())) {
        free(e);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    const char *s = o->endpoints ? o->endpoints : "";
    while (*s && e->n < MAX_ENDPOINTS) {
        size_t len = strcspn(s, ",");
        if (len) {
            bool scheme = strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
            if (asprintf(&e->endpoints[e->n], "%s%.*s", scheme ? "" : o->ca ? "https://" : "http://", (int)len, s) < 0)
                e->endpoints[e->n] = NULL;
            if (e->endpoints[e->n])
                e->n++;
        }
        s += len + (s[len] == ',');
    }
    if (!e->n) {
        snprintf(why, whylen, "no etcd endpoint in '%s': expected HOST:PORT[,HOST:PORT...]", o->endpoints ? o->endpoints : "");
        etcd_close(e);
        return -EINVAL;
    }
    int ms = e->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 5000;
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(e->curl, CURLOPT_ERRORBUFFER, e->curl_err);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)ms);
    curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)(ms < CONNECT_MS ? ms : CONNECT_MS));
    curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (o->ca)
        curl_easy_setopt(e->curl, CURLOPT_CAINFO, o->ca);
    if (o->cert)
        curl_easy_setopt(e->curl, CURLOPT_SSLCERT, o->cert);
    if (o->key)
        curl_easy_setopt(e->curl, CURLOPT_SSLKEY, o->key);
    if (o->user) {
        e->user = strdup(o->user);
        e->password = o->password ? strdup(o->password) : NULL;
        int rc = authenticate(e, why, whylen);
        if (rc < 0) {
            etcd_close(e);
            return rc;
        }
    }
    *out = e;
    return 0;
}

void etcd_close(struct etcd *e)
{
    if (!e)
        return;
    if (e->curl)
        curl_easy_cleanup(e->curl);
    for (unsigned i = 0; i < e->n; i++)
        free(e->endpoints[i]);
    free(e->user);
    if (e->password)
        memset(e->password, 0, strlen(e->password));
    free(e->password);
    free(e->token);
    free(e->body.data);
    free(e);
}

void etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
    for (size_t i = 0; kvs && i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

static void add_range(json_object *req, const char *key, bool prefix)
{
    add_b64(req, "key", key, strlen(key));
    if (prefix) {
        size_t len;
        char *end = prefix_end(key, &len);
        if (end)
            add_b64(req, "range_end", end, len);
        free(end);
    }
}

/* The keys of a range's answer @ans, in *kvs. */
static int take_kvs(json_object *ans, struct etcd_kv **kvs, size_t *n, char *why, size_t whylen)
{
    json_object *list;
    int rc = 0;
    *kvs = NULL;
    *n = 0;
    size_t count = json_object_object_get_ex(ans, "kvs", &list) ? json_object_array_length(list) : 0;
    if (count && !(*kvs = calloc(count, sizeof(**kvs))))
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        json_object *kv = json_object_array_get_idx(list, i), *k, *v;
        struct etcd_kv *out = &(*kvs)[i];
        size_t klen;
        out->key = json_object_object_get_ex(kv, "key", &k) ? unb64(json_object_get_string(k), &klen) : NULL;
        out->value = json_object_object_get_ex(kv, "value", &v) ? unb64(json_object_get_string(v), &out->len)
                                                                : calloc(1, 1);
        out->create_revision = field_i64(kv, "create_revision");
        out->mod_revision = field_i64(kv, "mod_revision");
        out->lease = field_i64(kv, "lease");
        *n = i + 1;
        if (!out->key || !out->value) {
            snprintf(why, whylen, "etcd answered a key or value that is not base64");
            rc = -EPROTO;
        }
    }
    if (rc < 0) {
        etcd_kvs_free(*kvs, *n);
        *kvs = NULL;
        *n = 0;
    }
    return rc;
}

int etcd_get(struct etcd *e, const char *key, bool prefix, struct etcd_kv **kvs, size_t *n, int64_t *revision,
             char *why, size_t whylen)
{
    json_object *req = json_object_new_object(), *ans;
    add_range(req, key, prefix);
    *kvs = NULL;
    *n = 0;
    int rc = call(e, "/v3/kv/range", req, &ans, why, whylen);
    if (rc < 0)
        return rc;
    json_object *header;
    if (revision)
        *revision = json_object_object_get_ex(ans, "header", &header) ? field_i64(header, "revision") : 0;
    rc = take_kvs(ans, kvs, n, why, whylen);
    json_object_put(ans);
    return rc;
}

static json_object *put_request(const char *key, const void *value, size_t len, int64_t lease)
{
    json_object *req = json_object_new_object();
    add_b64(req, "key", key, strlen(key));
    add_b64(req, "value", value, len);
    if (lease)
        add_i64(req, "lease", lease);
    return req;
}

int etcd_put(struct etcd *e, const char *key, const void *value, size_t len, int64_t lease, char *why,
             size_t whylen)
{
    json_object *ans;
    int rc = call(e, "/v3/kv/put", put_request(key, value, len, lease), &ans, why, whylen);
    json_object_put(ans);
    return rc;
}

int etcd_delete(struct etcd *e, const char *key, bool prefix, char *why, size_t whylen)
{
    json_object *req = json_object_new_object(), *ans;
    add_range(req, key, prefix);
    int rc = call(e, "/v3/kv/deleterange", req, &ans, why, whylen);
    json_object_put(ans);
    return rc;
}

int etcd_txn(struct etcd *e, const struct etcd_cmp *cmps, size_t ncmps, const struct etcd_op *ops, size_t nops,
             int64_t *revision, char *why, size_t whylen)
{
    return etcd_txn_read(e, cmps, ncmps, ops, nops, NULL, NULL, NULL, revision, why, whylen);
}

int etcd_txn_read(struct etcd *e, const struct etcd_cmp *cmps, size_t ncmps, const struct etcd_op *ops, size_t nops,
                  const char *prefix, struct etcd_kv **kvs, size_t *n, int64_t *revision, char *why, size_t whylen)
{
    static const char *const targets[] = {"CREATE", "MOD", "VALUE"};
    json_object *req = json_object_new_object(), *compare = json_object_new_array(),
                *success = json_object_new_array(), *ans, *v;
    for (size_t i = 0; i < ncmps; i++) {
        json_object *c = json_object_new_object();
        add_b64(c, "key", cmps[i].key, strlen(cmps[i].key));
        json_object_object_add(c, "result", json_object_new_string("EQUAL"));
        json_object_object_add(c, "target", json_object_new_string(targets[cmps[i].what]));
        if (cmps[i].what == ETCD_VALUE)
            add_b64(c, "value", cmps[i].value, strlen(cmps[i].value));
        else
            add_i64(c, cmps[i].what == ETCD_CREATE ? "create_revision" : "mod_revision", cmps[i].revision);
        json_object_array_add(compare, c);
    }
    for (size_t i = 0; i < nops; i++) {
        json_object *op = json_object_new_object(), *body;
        if (ops[i].value) {
            body = put_request(ops[i].key, ops[i].value, ops[i].len, ops[i].lease);
            json_object_object_add(op, "request_put", body);
        } else {
            body = json_object_new_object();
            add_b64(body, "key", ops[i].key, strlen(ops[i].key));
            json_object_object_add(op, "request_delete_range", body);
        }
        json_object_array_add(success, op);
    }
    if (prefix) {
        json_object *op = json_object_new_object(), *body = json_object_new_object();
        add_range(body, prefix, true);
        json_object_object_add(op, "request_range", body);
        json_object_array_add(success, op);
        *kvs = NULL;
        *n = 0;
    }
    json_object_object_add(req, "compare", compare);
    json_object_object_add(req, "success", success);
    int rc = call(e, "/v3/kv/txn", req, &ans, why, whylen);
    if (rc < 0)
        return rc;
    json_object *header, *responses, *range;
    if (revision)
        *revision = json_object_object_get_ex(ans, "header", &header) ? field_i64(header, "revision") : 0;
    rc = json_object_object_get_ex(ans, "succeeded", &v) && json_object_get_boolean(v) ? 1 : 0;
    /* The read is the last response: {"response_range": {"kvs": [...]}}. */
    if (rc == 1 && prefix) {
        json_object *last = json_object_object_get_ex(ans, "responses", &responses)
                                ? json_object_array_get_idx(responses, json_object_array_length(responses) - 1)
                                : NULL;
        if (!last || !json_object_object_get_ex(last, "response_range", &range)) {
            snprintf(why, whylen, "etcd answered a transaction without the read it asked for");
            rc = -EPROTO;
        } else if (take_kvs(range, kvs, n, why, whylen) < 0) {
            rc = -EPROTO;
        }
    }
    json_object_put(ans);
    return rc;
}

int etcd_local_ip(struct etcd *e, char *ip, size_t len)
{
    char *s = NULL;
    if (curl_easy_getinfo(e->curl, CURLINFO_LOCAL_IP, &s) != CURLE_OK || !s || !*s)
        return -ENOTCONN;
    snprintf(ip, len, "%s", s);
    return 0;
}

int etcd_lease_grant(struct etcd *e, int ttl_s, int64_t *id, char *why, size_t whylen)
{
    json_object *req = json_object_new_object(), *ans;
    add_i64(req, "TTL", ttl_s);
    int rc = call(e, "/v3/lease/grant", req, &ans, why, whylen);
    if (rc < 0)
        return rc;
    *id = field_i64(ans, "ID");
    json_object_put(ans);
    if (!*id) {
        snprintf(why, whylen, "etcd granted no lease");
        return -EPROTO;
    }
    return 0;
}

int etcd_keepalive(struct etcd *e, int64_t id, int *ttl_s, char *why, size_t whylen)
{
    json_object *req = json_object_new_object(), *ans, *result;
    add_i64(req, "ID", id);
    int rc = call(e, "/v3/lease/keepalive", req, &ans, why, whylen);
    if (rc < 0)
        return rc;
    /* The gateway streams: one object, {"result": {...}}. */
    int64_t ttl = json_object_object_get_ex(ans, "result", &result) ? field_i64(result, "TTL") : 0;
    json_object_put(ans);
    if (ttl_s)
        *ttl_s = (int)ttl;
    if (ttl <= 0) {
        snprintf(why, whylen, "etcd lease %llx has expired", (unsigned long long)id);
        return -ENOENT;
    }
    return 0;
}

int etcd_lease_revoke(struct etcd *e, int64_t id, char *why, size_t whylen)
{
    json_object *req = json_object_new_object(), *ans;
    add_i64(req, "ID", id);
    int rc = call(e, "/v3/lease/revoke", req, &ans, why, whylen);
    json_object_put(ans);
    return rc;
}

/* ----------------------------------------------------------------- watch */

/* A watch holds one streaming request open on a client of its own (a curl
 * handle is not to be shared between threads).  Its socket is known, so
 * that etcd_watch_stop can cut the stream at once. */
struct etcd_watch {
    struct etcd *e;
    char *key;
    int wake[2];                /* [0]: the caller's to poll; [1]: written on each change */
    pthread_t thread;
    pthread_mutex_t lock;       /* sock, against curl closing it while stop shuts it down */
    curl_socket_t sock;
    bool stopping;
};

static void watch_wake(struct etcd_watch *w)
{
    ssize_t r = write(w->wake[1], "w", 1);
    (void)r; /* full: a wake-up is pending already */
}

/* Whatever the stream brings (the watch made, then events) is a change to
 * read: the caller reads the keys, not the events. */
static size_t watch_data(char *data, size_t size, size_t count, void *arg)
{
    (void)data;
    watch_wake(arg);
    return size * count;
}

static curl_socket_t watch_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct etcd_watch *w = arg;
    (void)purpose;
    curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    pthread_mutex_lock(&w->lock);
    if (w->stopping && fd >= 0) {
        close(fd);
        fd = CURL_SOCKET_BAD;
    }
    w->sock = fd;
    pthread_mutex_unlock(&w->lock);
    return fd;
}

static int watch_close(void *arg, curl_socket_t fd)
{
    struct etcd_watch *w = arg;
    pthread_mutex_lock(&w->lock);
    if (w->sock == fd)
        w->sock = CURL_SOCKET_BAD;
    pthread_mutex_unlock(&w->lock);
    return close(fd);
}

static bool watch_stopping(struct etcd_watch *w)
{
    pthread_mutex_lock(&w->lock);
    bool s = w->stopping;
    pthread_mutex_unlock(&w->lock);
    return s;
}

/* One stream at the member in turn, until it ends; then the next member. */
static void *watch_run(void *arg)
{
    struct etcd_watch *w = arg;
    struct etcd *e = w->e;
    json_object *req = json_object_new_object(), *create = json_object_new_object();
    add_range(create, w->key, true);
    json_object_object_add(req, "create_request", create);
    const char *text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    char why[512];
    while (!watch_stopping(w)) {
        char url[512], auth[600];
        struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
        if (e->token) {
            snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
            headers = curl_slist_append(headers, auth);
        }
        snprintf(url, sizeof(url), "%s/v3/watch", e->endpoints[e->cur]);
        curl_easy_setopt(e->curl, CURLOPT_URL, url);
        curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, 0L);
        curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, watch_data);
        curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, w);
        curl_easy_setopt(e->curl, CURLOPT_OPENSOCKETFUNCTION, watch_socket);
        curl_easy_setopt(e->curl, CURLOPT_OPENSOCKETDATA, w);
        curl_easy_setopt(e->curl, CURLOPT_CLOSESOCKETFUNCTION, watch_close);
        curl_easy_setopt(e->curl, CURLOPT_CLOSESOCKETDATA, w);
        /* A connection of its own (not one authenticate() left open), so
         * that the socket callback knows it and stop can cut it. */
        curl_easy_setopt(e->curl, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(e->curl, CURLOPT_FORBID_REUSE, 1L);
        curl_easy_perform(e->curl);
        curl_slist_free_all(headers);
        /* The stream ended: what changed meanwhile is read by the caller,
         * the next member is watched, with a new token if one is wanted. */
        watch_wake(w);
        if (watch_stopping(w))
            break;
        e->cur = (e->cur + 1) % e->n;
        usleep(200 * 1000);
        if (e->user) {
            curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, collect);
            curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
            curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
            authenticate(e, why, sizeof(why));
        }
    }
    json_object_put(req);
    return NULL;
}

int etcd_watch_start(struct etcd_watch **out, const struct etcd_opts *o, const char *prefix, int *fd, char *why,
                     size_t whylen)
{
    struct etcd_watch *w = calloc(1, sizeof(*w));
    *out = NULL;
    if (!w || !(w->key = strdup(prefix))) {
        free(w);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    w->sock = CURL_SOCKET_BAD;
    pthread_mutex_init(&w->lock, NULL);
    int rc = etcd_open(&w->e, o, why, whylen);
    if (rc == 0 && pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        rc = -errno;
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        w->wake[0] = w->wake[1] = -1;
    }
    /* No signal of the process's is this thread's: they are the agent
     * loop's, read from its signalfd (a SIGTERM taken here would end the
     * agent without a word, its ranks left running). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (rc == 0 && (rc = -pthread_create(&w->thread, NULL, watch_run, w)) < 0) {
        snprintf(why, whylen, "cannot start the etcd watch: %s", strerror(-rc));
        close(w->wake[0]);
        close(w->wake[1]);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        etcd_close(w->e);
        pthread_mutex_destroy(&w->lock);
        free(w->key);
        free(w);
        return rc;
    }
    *fd = w->wake[0];
    *out = w;
    return 0;
}

void etcd_watch_stop(struct etcd_watch *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    if (w->sock != CURL_SOCKET_BAD)
        shutdown(w->sock, SHUT_RDWR);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    etcd_close(w->e);
    close(w->wake[0]);
    close(w->wake[1]);
    pthread_mutex_destroy(&w->lock);
    free(w->key);
    free(w);
}
