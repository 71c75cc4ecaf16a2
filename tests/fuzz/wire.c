/*
 * libFuzzer target: the node agents' control channel (replica/wire.c), as
 * a receiver meets a stream from a broken or hostile peer: ckpt_wire_recv
 * over one end of a socket pair whose other end sent the input and
 * closed.  Every frame must be returned with a payload of exactly the
 * length it announced (at most CKPT_WIRE_MAX) or refused; the stream ends
 * with an error, never a crash, a hang or an unbounded allocation.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    if (size > 64 * 1024 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 0; /* larger than the socket buffer: the writer would block */
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(sv[1], data + off, size - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    close(sv[1]);
    for (int frames = 0; frames < 64; frames++) {
        uint16_t type;
        void *payload = NULL;
        size_t len = 0;
        if (ckpt_wire_recv(sv[0], 100, &type, &payload, &len) < 0)
            break;
        if (len > CKPT_WIRE_MAX || len > size || (len && !payload))
            abort();
        if (len)
            ((volatile char *)payload)[len - 1]; /* the whole payload is readable */
        free(payload);
    }
    close(sv[0]);
    return 0;
}
