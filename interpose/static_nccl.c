/*
 * NCCL linked statically into another object (a framework's library, or
 * the program itself): its API never reaches libckpt.  A standby cannot
 * then keep the program's communicators virtual: replaying the program's
 * set-up, that copy of NCCL would make real ones, and would connect to the
 * live job's bootstrap, whose unique id the standby reads from the log.  So
 * a standby looks, when CUDA starts (before the program can make a
 * communicator), at every loaded object but libnccl.so for NCCL's banner
 * ("NCCL version 2.x", what ncclGetVersion reports, in its read-only data)
 * and refuses to stand by when one has it.  ckpt-doctor says the same of
 * the files before the job runs.  Only the allocated .rodata and .lrodata
 * sections are read, where the file's section headers say they are
 * mapped: device code, a gigabyte in a framework, is never touched.
 */
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interpose.h"

static const char banner[] = "NCCL version ";

struct found {
    char path[PATH_MAX];
    char version[32];
};

/* The banner followed by a version, in [p, p + len): its version, or
 * false.  The section holds the object's constants, which under
 * AddressSanitizer sit between poisoned redzones: read byte by byte, not
 * instrumented, and through no intercepted call (memmem, memcpy). */
__attribute__((no_sanitize("address"))) static bool has_banner(const char *p, size_t len, char *version,
                                                                 size_t vlen)
{
    const size_t bl = sizeof(banner) - 1;

    for (size_t i = 0; i + bl < len; i++) {
        size_t k = 0;
        while (k < bl && p[i + k] == banner[k])
            k++;
        if (k < bl)
            continue;
        size_t n = 0;
        while (i + bl + n < len && n + 1 < vlen && ((p[i + bl + n] >= '0' && p[i + bl + n] <= '9') ||
                                                     p[i + bl + n] == '.'))
            n++;
        if (n == 0 || p[i + bl] < '1' || p[i + bl] > '9')
            continue;
        for (size_t c = 0; c < n; c++)
            version[c] = p[i + bl + c];
        version[n] = '\0';
        return true;
    }
    return false;
}

static bool read_at(int fd, void *buf, size_t len, off_t off)
{
    return pread(fd, buf, len, off) == (ssize_t)len;
}

/* Whether the object in path, loaded at base, has the banner in a mapped
 * read-only data section. */
static bool object_has_banner(const char *path, ElfW(Addr) base, char *version, size_t vlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool found = false;
    ElfW(Ehdr) eh;
    ElfW(Shdr) *sh = NULL;
    char *names = NULL;
    if (!read_at(fd, &eh, sizeof(eh), 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_shentsize != sizeof(ElfW(Shdr)) || !eh.e_shnum || eh.e_shstrndx >= eh.e_shnum ||
        !(sh = calloc(eh.e_shnum, sizeof(*sh))) ||
        !read_at(fd, sh, eh.e_shnum * sizeof(*sh), (off_t)eh.e_shoff) || sh[eh.e_shstrndx].sh_size > (1u << 20) ||
        !(names = calloc(1, sh[eh.e_shstrndx].sh_size + 1)) ||
        !read_at(fd, names, sh[eh.e_shstrndx].sh_size, (off_t)sh[eh.e_shstrndx].sh_offset))
        goto out;
    for (int i = 0; i < eh.e_shnum && !found; i++) {
        const char *name = sh[i].sh_name < sh[eh.e_shstrndx].sh_size ? names + sh[i].sh_name : "";
        if ((sh[i].sh_flags & SHF_ALLOC) && sh[i].sh_type == SHT_PROGBITS && sh[i].sh_addr &&
            (strncmp(name, ".rodata", 7) == 0 || strncmp(name, ".lrodata", 8) == 0))
            found = has_banner((const char *)(base + sh[i].sh_addr), sh[i].sh_size, version, vlen);
    }
out:
    free(names);
    free(sh);
    close(fd);
    return found;
}

static int visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct found *f = arg;
    char exe[PATH_MAX];
    const char *path = info->dlpi_name;
    (void)size;
    if (!path || !*path) { /* the program itself */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
            return 0;
        exe[n] = '\0';
        path = exe;
    }
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (strncmp(base, "libnccl.so", 10) == 0 || strncmp(base, "libckpt.so", 10) == 0 ||
        strncmp(base, "linux-vdso", 10) == 0)
        return 0;
    if (!object_has_banner(path, info->dlpi_addr, f->version, sizeof(f->version)))
        return 0;
    snprintf(f->path, sizeof(f->path), "%s", path);
    return 1;
}

void ckpt_refuse_static_nccl(void)
{
    struct found f = {.path = ""};
    if (dl_iterate_phdr(visit, &f))
        ckpt_refuse("%s carries its own copy of NCCL %s, linked in statically: libckpt cannot see its API, so a "
                    "standby could not keep the program's communicators virtual and would make real ones beside "
                    "the live job's; recovery takes the cold path (link NCCL dynamically, libnccl.so.2, to have "
                    "standbys)", f.path, f.version);
}
