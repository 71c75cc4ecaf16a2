/*
 * A bandwidth-limited link direction: transfers booked on it are
 * serialised on one "busy until" clock, so concurrent copies share the
 * bandwidth as they would share a PCIe direction or a NIC.  Booking never
 * sleeps while holding the lock: the caller sleeps on its own time.
 */
#include "fakegpu.h"

void fg_link_init(struct fg_link *link, double gbps)
{
    pthread_mutex_init(&link->lock, NULL);
    link->bytes_per_ns = gbps > 0 ? gbps : 0; /* 1 GB/s = 1 byte/ns */
    link->busy_until_ns = 0;
}

uint64_t fg_link_book(struct fg_link *link, size_t bytes)
{
    uint64_t now = fg_now_ns(), start, end;

    if (link->bytes_per_ns <= 0)
        return now;
    pthread_mutex_lock(&link->lock);
    start = link->busy_until_ns > now ? link->busy_until_ns : now;
    end = start + (uint64_t)((double)bytes / link->bytes_per_ns);
    link->busy_until_ns = end;
    pthread_mutex_unlock(&link->lock);
    return end;
}
