/*
 * The node agents' etcd client (tools/ckpt-resume/etcd.c) against a real
 * three-member etcd cluster this test starts on loopback ports: keys,
 * prefixes, deletes; a transaction that creates a key only once, and one
 * that compares a revision; a lease whose keys go when it is not renewed,
 * and whose renewal then says so; a member killed (the client goes on
 * with the others), two killed (a clear error, no answer made up), and
 * back; an endpoint nobody listens on; authentication, right and wrong;
 * a watch that wakes for a change under its prefix and for none elsewhere,
 * and goes on through another member when its own is killed.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd.h"
#include "check.h"

static char dir[] = "/tmp/ckpt-etcd-XXXXXX", why[512];
static int client_port[3], peer_port[3];
static pid_t member[3];
static char endpoints[128], cluster[256];

/* n distinct free loopback ports: each held until all are chosen. */
static void free_ports(int *port, int n)
{
    int fd[8];
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        fd[i] = socket(AF_INET, SOCK_STREAM, 0);
        port[i] = fd[i] >= 0 && bind(fd[i], (struct sockaddr *)&a, sizeof(a)) == 0 &&
                          getsockname(fd[i], (struct sockaddr *)&a, &len) == 0
                      ? ntohs(a.sin_port)
                      : -1;
    }
    for (int i = 0; i < n; i++)
        close(fd[i]);
}

static void start(int i)
{
    char name[8], data[128], curls[64], purls[64], log[128];
    snprintf(name, sizeof(name), "m%d", i);
    snprintf(data, sizeof(data), "%s/%s", dir, name);
    snprintf(curls, sizeof(curls), "http://127.0.0.1:%d", client_port[i]);
    snprintf(purls, sizeof(purls), "http://127.0.0.1:%d", peer_port[i]);
    snprintf(log, sizeof(log), "%s/%s.log", dir, name);
    fflush(NULL); /* what the test printed is not the child's to print again */
    if ((member[i] = fork()) == 0) {
        freopen(log, "a", stderr);
        freopen("/dev/null", "w", stdout);
        execlp("etcd", "etcd", "--name", name, "--data-dir", data, "--listen-client-urls", curls,
               "--advertise-client-urls", curls, "--listen-peer-urls", purls, "--initial-advertise-peer-urls", purls,
               "--initial-cluster", cluster, "--initial-cluster-state", "new", "--heartbeat-interval", "50",
               "--election-timeout", "500", (char *)NULL);
        _exit(127);
    }
}

static void stop(int i)
{
    kill(member[i], SIGKILL);
    waitpid(member[i], NULL, 0);
    member[i] = 0;
}

/* Whether member i answers with a leader within timeout_s; if not, the
 * end of its log, so that a failure says why. */
static int member_up(int i, double timeout_s);

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Whether fd becomes readable within ms; what is there is drained. */
static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, ms) > 0;
    char buf[256];
    while (r && read(fd, buf, sizeof(buf)) > 0)
        ;
    return r;
}

/* Until a put succeeds through e, or timeout_s: whether it did. */
static int answers(struct etcd *e, double timeout_s)
{
    for (double t0 = now_s(); now_s() - t0 < timeout_s; usleep(100 * 1000))
        if (etcd_put(e, "/probe", "x", 1, 0, why, sizeof(why)) == 0)
            return 1;
    return 0;
}

static int member_up(int i, double timeout_s)
{
    char ep[32], cmd[256];
    struct etcd *one;
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", client_port[i]);
    struct etcd_opts o = {.endpoints = ep, .timeout_ms = 1000};
    if (etcd_open(&one, &o, why, sizeof(why)) < 0)
        return 0;
    int up = 0;
    for (double t0 = now_s(); !(up = etcd_quorum(one, why, sizeof(why)) == 1) && now_s() - t0 < timeout_s;)
        usleep(100 * 1000);
    etcd_close(one);
    if (!up) {
        printf("member m%d (client port %d) is not up: %s; the end of its log:\n", i, client_port[i], why);
        fflush(stdout);
        snprintf(cmd, sizeof(cmd), "tail -n 20 %s/m%d.log", dir, i);
        if (system(cmd) != 0)
            printf("(no log)\n");
    }
    return up;
}

static int etcdctl(const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "etcdctl --endpoints=%s %s >/dev/null 2>&1", endpoints, args);
    return system(cmd);
}

int main(void)
{
    struct etcd *e;
    struct etcd_kv *kv;
    size_t n;
    int64_t rev, lease;

    setenv("ETCDCTL_API", "3", 1);
    if (!mkdtemp(dir))
        return 1;
    int ports[6];
    free_ports(ports, 6);
    for (int i = 0; i < 3; i++) {
        client_port[i] = ports[2 * i];
        peer_port[i] = ports[2 * i + 1];
    }
    snprintf(cluster, sizeof(cluster), "m0=http://127.0.0.1:%d,m1=http://127.0.0.1:%d,m2=http://127.0.0.1:%d",
             peer_port[0], peer_port[1], peer_port[2]);
    snprintf(endpoints, sizeof(endpoints), "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", client_port[0],
             client_port[1], client_port[2]);
    for (int i = 0; i < 3; i++)
        start(i);

    struct etcd_opts o = {.endpoints = endpoints, .timeout_ms = 2000};
    CHECK(etcd_open(&e, &o, why, sizeof(why)) == 0, "open: %s", why);
    CHECK(answers(e, 20), "the cluster never answered: %s", why);
    for (int i = 0; i < 3; i++) /* all three: the tests below lose two */
        CHECK(member_up(i, 20), "member m%d did not come up", i);

    /* Keys and prefixes. */
    CHECK(etcd_put(e, "/job/a/node/0", "zero", 4, 0, why, sizeof(why)) == 0, "put: %s", why);
    CHECK(etcd_put(e, "/job/a/node/1", "one\0bytes", 9, 0, why, sizeof(why)) == 0, "put binary: %s", why);
    CHECK(etcd_put(e, "/job/ab", "other job", 9, 0, why, sizeof(why)) == 0, "put: %s", why);
    CHECK(etcd_get(e, "/job/a/node/", true, &kv, &n, &rev, why, sizeof(why)) == 0 && n == 2, "prefix: %zu %s", n,
          why);
    if (n == 2) {
        CHECK(strcmp(kv[0].key, "/job/a/node/0") == 0 && kv[0].len == 4 && strcmp(kv[0].value, "zero") == 0,
              "first key");
        CHECK(kv[1].len == 9 && memcmp(kv[1].value, "one\0bytes", 9) == 0, "a value with a NUL in it");
        CHECK(rev >= kv[1].mod_revision && kv[1].mod_revision > kv[0].mod_revision, "revisions");
    }
    etcd_kvs_free(kv, n);
    CHECK(etcd_get(e, "/job/none", false, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 0, "absent key");
    CHECK(etcd_delete(e, "/job/a/", true, why, sizeof(why)) == 0, "delete: %s", why);
    CHECK(etcd_get(e, "/job/", true, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 1 &&
              strcmp(kv[0].key, "/job/ab") == 0, "after the delete: %zu", n);
    etcd_kvs_free(kv, n);

    /* A rank claimed once: create if absent. */
    struct etcd_cmp absent = {"/job/a/rank/2", ETCD_CREATE, 0, NULL};
    struct etcd_op claim = {"/job/a/rank/2", "host-x", 6, 0};
    CHECK(etcd_txn(e, &absent, 1, &claim, 1, &rev, why, sizeof(why)) == 1, "first claim: %s", why);
    claim.value = "host-y";
    CHECK(etcd_txn(e, &absent, 1, &claim, 1, NULL, why, sizeof(why)) == 0, "a second claim must fail");
    CHECK(etcd_get(e, "/job/a/rank/2", false, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 1 &&
              strcmp(kv[0].value, "host-x") == 0, "the first claim holds");
    /* A decision made only against the revision it read. */
    struct etcd_cmp same = {"/job/a/rank/2", ETCD_MOD, n ? kv[0].mod_revision : 0, NULL};
    struct etcd_op decide[2] = {{"/job/a/decision", "restart 40", 10, 0}, {"/job/a/rank/2", NULL, 0, 0}};
    etcd_kvs_free(kv, n);
    CHECK(etcd_txn(e, &same, 1, decide, 2, NULL, why, sizeof(why)) == 1, "decide: %s", why);
    CHECK(etcd_txn(e, &same, 1, decide, 2, NULL, why, sizeof(why)) == 0, "a stale revision must fail");
    CHECK(etcd_get(e, "/job/a/rank/2", false, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 0, "deleted in the txn");
    etcd_kvs_free(kv, n);

    /* A decision that reads, at its own revision, the keys it was made from. */
    CHECK(etcd_put(e, "/job/a/node/0", "n0", 2, 0, why, sizeof(why)) == 0 &&
              etcd_put(e, "/job/a/node/1", "n1", 2, 0, why, sizeof(why)) == 0 &&
              etcd_put(e, "/job/b/node/0", "other", 5, 0, why, sizeof(why)) == 0, "nodes: %s", why);
    struct etcd_cmp no_leader = {"/job/a/leader", ETCD_CREATE, 0, NULL};
    struct etcd_op put = {"/job/a/decision", "restart 50", 10, 0};
    int64_t read_at = 0;
    CHECK(etcd_txn_read(e, &no_leader, 1, &put, 1, "/job/a/node/", &kv, &n, &read_at, why, sizeof(why)) == 1,
          "decide and read: %s", why);
    CHECK(n == 2 && strcmp(kv[0].key, "/job/a/node/0") == 0 && strcmp(kv[1].value, "n1") == 0 &&
              kv[0].mod_revision < read_at, "the read has the job's two nodes, before the decision (%zu)", n);
    etcd_kvs_free(kv, n);
    CHECK(etcd_get(e, "/job/a/decision", false, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 1 &&
              kv[0].mod_revision == read_at, "the decision is at the revision the read is of");
    etcd_kvs_free(kv, n);
    struct etcd_cmp gone = {"/job/a/node/0", ETCD_CREATE, 0, NULL};
    CHECK(etcd_txn_read(e, &gone, 1, &put, 1, "/job/a/node/", &kv, &n, NULL, why, sizeof(why)) == 0 && !kv && !n,
          "a compare that fails reads nothing");

    /* A lease: its key lives while it is renewed. */
    CHECK(etcd_lease_grant(e, 2, &lease, why, sizeof(why)) == 0, "grant: %s", why);
    CHECK(etcd_put(e, "/job/a/member/0", "alive", 5, lease, why, sizeof(why)) == 0, "put with lease: %s", why);
    int ttl = 0;
    for (int i = 0; i < 6; i++) {
        usleep(500 * 1000);
        CHECK(etcd_keepalive(e, lease, &ttl, why, sizeof(why)) == 0 && ttl > 0, "keepalive %d: %s", i, why);
    }
    CHECK(etcd_get(e, "/job/a/member/0", false, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 1 &&
              kv[0].lease == lease, "kept alive past its TTL");
    etcd_kvs_free(kv, n);
    sleep(4);
    CHECK(etcd_get(e, "/job/a/member/0", false, &kv, &n, NULL, why, sizeof(why)) == 0 && n == 0,
          "the key outlived its lease");
    etcd_kvs_free(kv, n);
    CHECK(etcd_keepalive(e, lease, &ttl, why, sizeof(why)) == -ENOENT && strstr(why, "expired"),
          "keepalive of an expired lease: '%s'", why);
    CHECK(etcd_lease_grant(e, 30, &lease, why, sizeof(why)) == 0 &&
              etcd_lease_revoke(e, lease, why, sizeof(why)) == 0, "revoke: %s", why);

    /* A watch: a change under its prefix wakes it, one elsewhere does not. */
    struct etcd_watch *w;
    int wfd;
    CHECK(etcd_watch_start(&w, &o, "/watched/", &wfd, why, sizeof(why)) == 0, "watch: %s", why);
    for (double t0 = now_s(); now_s() - t0 < 1;) /* the stream's start says nothing changed */
        readable(wfd, 200);
    CHECK(!readable(wfd, 300), "a watch woke with nothing changed");
    CHECK(etcd_put(e, "/watchedx", "no", 2, 0, why, sizeof(why)) == 0 && !readable(wfd, 300),
          "a watch woke for a key outside its prefix");
    CHECK(etcd_put(e, "/watched/a", "yes", 3, 0, why, sizeof(why)) == 0 && readable(wfd, 2000),
          "a put under the prefix did not wake the watch");

    /* A member lost: the others answer.  Two lost: no quorum, said. */
    stop(0);
    int ok = answers(e, 10);
    CHECK(ok, "after one member was killed: %s", why);
    for (int i = 1; i < 3 && !ok; i++) /* why not, in the survivors' words */
        member_up(i, 0);
    /* The watch was on the first member: it goes on through another. */
    for (double t0 = now_s(); now_s() - t0 < 1;)
        readable(wfd, 200);
    CHECK(etcd_put(e, "/watched/b", "yes", 3, 0, why, sizeof(why)) == 0 && readable(wfd, 3000),
          "the watch did not go on after its member was killed");
    double t_stop = now_s();
    etcd_watch_stop(w);
    CHECK(now_s() - t_stop < 1, "stopping a watch took %.1f s", now_s() - t_stop);
    stop(1);
    int rc = etcd_put(e, "/job/a/x", "y", 1, 0, why, sizeof(why));
    CHECK(rc < 0 && strstr(why, "etcd at "), "without quorum: %d '%s'", rc, why);
    start(0);
    start(1);
    CHECK(answers(e, 20), "quorum back: %s", why);

    /* Nobody there. */
    struct etcd *none;
    struct etcd_opts nowhere = {.endpoints = "127.0.0.1:1", .timeout_ms = 500};
    CHECK(etcd_open(&none, &nowhere, why, sizeof(why)) == 0, "open (no request yet)");
    rc = etcd_get(none, "/x", false, &kv, &n, NULL, why, sizeof(why));
    CHECK(rc == -ECONNREFUSED && strstr(why, "127.0.0.1:1"), "nobody listens: %d '%s'", rc, why);
    etcd_close(none);
    struct etcd_opts empty = {.endpoints = ""};
    CHECK(etcd_open(&none, &empty, why, sizeof(why)) == -EINVAL && strstr(why, "HOST:PORT"), "no endpoint: '%s'", why);

    /* Authentication. */
    CHECK(etcdctl("user add root --new-user-password=s3cret --interactive=false") == 0 &&
              etcdctl("auth enable") == 0, "etcdctl could not enable authentication");
    struct etcd *authed;
    struct etcd_opts wrong = {.endpoints = endpoints, .user = "root", .password = "nope"};
    rc = etcd_open(&authed, &wrong, why, sizeof(why));
    CHECK(rc == -EACCES && strstr(why, "authentication failed"), "a wrong password: %d '%s'", rc, why);
    struct etcd_opts right = {.endpoints = endpoints, .user = "root", .password = "s3cret"};
    CHECK(etcd_open(&authed, &right, why, sizeof(why)) == 0, "the right password: %s", why);
    if (rc != 0 || authed) {
        CHECK(etcd_put(authed, "/job/a/auth", "ok", 2, 0, why, sizeof(why)) == 0, "an authenticated put: %s", why);
        /* A watch with credentials wakes, and stops at once. */
        CHECK(etcd_watch_start(&w, &right, "/job/a/", &wfd, why, sizeof(why)) == 0, "an authenticated watch: %s", why);
        for (double t0 = now_s(); now_s() - t0 < 1;)
            readable(wfd, 200);
        CHECK(etcd_put(authed, "/job/a/auth2", "ok", 2, 0, why, sizeof(why)) == 0 && readable(wfd, 2000),
              "an authenticated watch did not wake");
        t_stop = now_s();
        etcd_watch_stop(w);
        CHECK(now_s() - t_stop < 1, "stopping an authenticated watch took %.1f s", now_s() - t_stop);
        etcd_close(authed);
    }
    rc = etcd_put(e, "/job/a/anon", "no", 2, 0, why, sizeof(why));
    CHECK(rc == -EACCES, "an anonymous put with auth on: %d '%s'", rc, why);

    etcd_close(e);
    for (int i = 0; i < 3; i++)
        if (member[i])
            stop(i);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        failures++;
    return failures ? 1 : 0;
}
