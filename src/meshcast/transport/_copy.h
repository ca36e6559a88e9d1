/* Every copy of a call's data in the compiled helpers goes through here.
 *
 * Into shared memory another process reads (one-shot regions, p2p rings): from
 * COPY_STRING_MIN bytes on x86-64, the string move (rep movsb), which glibc's memcpy
 * takes only from about 2 KiB (x86_rep_movsb_threshold). The lines of a shared region
 * sit in the reader's cache from the call before; the string move may store whole
 * lines without first fetching them back, a vector loop fetches each. Measured with
 * the one-shot broadcast, 2 ranks, one job with MPICH's Bcast, us (stop 44): 1 KiB
 * 1.08-1.10 -> 0.94-1.05, 2 KiB 1.31-1.35 -> 1.10-1.15 (MPICH 1.09-1.16); below 1 KiB
 * the string move costs more (512 B 0.78-0.89 -> 1.06-1.21 with the move from 128 or
 * 512 B). Copies out of shared memory gain nothing from it: glibc's memcpy.
 *
 * Short distances. Where the destination lies 1-15 bytes past the source modulo
 * 4 KiB, the string move slows down by an order of magnitude on AMD Zen 4 (family
 * 0x19, with FSRM), and glibc's memcpy with it, which uses the string move from a
 * few KiB to about the L2's size (glibc 2.36). Measured on that machine (stop 48,
 * /tmp/s48/vec.c), us, distance 0 / 4 / 8, string move: 32 KiB 0.57 / 9.5 / 9.5,
 * 64 KiB 1.15 / 19.2 / 18.9, 1 MiB 23 / 309 / 307, 16 MiB 900 / 5098 / 5044; a
 * 16-byte vector loop 0.58 / 0.74 / 0.74 at 32 KiB, 1.15 / 1.60 / 1.57 at 64 KiB.
 * Such a distance is an array a few elements into an aligned buffer (x[1:] of a
 * float32 torch tensor, whose allocator aligns to 64 bytes) copied out of a
 * page-aligned region: a 32 KiB one-shot all_gather into one took 24-51 us where 7-10
 * at distance 0. Those copies take the vector loop. (Distances 16-63 cost the string
 * move up to 1.4x at 64 KiB, the vector loop about as much; every array NumPy
 * allocates lies 16 bytes past a page or a 16-byte boundary, so they keep the move.)
 */
#ifndef MESHCAST_COPY_H
#define MESHCAST_COPY_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define COPY_STRING_MIN 1024

#if defined(__x86_64__)
/* Whether `to` lies 1-15 bytes past `from` modulo 4 KiB (see above). */
static inline int short_distance(const void *to, const void *from) {
    return (((uintptr_t)to - (uintptr_t)from - 1) & 4095) < 15;
}

/* The copy for a short distance: 64 bytes a step in unaligned 16-byte moves (SSE2,
 * which every x86-64 has), the tail by memcpy (below its string-move sizes). Out of
 * line and cold: the common copies' code stays as it was. */
__attribute__((noinline, cold)) static void copy_vectors(void *to, const void *from, size_t n) {
    char *d = (char *)to;
    const char *s = (const char *)from;
    for (; n >= 64; s += 64, d += 64, n -= 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_storeu_si128((__m128i *)d, a);
        _mm_storeu_si128((__m128i *)(d + 16), b);
        _mm_storeu_si128((__m128i *)(d + 32), c);
        _mm_storeu_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
}
#endif

/* A copy between buffers that do not overlap. */
static inline void copy_bytes(void *to, const void *from, size_t n) {
#if defined(__x86_64__)
    if (__builtin_expect(n >= COPY_STRING_MIN && short_distance(to, from), 0)) {
        copy_vectors(to, from, n);
        return;
    }
#endif
    memcpy(to, from, n);
}

/* A copy between buffers that may overlap (an output that may be the input, as a root's
 * piece of its own gather or scatter in place: then nothing to do). */
static inline void move_bytes(void *to, const void *from, size_t n) {
    if (to == from)
        return;
    if ((char *)to + n <= (const char *)from || (const char *)from + n <= (char *)to)
        copy_bytes(to, from, n);
    else
        memmove(to, from, n);
}

/* A copy into shared memory another process reads. */
static inline void copy_to_shared(void *to, const void *from, size_t n) {
#if defined(__x86_64__)
    if (n >= COPY_STRING_MIN && __builtin_expect(!short_distance(to, from), 1)) {
        __asm__ __volatile__("rep movsb" : "+D"(to), "+S"(from), "+c"(n) : : "memory");
        return;
    }
#endif
    copy_bytes(to, from, n);
}

/* Copies between processes: process_vm_readv (from `remote` in process `pid` into
 * `local`) and process_vm_writev (from `local` to `remote`). The kernel copies each
 * page with the string move too, so the short distances above slow it down alike:
 * 256 KiB single-copy all_gather 33 -> 106 us, scatter 25 -> 99, broadcast 21 -> 52 us
 * with the ranks' arrays 4-12 bytes past a page (stop 48). At a short distance the
 * kernel copies into (or out of) a bounce buffer laid at the remote's own distance
 * from a page, BOUNCE_BYTES at a time (it stays in L2 for the vector loop that
 * copies it on). 0 done, else an errno (EIO: the kernel copied nothing).
 * Measured in one process reading itself (stop 49, /tmp/s49/kc.c), us, distance 0 / 4
 * / bounced: 64 KiB 5.3 / 23.2 / 6.8, 256 KiB 18.6 / 90.7 / 28.0, 1 MiB 78 / 361 /
 * 125, 4 MiB 321 / 1557 / 584 (bounce buffers of 256 KiB: 6.7, 25.4, 110, 611). */
#define BOUNCE_MIN 4096
#define BOUNCE_BYTES (64 << 10)

static int kernel_copy(pid_t pid, char *local, uintptr_t remote, size_t n, int write) {
    size_t done = 0;
    while (done < n) {
        /* the kernel may copy less than asked (e.g. across many pages): go on */
        struct iovec here = {local + done, n - done};
        struct iovec theirs = {(void *)(remote + done), n - done};
        ssize_t got = write ? process_vm_writev(pid, &here, 1, &theirs, 1, 0)
                            : process_vm_readv(pid, &here, 1, &theirs, 1, 0);
        if (got <= 0)
            return got < 0 ? errno : EIO;
        done += (size_t)got;
    }
    return 0;
}

#if defined(__x86_64__)
/* Each thread keeps its bounce buffer (freed when the thread ends): a fresh one per
 * call would cost its page faults every call. */
static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;
static int bounce_ready;

static void make_bounce_key(void) {
    bounce_ready = pthread_key_create(&bounce_key, free) == 0;
}

__attribute__((noinline, cold)) static int kernel_copy_bounced(pid_t pid, char *local,
                                                               uintptr_t remote, size_t n,
                                                               int write) {
    pthread_once(&bounce_once, make_bounce_key);
    char *buffer = bounce_ready ? pthread_getspecific(bounce_key) : NULL;
    if (buffer == NULL && bounce_ready) {
        buffer = malloc(BOUNCE_BYTES + 4096);
        if (buffer != NULL && pthread_setspecific(bounce_key, buffer) != 0) {
            free(buffer);
            buffer = NULL;
        }
    }
    if (buffer == NULL)
        return kernel_copy(pid, local, remote, n, write);
    char *stage = buffer + ((remote - (uintptr_t)buffer) & 4095);
    int err = 0;
    for (size_t done = 0; done < n && !err; done += BOUNCE_BYTES) {
        size_t k = n - done < BOUNCE_BYTES ? n - done : BOUNCE_BYTES;
        if (write) {
            copy_vectors(stage, local + done, k);
            err = kernel_copy(pid, stage, remote + done, k, 1);
        } else {
            err = kernel_copy(pid, stage, remote + done, k, 0);
            if (!err)
                copy_vectors(local + done, stage, k);
        }
    }
    return err;
}
#endif

/* Copy n bytes between `local` here and `remote` in process pid (write: to remote). */
static inline int copy_across(pid_t pid, void *local, uintptr_t remote, size_t n, int write) {
#if defined(__x86_64__)
    if (__builtin_expect(n >= BOUNCE_MIN, 0)
        && short_distance(write ? (void *)remote : local, write ? local : (void *)remote))
        return kernel_copy_bounced(pid, (char *)local, remote, n, write);
#endif
    return kernel_copy(pid, (char *)local, remote, n, write);
}

#endif
