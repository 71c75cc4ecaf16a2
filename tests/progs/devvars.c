/*
 * devvars: training state kept in device variables, as a CUDA program's
 * __device__ globals keep it (a step counter a kernel bumps, a table it
 * rewrites), which the host never allocated: NVIDIA's runtime finds them
 * with cuLibraryGetGlobal when it loads the module.  On the double the
 * module is a library of the double's own image format
 * (struct fakegpu_library_image), so this program runs only there.
 *
 * A restore that left the variables as the module loaded them would go on
 * from a counter of 0 and a fresh table: exit 0, a wrong digest.
 */
#include "fid.h"

#define WORDS 4096
#define TABLE 256

/* The step counter and the table move with every iteration. */
KERNEL(tick, (uint32_t *, counter), (uint32_t *, table), (uint32_t *, w), (size_t, n))
{
    if (KERNEL_INDEX == 0) {
        uint32_t c = ++*counter;
        for (size_t i = 0; i < TABLE; i++)
            table[i] = fid_mix(table[i] + c);
        for (size_t i = 0; i < n; i++)
            w[i] = fid_mix(w[i] ^ table[i % TABLE] ^ c);
    }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "devvars");

    static uint32_t table_init[TABLE];
    for (int i = 0; i < TABLE; i++)
        table_init[i] = (uint32_t)i * 2654435761u;
    const struct fakegpu_library_var vars[] = {
        {"step_count", sizeof(uint32_t), 0, NULL},
        {"table", sizeof(table_init), 0, table_init},
    };
    const struct fakegpu_library_image image = {FAKEGPU_LIBRARY_MAGIC, 2, vars};

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dloss, loss;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    /* What the runtime does when it loads the module's code. */
    CUlibrary lib;
    CUdeviceptr counter, table;
    size_t bytes;
    CHECK_CU(cuLibraryLoadData(&lib, &image, NULL, NULL, 0, NULL, NULL, 0));
    CHECK_CU(cuLibraryGetGlobal(&counter, &bytes, lib, "step_count"));
    REQUIRE(bytes == sizeof(uint32_t));
    CHECK_CU(cuLibraryGetGlobal(&table, NULL, lib, "table"));

    for (int it = 1; it <= o.iters; it++) {
        CHECK(tick_launch(DIM3(1), DIM3(1), s, (uint32_t *)counter, (uint32_t *)table, w, WORDS));
        CHECK(fid_step_launch(DIM3(8), DIM3(256), s, w, WORDS, (uint32_t)it));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
    }
    uint32_t steps;
    CHECK(cudaMemcpy(&steps, (void *)counter, sizeof(steps), cudaMemcpyDeviceToHost));
    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    h = fid_hash_device(h, (void *)table, TABLE * sizeof(uint32_t));
    printf("steps %u\ndigest %016llx\n", steps, (unsigned long long)h);
    CHECK_CU(cuLibraryUnload(lib));
    return 0;
}
