/*
 * A writer of the safetensors format, as its specification defines it: an
 * 8-byte little-endian header length N, N bytes of JSON (every tensor's
 * dtype, shape and [begin, end) data offsets, and "__metadata__", a map of
 * strings to strings), padded with spaces so that the data starts 8-byte
 * aligned, then the tensors' bytes back to back, with no hole, in the
 * order of their offsets.  Readers of the Python world (safetensors,
 * huggingface tools) check all of that, so nothing here may bend it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inspect.h"

#define WRITE_STEP (64u << 20) /* bytes written between progress updates */

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The JSON header, padded; *len is its length.  NULL when out of memory. */
static char *header(const struct st_tensor *t, size_t nt, const struct st_meta *m, size_t nm, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    fputc('{', f);
    if (nm) {
        fputs("\"__metadata__\":{", f);
        for (size_t i = 0; i < nm; i++) {
            if (i)
                fputc(',', f);
            json_string(f, m[i].key);
            fputc(':', f);
            json_string(f, m[i].value);
        }
        fputc('}', f);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        if (i || nm)
            fputc(',', f);
        json_string(f, t[i].name);
        fprintf(f, ":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[%llu,%llu]}",
                (unsigned long long)t[i].size, (unsigned long long)off, (unsigned long long)(off + t[i].size));
        off += t[i].size;
    }
    fputc('}', f);
    /* 8 + N a multiple of 8: the data starts aligned. */
    fflush(f);
    fprintf(f, "%*s", (int)((8 - *len % 8) % 8), "");
    bool failed = ferror(f);
    if (fclose(f) != 0 || failed) {
        free(buf);
        return NULL;
    }
    return buf;
}

int write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}

int safetensors_write(const char *path, const struct st_tensor *t, size_t nt, const struct st_meta *m, size_t nm,
                      struct progress *p, char *why, size_t whylen)
{
    size_t hlen;
    char *h = header(t, nt, m, nm, &hlen);
    if (!h) {
        snprintf(why, whylen, "out of memory for the header of %s", path);
        return -ENOMEM;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot create %s: %s", path, strerror(e));
        free(h);
        return -e;
    }
    unsigned char n8[8];
    for (int i = 0; i < 8; i++)
        n8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int rc = write_all(fd, n8, sizeof(n8));
    if (rc == 0)
        rc = write_all(fd, h, hlen);
    free(h);
    for (size_t i = 0; i < nt && rc == 0; i++) {
        for (uint64_t done = 0; done < t[i].size && rc == 0;) {
            uint64_t n = t[i].size - done < WRITE_STEP ? t[i].size - done : WRITE_STEP;
            rc = write_all(fd, (const char *)t[i].data + done, n);
            done += n;
            progress_add(p, n);
        }
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc < 0)
        snprintf(why, whylen, "cannot write %s: %s", path, strerror(-rc));
    return rc;
}
