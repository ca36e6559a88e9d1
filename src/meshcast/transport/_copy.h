/* Copies into shared memory that another process reads (one-shot regions, p2p rings).
 *
 * From COPY_STRING_MIN bytes on x86-64 they use the string move (rep movsb), which
 * glibc's memcpy takes only from about 2 KiB (x86_rep_movsb_threshold). The lines of
 * a shared region sit in the reader's cache from the call before; the string move
 * may store whole lines without first fetching them back, a vector loop fetches
 * each. Measured with the one-shot broadcast, 2 ranks, one job with MPICH's Bcast,
 * us (stop 44): 1 KiB 1.08-1.10 -> 0.94-1.05, 2 KiB 1.31-1.35 -> 1.10-1.15 (MPICH
 * 1.09-1.16); below 1 KiB the string move costs more (512 B 0.78-0.89 -> 1.06-1.21
 * with the move from 128 or 512 B). Copies out of shared memory gain nothing from it.
 */
#ifndef MESHCAST_COPY_H
#define MESHCAST_COPY_H

#include <stddef.h>
#include <string.h>

#define COPY_STRING_MIN 1024

static inline void copy_to_shared(void *to, const void *from, size_t n) {
#if defined(__x86_64__)
    if (n >= COPY_STRING_MIN) {
        __asm__ __volatile__("rep movsb" : "+D"(to), "+S"(from), "+c"(n) : : "memory");
        return;
    }
#endif
    memcpy(to, from, n);
}

#endif
