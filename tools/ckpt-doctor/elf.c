/*
 * Reading one ELF file with libelf: its program headers (is it dynamically
 * linked at all), its dynamic section (what it needs, where it looks, its
 * flags), its symbols (does it load libraries itself, which resolvers does
 * it define) and its read-only constants (the library names it may
 * dlopen, the runtime's and NCCL's fingerprints).
 * It only ever maps files read-only and never executes or relocates
 * anything: libraries of hostile or foreign builds are data here.
 */
#include <ctype.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doctor.h"

#ifndef DF_1_PIE
#define DF_1_PIE 0x08000000
#endif

/* The substrings that name a library of each family in a dlopen call. */
static const char *const dl_stem[DL_COUNT] = {
    [DL_CUDA] = "libcuda.so", [DL_CUDART] = "libcudart.so", [DL_NCCL] = "libnccl.so",
};

/* The CUDA runtime, linked in statically, shows by the function only it
 * defines (in a symbol table, when not stripped) or by its table of error
 * names for cudaGetErrorName (among the constants, even when stripped):
 * a program that merely looks the runtime's functions up by name carries
 * neither. */
static const char rt_function[] = "cudaGetDriverEntryPoint";
static const char rt_constant[] = "cudaErrorCudartUnloading";
static const char nccl_banner[] = "NCCL version ";

/* Imports say whether an object loads libraries itself; definitions,
 * whether it answers lookups that libckpt means to answer. */
static void classify_symbol(struct elf_obj *o, const char *name, const GElf_Sym *sym, bool dynamic)
{
    int type = GELF_ST_TYPE(sym->st_info);

    if (sym->st_shndx == SHN_UNDEF) {
        if (dynamic && strcmp(name, "dlopen") == 0)
            o->features |= F_IMP_DLOPEN;
        else if (dynamic && strcmp(name, "dlmopen") == 0)
            o->features |= F_IMP_DLMOPEN;
        return;
    }
    if (type != STT_FUNC && type != STT_GNU_IFUNC)
        return;
    if (strcmp(name, "dlsym") == 0)
        o->features |= F_DEF_DLSYM;
    else if (strncmp(name, "cuGetProcAddress", 16) == 0 && (name[16] == '\0' || name[16] == '_'))
        o->features |= F_DEF_PROCADDR;
    else if (strcmp(name, rt_function) == 0)
        o->features |= F_RT_CODE;
}

static void read_symbols(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct elf_obj *o)
{
    Elf_Data *data = elf_getdata(scn, NULL);
    size_t n = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0;

    for (size_t i = 1; data && i < n; i++) {
        GElf_Sym sym;
        const char *name;
        if (!gelf_getsym(data, (int)i, &sym) || !(name = elf_strptr(elf, sh->sh_link, sym.st_name)))
            continue;
        classify_symbol(o, name, &sym, sh->sh_type == SHT_DYNSYM);
    }
}

static int read_dynamic(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct elf_obj *o)
{
    Elf_Data *data = elf_getdata(scn, NULL);
    size_t n = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0;

    for (size_t i = 0; data && i < n; i++) {
        GElf_Dyn dyn;
        const char *s;
        if (!gelf_getdyn(data, (int)i, &dyn) || dyn.d_tag == DT_NULL)
            break;
        switch (dyn.d_tag) {
        case DT_FLAGS_1:
            o->flags_1 = dyn.d_un.d_val;
            o->pie = dyn.d_un.d_val & DF_1_PIE;
            continue;
        case DT_NEEDED:
        case DT_SONAME:
        case DT_RUNPATH:
        case DT_RPATH:
            break;
        default:
            continue;
        }
        if (!(s = elf_strptr(elf, sh->sh_link, dyn.d_un.d_val)))
            return -EINVAL;
        if (dyn.d_tag == DT_NEEDED) {
            o->needed = xgrow(o->needed, o->n_needed, sizeof(*o->needed));
            o->needed[o->n_needed++] = xstrdup(s);
        } else {
            char **slot = dyn.d_tag == DT_SONAME ? &o->soname : dyn.d_tag == DT_RUNPATH ? &o->runpath : &o->rpath;
            free(*slot);
            *slot = xstrdup(s);
        }
    }
    return 0;
}

/*
 * A library name as dlopen would get it: a whole constant ("libcuda.so.1"
 * standing alone, not inside a message or a path), the stem followed only
 * by version digits.  What comes before it may be the end of another
 * constant or binary data (packed tables), never text.  Prefers a
 * versioned name, as the vendors' code does.
 */
static void find_dl_name(const char *p, size_t len, enum dl_family f, struct elf_obj *o)
{
    const char *stem = dl_stem[f];
    size_t sl = strlen(stem);
    const char *end = p + len, *hit = p;

    if (o->dl_name[f] && strlen(o->dl_name[f]) > sl)
        return;
    while ((hit = memmem(hit, end - hit, stem, sl))) {
        const char *q = hit + sl;
        while (q < end && ((*q >= '0' && *q <= '9') || *q == '.'))
            q++;
        if ((hit == p || !isgraph((unsigned char)hit[-1])) && q < end && *q == '\0' &&
            (!o->dl_name[f] || q > hit + sl)) {
            free(o->dl_name[f]);
            o->dl_name[f] = xstrdup(hit); /* ends at q */
            if (q > hit + sl)
                return;
        }
        hit += sl;
    }
}

/* NCCL's banner, "NCCL version 2.28.9+cuda13.0": the version is what
 * ncclGetVersion would say, and its presence means NCCL's code is here. */
static void find_nccl_banner(const char *p, size_t len, struct elf_obj *o)
{
    const char *end = p + len, *hit = p;
    size_t bl = sizeof(nccl_banner) - 1;

    while ((hit = memmem(hit, end - hit, nccl_banner, bl))) {
        const char *v = hit + bl, *q = v;
        while (q < end && ((*q >= '0' && *q <= '9') || *q == '.'))
            q++;
        if (q > v && v[0] >= '0' && v[0] <= '9' && (size_t)(q - v) < sizeof(o->nccl_version)) {
            memcpy(o->nccl_version, v, q - v);
            o->nccl_version[q - v] = '\0';
            o->features |= F_NCCL_BANNER;
            return;
        }
        hit += bl;
    }
}

/* Constants live in .rodata (and .rodata.*, or .lrodata in libraries
 * built for the large code model); device code (.nv_fatbin, a gigabyte in
 * torch) and everything else is never scanned. */
static void read_constants(Elf_Scn *scn, struct elf_obj *o)
{
    Elf_Data *data = NULL;

    while ((data = elf_rawdata(scn, data))) {
        if (!data->d_buf || !data->d_size)
            continue;
        for (int f = 0; f < DL_COUNT; f++)
            find_dl_name(data->d_buf, data->d_size, f, o);
        if (!o->nccl_version[0])
            find_nccl_banner(data->d_buf, data->d_size, o);
        if (memmem(data->d_buf, data->d_size, rt_constant, sizeof(rt_constant) - 1))
            o->features |= F_RT_CODE;
    }
}

static int read_sections(Elf *elf, struct elf_obj *o)
{
    size_t shstrndx;
    Elf_Scn *scn = NULL;
    int rc = 0;

    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        return -EINVAL;
    while (rc == 0 && (scn = elf_nextscn(elf, scn))) {
        GElf_Shdr sh;
        const char *name;
        if (!gelf_getshdr(scn, &sh))
            return -EINVAL;
        name = elf_strptr(elf, shstrndx, sh.sh_name);
        if (sh.sh_type == SHT_DYNAMIC)
            rc = read_dynamic(elf, scn, &sh, o);
        else if (sh.sh_type == SHT_DYNSYM || sh.sh_type == SHT_SYMTAB)
            read_symbols(elf, scn, &sh, o);
        else if (name && strcmp(name, ".nv_fatbin") == 0)
            o->features |= F_FATBIN;
        else if (name && (strncmp(name, ".rodata", 7) == 0 || strncmp(name, ".lrodata", 8) == 0) &&
                 sh.sh_type == SHT_PROGBITS)
            read_constants(scn, o);
    }
    return rc;
}

static int read_segments(Elf *elf, struct elf_obj *o)
{
    size_t n, size;
    const char *raw = elf_rawfile(elf, &size);

    if (elf_getphdrnum(elf, &n) != 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, (int)i, &ph))
            return -EINVAL;
        if (ph.p_type == PT_INTERP && raw && ph.p_offset < size && ph.p_filesz <= size - ph.p_offset)
            o->interp = xasprintf("%.*s", (int)ph.p_filesz, raw + ph.p_offset);
    }
    return 0;
}

/*
 * Reads what ckpt-doctor needs from @path into @o (zeroed here; the caller
 * frees it with elf_obj_free whatever this returns).  -ENOEXEC when @path
 * is not an ELF file, -EINVAL when it is a damaged one, -errno from open.
 */
int elf_obj_read(const char *path, struct elf_obj *o)
{
    GElf_Ehdr eh;
    Elf *elf;
    int fd, rc;

    memset(o, 0, sizeof(*o));
    if (elf_version(EV_CURRENT) == EV_NONE)
        return -ENOSYS;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF) {
        rc = -ENOEXEC;
        goto out;
    }
    if (!gelf_getehdr(elf, &eh)) {
        rc = -EINVAL;
        goto out;
    }
    o->elf_class = gelf_getclass(elf);
    o->machine = eh.e_machine;
    o->type = eh.e_type;
    rc = read_segments(elf, o);
    if (rc == 0)
        rc = read_sections(elf, o);
out:
    elf_end(elf);
    close(fd);
    return rc;
}

void elf_obj_free(struct elf_obj *o)
{
    for (int i = 0; i < o->n_needed; i++)
        free(o->needed[i]);
    for (int f = 0; f < DL_COUNT; f++)
        free(o->dl_name[f]);
    free(o->needed);
    free(o->interp);
    free(o->soname);
    free(o->runpath);
    free(o->rpath);
    memset(o, 0, sizeof(*o));
}

/* 0 with the class and machine of @path; -ENOEXEC when it is not ELF. */
int elf_peek(const char *path, int *elf_class, int *machine)
{
    unsigned char id[20];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -errno;
    n = pread(fd, id, sizeof(id), 0);
    close(fd);
    if (n != (ssize_t)sizeof(id) || memcmp(id, ELFMAG, SELFMAG) != 0)
        return -ENOEXEC;
    *elf_class = id[EI_CLASS];
    *machine = id[EI_DATA] == ELFDATA2MSB ? id[18] << 8 | id[19] : id[19] << 8 | id[18];
    return 0;
}

const char *elf_machine_name(int machine)
{
    switch (machine) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "aarch64";
    case EM_386: return "i386";
    case EM_ARM: return "arm";
    case EM_PPC64: return "ppc64";
    default: return "another architecture";
    }
}
