/*
 * The diagnosis on stdout, for people (aligned lines, the verdict last)
 * or for scripts (--json: one object, written by hand).  The JSON must
 * parse whatever the file names hold: every string is escaped, and bytes
 * that are not UTF-8 are written as the code points of the same value,
 * never copied raw.
 */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "doctor.h"

static const char *const severity_name[] = {
    [SEV_PROBLEM] = "problem", [SEV_LIMIT] = "limit", [SEV_NOTE] = "note",
};

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* ---- text */

#define INDENT 15

/* One labelled paragraph, wrapped at spaces to the terminal's width; not
 * wrapped at all when stdout is not a terminal, so that scripts and grep
 * see one finding per line (a word longer than a line stays whole). */
static void para(const char *label, const char *text)
{
    static int width = -1;
    int col = printf("  %-*s", INDENT - 2, label);

    if (width < 0) {
        struct winsize ws;
        width = isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 2 * INDENT
                    ? ws.ws_col - 1 : 0;
    }
    while (*text) {
        size_t word = strcspn(text, " ");
        if (width && col > INDENT && col + 1 + (int)word > width)
            col = printf("\n%*s", INDENT, "") - 1;
        else if (col > INDENT)
            col += printf(" ");
        col += printf("%.*s", (int)word, text);
        text += word;
        text += strspn(text, " ");
    }
    putchar('\n');
}

static void program_line(const struct diagnosis *d)
{
    const struct lib *p = &d->closure.libs[0];
    char *line;

    if (d->python) {
        printf("  interpreter: %s\n", d->py.executable);
        printf("  torch:       %s%s%s%s\n", d->py.torch_dir ? d->py.torch_dir : "not installed",
               d->py.torch_version ? " (" : "", d->py.torch_version ? d->py.torch_version : "",
               d->py.torch_version ? ")" : "");
        if (d->py.torch_dir)
            printf("               %s\n",
                   d->py.torch_cuda ? d->py.torch_cuda : "no lib/libtorch_cuda.so: a build without CUDA");
        return;
    }
    line = xasprintf("%d-bit %s %s, %s%s%s", p->elf.elf_class == ELFCLASS64 ? 64 : 32,
                     elf_machine_name(p->elf.machine), d->kind,
                     p->elf.interp                         ? "loaded by "
                     : strcmp(d->kind, "executable") == 0 ? "statically linked"
                                                           : "checked as loaded",
                     p->elf.interp ? p->elf.interp : "", p->elf.features & F_FATBIN ? ", carries device code" : "");
    para("program:", line);
    free(line);
}

static void libraries(const struct diagnosis *d, bool verbose)
{
    const struct closure *c = &d->closure;

    printf("  libraries:   %d mapped, %d not found\n", c->n - 1, c->n_miss);
    for (int i = 1; verbose && i < c->n; i++)
        printf("               %s => %s (%s, needed by %s)\n", c->libs[i].name, c->libs[i].path, c->libs[i].via,
               base_name(c->libs[c->libs[i].parent].name));
    for (int i = 0; verbose && i < c->n_miss; i++)
        printf("               %s => not found (needed by %s)\n", c->miss[i].name,
               base_name(c->libs[c->miss[i].parent].name));
}

void report_text(const struct diagnosis *d, bool verbose)
{
    const struct closure *c = &d->closure;

    printf("ckpt-doctor: %s\n", d->program);
    program_line(d);
    libraries(d, verbose);
    for (int i = 0; i < d->n_reach; i++) {
        const struct lib *l = &c->libs[d->reach[i].obj];
        char *head = d->reach[i].obj ? xasprintf("%s: %s => %s", d->reach[i].how, l->name, l->path)
                                     : xasprintf("%s: %s itself", d->reach[i].how, base_name(l->name));
        para(i ? "" : "CUDA:", head);
        para("", d->reach[i].detail);
        free(head);
    }
    if (d->nccl_obj >= 0) {
        char *line = xasprintf("%s => %s, version %s", c->libs[d->nccl_obj].name, c->libs[d->nccl_obj].path,
                               d->nccl_version ? d->nccl_version : "unknown");
        para("NCCL:", line);
        free(line);
    }
    /* The weightiest last, next to the verdict they explain. */
    for (enum severity s = SEV_NOTE + 1; s-- > SEV_PROBLEM;) {
        for (int i = 0; i < d->n_found; i++) {
            char label[16];
            if (d->found[i].sev != s)
                continue;
            snprintf(label, sizeof(label), "%s:", severity_name[s]);
            para(label, d->found[i].text);
            if (d->found[i].fix)
                para("  fix:", d->found[i].fix);
        }
    }
    printf("  verdict:     %s\n", verdict_name(d->verdict));
}

/* ---- JSON */

/* The length of the valid UTF-8 sequence at @s, or 0 (overlong forms,
 * surrogates and values past U+10FFFF are not valid). */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;

    for (int k = 1; k < n; k++)
        if ((s[k] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) || (s[0] == 0xf0 && s[1] < 0x90) ||
        (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

static void jstr(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    if (!s) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    while (*p) {
        int n;
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p++);
        else if (*p == '\n')
            fputs("\\n", stdout), p++;
        else if (*p == '\t')
            fputs("\\t", stdout), p++;
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\u%04x", *p++);
        else if (*p < 0x80)
            putchar(*p++);
        else if ((n = utf8_len(p)) > 0)
            fwrite(p, 1, n, stdout), p += n;
        else
            printf("\\u%04x", *p++);
    }
    putchar('"');
}

/* "key": "value" with the separator before it. */
static void jfield(bool first, const char *key, const char *value)
{
    fputs(first ? "" : ", ", stdout);
    jstr(key);
    fputs(": ", stdout);
    jstr(value);
}

static void json_python(const struct diagnosis *d)
{
    fputs(",\n  \"python\": {", stdout);
    jfield(true, "executable", d->py.executable);
    jfield(false, "torch", d->py.torch_dir);
    jfield(false, "torch_version", d->py.torch_version);
    jfield(false, "libtorch_cuda", d->py.torch_cuda);
    fputs(", \"sys_path\": [", stdout);
    for (int i = 0; i < d->py.n_site; i++) {
        fputs(i ? ", " : "", stdout);
        jstr(d->py.site[i]);
    }
    fputs("]}", stdout);
}

void report_json(const struct diagnosis *d)
{
    const struct closure *c = &d->closure;

    fputs("{", stdout);
    jfield(true, "program", d->program);
    jfield(false, "kind", d->kind);
    jfield(false, "verdict", verdict_name(d->verdict));
    printf(", \"exit\": %d", (int)d->verdict);
    if (d->python)
        json_python(d);
    fputs(",\n  \"libraries\": [", stdout);
    for (int i = 0; i < c->n; i++) {
        fputs(i ? ",\n    {" : "\n    {", stdout);
        jfield(true, "name", c->libs[i].name);
        jfield(false, "path", c->libs[i].path);
        jfield(false, "via", c->libs[i].via);
        jfield(false, "needed_by", c->libs[i].parent >= 0 ? c->libs[c->libs[i].parent].name : NULL);
        jfield(false, "soname", c->libs[i].elf.soname);
        fputs("}", stdout);
    }
    fputs("],\n  \"missing\": [", stdout);
    for (int i = 0; i < c->n_miss; i++) {
        fputs(i ? ", {" : "{", stdout);
        jfield(true, "name", c->miss[i].name);
        jfield(false, "needed_by", c->libs[c->miss[i].parent].name);
        fputs("}", stdout);
    }
    fputs("],\n  \"cuda\": [", stdout);
    for (int i = 0; i < d->n_reach; i++) {
        fputs(i ? ",\n    {" : "\n    {", stdout);
        jfield(true, "how", d->reach[i].how);
        jfield(false, "object", c->libs[d->reach[i].obj].name);
        jfield(false, "path", c->libs[d->reach[i].obj].path);
        jfield(false, "detail", d->reach[i].detail);
        fputs("}", stdout);
    }
    fputs("],\n  \"nccl\": ", stdout);
    if (d->nccl_obj >= 0) {
        fputs("{", stdout);
        jfield(true, "object", c->libs[d->nccl_obj].name);
        jfield(false, "path", c->libs[d->nccl_obj].path);
        jfield(false, "version", d->nccl_version);
        fputs("}", stdout);
    } else {
        fputs("null", stdout);
    }
    fputs(",\n  \"findings\": [", stdout);
    for (int i = 0; i < d->n_found; i++) {
        fputs(i ? ",\n    {" : "\n    {", stdout);
        jfield(true, "severity", severity_name[d->found[i].sev]);
        jfield(false, "text", d->found[i].text);
        jfield(false, "fix", d->found[i].fix);
        fputs("}", stdout);
    }
    fputs("]}\n", stdout);
}
