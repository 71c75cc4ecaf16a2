/*
 * hostwork: a training loop whose host side is the heavy part, as a
 * framework's dispatch is (Python, autograd, the allocator): each
 * iteration the host mixes a seed for HOSTWORK_ROUNDS rounds (default
 * 200,000: about a millisecond), then one step kernel and the loss read
 * back.  A standby replays that host work as the rank did it, so it needs
 * about the rank's host CPU to keep up: the program that CKPT_STANDBY_CPU
 * is measured with.  The command line is fid.h's (--iters, --die-at).
 */
#include "fid.h"

#define WORDS 1024

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "hostwork");
    const char *r = getenv("HOSTWORK_ROUNDS");
    long rounds = r ? atol(r) : 200000;
    REQUIRE(rounds > 0);

    uint32_t *w, *dloss, loss = 0;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMemset(w, 0, WORDS * sizeof(uint32_t)));
    for (int it = 1; it <= o.iters; it++) {
        uint32_t seed = loss ^ (uint32_t)it;
        for (long k = 0; k < rounds; k++)
            seed = fid_mix(seed + (uint32_t)k);
        CHECK(fid_step_launch(DIM3(4), DIM3(256), 0, w, WORDS, seed));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), 0, w, WORDS, dloss));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
    }
    printf("digest %016llx\n", (unsigned long long)fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t)));
    return 0;
}
