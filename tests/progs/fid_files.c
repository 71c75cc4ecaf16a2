/*
 * fid_files: a training loop that writes files as real ones do: a log it
 * opens once, before CUDA, and appends a line to every iteration
 * (fopen "a", as Python's logging.FileHandler and a metrics CSV do), a
 * history it opens and appends to each time (open O_APPEND), and its own
 * checkpoint every iteration, written whole to a temporary name and
 * renamed over the last one (torch.save to a tmp file, os.replace), with
 * the file before it removed.  Its directory is FID_FILES_DIR.  It notes
 * its one death (--die-at) the way a job notes a once-only event: a
 * marker created with fopen "wx", whose failure with EEXIST says it
 * happened already.
 *
 * A replay re-runs all of that: its writes must go nowhere near these
 * files, and the resumed run must append where the snapshot's run stood,
 * so that the log has each iteration once, in order, and no checkpoint is
 * ever older than the last one written.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "fid.h"

#define WORDS 2048

static void path_of(char *out, size_t n, const char *name)
{
    const char *dir = getenv("FID_FILES_DIR");
    REQUIRE(dir != NULL);
    REQUIRE(snprintf(out, n, "%s/%s", dir, name) < (int)n);
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    char log_path[512], hist_path[512], ckpt_path[512], tmp_path[512], old_path[512];
    fid_parse(argc, argv, &o, "fid_files");
    int die_at = o.die_at;
    o.die_at = 0; /* its own death, below */
    path_of(log_path, sizeof(log_path), "train.log");
    path_of(hist_path, sizeof(hist_path), "history");
    path_of(ckpt_path, sizeof(ckpt_path), "model.ckpt");
    path_of(tmp_path, sizeof(tmp_path), "model.ckpt.tmp");
    path_of(old_path, sizeof(old_path), "model.ckpt.old");

    FILE *log = fopen(log_path, "a"); /* before CUDA is touched */
    REQUIRE(log != NULL);

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dloss, loss = 0;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(8), DIM3(256), s, w, WORDS, (uint32_t)it * 131u + loss));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fprintf(stderr, "progress %d\n", it);

        fprintf(log, "iter %d loss 0x%08x\n", it, loss);
        fflush(log);

        int h = open(hist_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        REQUIRE(h >= 0);
        char line[64];
        int n = snprintf(line, sizeof(line), "checkpoint %d\n", it);
        REQUIRE(write(h, line, (size_t)n) == n && close(h) == 0);

        FILE *c = fopen(tmp_path, "w");
        REQUIRE(c != NULL);
        fprintf(c, "iteration %d loss 0x%08x\n", it, loss);
        REQUIRE(fclose(c) == 0);
        unlink(old_path);
        rename(ckpt_path, old_path); /* fails at the first iteration: no checkpoint yet */
        REQUIRE(rename(tmp_path, ckpt_path) == 0);
        if (it == die_at) {
            FILE *m = fopen(getenv("FID_DIE_ONCE"), "wx");
            REQUIRE(m != NULL || errno == EEXIST);
            if (m) {
                REQUIRE(fclose(m) == 0);
                fflush(NULL);
                kill(getpid(), SIGKILL);
            }
        }
        fid_end_iteration(&o, it);
    }
    fclose(log);
    uint64_t d = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)d);
    return 0;
}
