/* The arena's hottest round, compiled: copy in, fingerprint, signal, spin, compare.
 *
 * A tiny collective spends its few microseconds in interpreter work, not in
 * waiting (see meshcast.lanes). This module does the mechanical middle
 * of one round of the arena protocol (transport/arena.py, whose rules it
 * follows exactly) in one C call; everything that can go wrong or must wait
 * long is handed back to Python, which owns the slow paths and the messages:
 *
 *   0  every rank reached the phase and published the same fingerprint;
 *   1  every rank reached the phase but some fingerprint differs
 *      (Python compares and raises MismatchError, or reads the counts);
 *   2  some rank has not reached the phase within the spin budget
 *      (Python waits: yield, futex, liveness, timeout, abort; then compares);
 *   3  the group's abort word is set (Python raises what it says);
 *   4  (rooted, reads) the fingerprints agree but the call cannot finish here:
 *      layouts differ, or a read lies outside what its owner exposed;
 *   5  (a program's rooted entry) a buffer the interpreter cannot take (pieces not
 *      like the rank's own array, an out not writable): nothing was staged,
 *      published or signalled (Python takes the general path with the same
 *      sequence number, which explains).
 *
 * Layout constants come from Python (Arena.layout), so this file knows no
 * offsets of its own. Memory order: the data and the fingerprint are written
 * before the signal word is stored (sequentially consistent), and the signal
 * store is ordered before reading the sleeping words (a Dekker pair with
 * Arena._wait_one, which publishes "sleeping on r" and then re-reads r's word).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "_copy.h"

#define LINE 64
#define PHASE_BITS 24

typedef struct {
    PyObject_HEAD
    char *base;         /* the mapped segment */
    Py_ssize_t n, rank;
    Py_ssize_t ranks_off, fp_off, small_off, small_bytes, fp_size;
    unsigned long long yield_ns; /* how long to yield after spinning */
    PyObject *keep;     /* an object that keeps the mapping alive */
    /* A one-sided round this rank signalled but did not wait out (see settle): its
     * seq (0: none), its packed fingerprint, the object naming the call, and what
     * Python calls to finish it when the ranks are late or disagree. */
    uint64_t pending;
    char pending_fp[LINE];
    PyObject *pending_what;
    PyObject *pending_expected; /* every rank's expected fingerprint (rooted), or NULL */
    Py_ssize_t pending_root;
    PyObject *settle_slow;
    /* Every rank's process id (the pids setter): where a program's copies from and into
     * a peer's exposed buffer go (process_vm_readv/writev). NULL until set. */
    pid_t *pids;
    /* Where a fold of exposed buffers reads its peers' chunks (exposed_fold): an
     * anonymous mapping of bounce_bytes, made on the first such fold and grown (never
     * from malloc, whose mmap threshold would move the caller's arrays; see
     * _execute.probe). A group runs one call at a time, so one suffices. */
    char *bounce;
    size_t bounce_bytes;
} Round;

static inline uint64_t *word(Round *s, Py_ssize_t r) {
    return (uint64_t *)(s->base + s->ranks_off + r * LINE);
}

static inline uint32_t *sleeping(Round *s, Py_ssize_t r) {
    return (uint32_t *)(s->base + s->ranks_off + r * LINE + 8);
}

/* How far rank r has staged its one-shot region (see pipelined copies below): the low
 * 32 bits of the call's seq, then the bytes staged, in the u64 at +16 of its line. */
static inline uint64_t *progress(Round *s, Py_ssize_t r) {
    return (uint64_t *)(s->base + s->ranks_off + r * LINE + 16);
}

static inline char *fingerprint(Round *s, Py_ssize_t r, int parity) {
    return s->base + s->fp_off + parity * LINE + r * 2 * LINE;
}

static inline char *region(Round *s, Py_ssize_t r, int parity) {
    return s->base + s->small_off + (r * 2 + parity) * s->small_bytes;
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Whether every rank's word reached target: spinning for spin_ns, then yielding the
 * core for yield_ns (Python's waiting primitive has the same two stages before it
 * blocks; doing them here saves its per-check interpreter work, which matters most
 * when ranks share cores and every check follows a context switch). */
static int arrived_from(Round *s, Py_ssize_t lo, Py_ssize_t hi, uint64_t target,
                        uint64_t spin_ns, uint64_t yield_ns) {
    uint64_t start = 0;
    int yielding = 0;
    for (Py_ssize_t r = lo; r < hi; r++) {
        unsigned k = 0;
        while (__atomic_load_n(word(s, r), __ATOMIC_ACQUIRE) < target) {
            if (start == 0)
                start = now_ns();
            if (yielding || spin_ns == 0 || (++k & 63) == 0) {
                uint64_t t = now_ns();
                if (t >= start + spin_ns + yield_ns)
                    return 0;
                if (__atomic_load_n((uint32_t *)s->base, __ATOMIC_RELAXED))
                    return 0; /* aborted: Python's wait notices and raises */
                yielding = t >= start + spin_ns;
            }
            if (yielding)
                sched_yield();
            else
                relax();
        }
    }
    return 1;
}

static int arrived(Round *s, uint64_t target, uint64_t spin_ns, uint64_t yield_ns) {
    return arrived_from(s, 0, s->n, target, spin_ns, yield_ns);
}

static int Round_init(Round *self, PyObject *args, PyObject *kwds) {
    unsigned long long base;
    PyObject *keep;
    if (!PyArg_ParseTuple(args, "KnnnnnnnKO", &base, &self->n, &self->rank, &self->ranks_off,
                          &self->fp_off, &self->small_off, &self->small_bytes, &self->fp_size,
                          &self->yield_ns, &keep))
        return -1;
    if (self->n < 1 || self->rank < 0 || self->rank >= self->n || self->fp_size > LINE) {
        PyErr_SetString(PyExc_ValueError, "bad arena layout");
        return -1;
    }
    self->base = (char *)(uintptr_t)base;
    Py_INCREF(keep);
    Py_XSETREF(self->keep, keep);
    return 0;
}

/* A GC container: a pending round's what names its call through the group, which
 * holds the arena, which holds this object. */
static int Round_traverse(Round *self, visitproc visit, void *arg) {
    Py_VISIT(self->keep);
    Py_VISIT(self->pending_what);
    Py_VISIT(self->pending_expected);
    Py_VISIT(self->settle_slow);
    return 0;
}

static int Round_clear(Round *self) {
    self->pending = 0; /* nothing left to settle it with */
    Py_CLEAR(self->pending_what);
    Py_CLEAR(self->pending_expected);
    Py_CLEAR(self->settle_slow);
    return 0;
}

static void Round_dealloc(Round *self) {
    PyObject_GC_UnTrack(self);
    Round_clear(self);
    PyMem_Free(self->pids);
    if (self->bounce != NULL)
        munmap(self->bounce, self->bounce_bytes);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Store this rank's signal word (after everything it publishes: seq_cst), then wake
 * whoever sleeps on it (the Dekker pair with Arena._wait_one, see the top). */
static void signal_phase(Round *self, uint64_t target) {
    __atomic_store_n(word(self, self->rank), target, __ATOMIC_SEQ_CST);
    for (Py_ssize_t r = 0; r < self->n; r++) {
        if (__atomic_load_n(sleeping(self, r), __ATOMIC_SEQ_CST) == (uint32_t)(self->rank + 1)) {
            syscall(SYS_futex, (uint32_t *)word(self, self->rank), FUTEX_WAKE, INT32_MAX, NULL,
                    NULL, 0);
            break;
        }
    }
}

static PyObject *dtype_name; /* "dtype" */

/* Whether view looks like like: exported by objects of the same type (a view's obj is
 * its exporter), of the same size and shape, and with an equal dtype attribute (the
 * same object as like_dtype, as NumPy's built-in dtypes are: asking NumPy's buffers
 * for their format instead cost 0.08 us a piece). 0 with no exception otherwise. */
static int looks_like(const Py_buffer *view, const Py_buffer *like, PyObject *like_dtype) {
    if (Py_TYPE(view->obj) != Py_TYPE(like->obj) || view->len != like->len
        || view->itemsize != like->itemsize || view->ndim != like->ndim)
        return 0;
    for (int d = 0; d < like->ndim; d++)
        if (view->shape[d] != like->shape[d])
            return 0;
    PyObject *dtype = PyObject_GetAttr(view->obj, dtype_name);
    int same = dtype == like_dtype;
    if (!same && dtype != NULL)
        same = PyObject_RichCompareBool(dtype, like_dtype, Py_EQ) == 1;
    Py_XDECREF(dtype);
    PyErr_Clear();
    return same;
}

#define STAGE_HELD 8 /* views held on the stack; more come from PyMem_Malloc */

/* ------------------------------------------------------------ pipelined copies
 *
 * A large one-shot copy is two copies one after the other: the owner's into its
 * region, then each reader's out of it. Staging at least PIPE_MIN bytes, the owner
 * publishes its progress every PIPE_CHUNK bytes (progress(): the call's seq and the
 * bytes staged, stored after them), and a reader that awaits only the owner (a
 * broadcast's or scatter's other ranks, see pipe_copy) copies each chunk as it comes,
 * before the owner's signal: the two copies overlap. The signal still follows the
 * whole staging, so a reader that does not look at the progress (Python's paths)
 * meets the same region as before; a reader copies only chunks of its own call's seq,
 * and whatever the round then says (a late rank, a differing fingerprint) is handled
 * as before, the copy into out being redone or the call raising.
 *
 * A loop of calls gains nothing (a one-sided root stages the next call while the others
 * copy this one); a call the ranks enter together does. Broadcast, 2 ranks, each call
 * after a tiny all_reduce, the reader's median, us, whole copies -> chunks of 16 KiB:
 * 64 KiB 10.8-11.6 -> 8.3-8.7, 128 KiB 20.6-22.0 -> 13.8-14.8, 256 KiB 25.7-31.2 ->
 * 16.1-16.5, 512 KiB 55-58 -> 30-35 (MPICH's Bcast: 4.4, 6.4, 11.8, 17.5). Chunks of
 * 4 / 8 / 16 / 32 KiB: 64 KiB 9.2 / 8.5 / 8.3 / 8.5, 128 KiB 16.4 / 15.1 / 13.8 / 13.8,
 * 256 KiB 17.9 / 16.7 / 16.5 / 16.1. */
#define PIPE_MIN (32 << 10)
#define PIPE_CHUNK (16 << 10)

static inline void publish_progress(Round *s, uint64_t seq, Py_ssize_t staged) {
    __atomic_store_n(progress(s, s->rank), ((seq & 0xffffffffu) << 32) | (uint64_t)staged,
                     __ATOMIC_RELEASE);
}

/* A wait's pause between looks, as arrived_from paces its own: spinning for spin_ns,
 * then yielding the core for yield_ns. 0 when the wait should stop looking (its time is
 * up, or the group was aborted: the round that follows notices). */
typedef struct {
    uint64_t start;
    unsigned k;
    int yielding;
} Pace;

static int pause_or_stop(Round *s, Pace *p, uint64_t spin_ns, uint64_t yield_ns) {
    if (p->start == 0)
        p->start = now_ns();
    if (p->yielding || spin_ns == 0 || (++p->k & 63) == 0) {
        uint64_t t = now_ns();
        if (t >= p->start + spin_ns + yield_ns)
            return 0;
        if (__atomic_load_n((uint32_t *)s->base, __ATOMIC_RELAXED))
            return 0;
        p->yielding = t >= p->start + spin_ns;
    }
    if (p->yielding)
        sched_yield();
    else
        relax();
    return 1;
}

/* Copy rank r's region of parity [off, off + len) into to as r stages it (its progress
 * in call seq), until all is copied, r signalled target (the round then copies the
 * rest), the group is aborted, or spin_ns + yield_ns passed, spinning then yielding as
 * arrived_from does. The bytes copied. Called without the GIL. */
static Py_ssize_t pipe_copy(Round *s, Py_ssize_t r, int parity, uint64_t seq,
                            uint64_t target, Py_ssize_t off, char *to, Py_ssize_t len,
                            uint64_t spin_ns, uint64_t yield_ns) {
    const char *from = region(s, r, parity) + off;
    uint64_t want = seq & 0xffffffffu;
    Py_ssize_t copied = 0;
    Pace pace = {0, 0, 0};
    int signalled = 0;
    while (copied < len) {
        uint64_t p = __atomic_load_n(progress(s, r), __ATOMIC_ACQUIRE);
        Py_ssize_t staged = (p >> 32) == want ? (Py_ssize_t)(p & 0xffffffffu) - off : 0;
        if (staged > len)
            staged = len;
        if (staged > copied) {
            copy_bytes(to + copied, from + copied, (size_t)(staged - copied));
            copied = staged;
            continue;
        }
        if (signalled)
            break; /* its last progress was seen after its signal: the round copies */
        if (__atomic_load_n(word(s, r), __ATOMIC_ACQUIRE) >= target) {
            signalled = 1; /* (its progress came before: one more look) */
            continue;
        }
        if (!pause_or_stop(s, &pace, spin_ns, yield_ns))
            break;
    }
    return copied;
}

/* Copy data (None, a C-contiguous buffer, or a tuple or list of them, one after the
 * other, where an int skips that many bytes) into region; -1 with an exception if it
 * does not fit (checked before any copy). */
static int stage(Round *self, uint64_t seq, char *to, PyObject *data) {
    if (data == Py_None)
        return 0;
    int many = PyTuple_Check(data) || PyList_Check(data);
    Py_ssize_t k = many ? PySequence_Fast_GET_SIZE(data) : 1, held = 0, total = 0;
    Py_buffer stack[STAGE_HELD], *views = stack;
    if (k > STAGE_HELD && (views = PyMem_Malloc(sizeof(Py_buffer) * (size_t)k)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int result = 0;
    for (Py_ssize_t i = 0; i < k && result == 0; i++) { /* every buffer and size first */
        PyObject *item = many ? PySequence_Fast_GET_ITEM(data, i) : data;
        if (PyLong_Check(item)) {
            Py_ssize_t skip = PyLong_AsSsize_t(item);
            if (skip < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "a negative skip in data");
                result = -1;
                break;
            }
            views[i].obj = NULL; /* a skip: no buffer held */
            views[i].len = skip;
        } else if (PyObject_GetBuffer(item, &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            result = -1;
            break;
        }
        held = i + 1;
        total += views[i].len;
    }
    if (result == 0 && total > self->small_bytes) {
        PyErr_SetString(PyExc_ValueError, "data larger than a one-shot region");
        result = -1;
    }
    Py_ssize_t at = 0;
    int pipe = result == 0 && total >= PIPE_MIN;
    for (Py_ssize_t i = 0; i < held; i++) { /* then the copies, or nothing */
        if (result == 0 && views[i].obj != NULL) {
            if (!pipe) {
                copy_to_shared(to + at, views[i].buf, (size_t)views[i].len);
            } else {
                for (Py_ssize_t done = 0; done < views[i].len; done += PIPE_CHUNK) {
                    Py_ssize_t len = views[i].len - done;
                    len = len < PIPE_CHUNK ? len : PIPE_CHUNK;
                    copy_to_shared(to + at + done, (char *)views[i].buf + done, (size_t)len);
                    publish_progress(self, seq, at + done + len);
                }
            }
        } else if (pipe && result == 0) {
            publish_progress(self, seq, at + views[i].len);  /* a skip */
        }
        at += views[i].len;
        if (views[i].obj != NULL)
            PyBuffer_Release(&views[i]);
    }
    if (views != stack)
        PyMem_Free(views);
    return result;
}

/* ------------------------------------------------------------ one-sided rounds
 *
 * A broadcast's or scatter's root needs nothing from the other ranks, nor does a
 * reduce's non-root: as MPI's eager protocol does, such a rank signals and returns (a
 * one-sided round, awaiting no rank or only the root), and finishes the round at
 * the start of its next call on the group instead: settle waits until every rank
 * entered the call (so every rank finished the call before it, whose regions of
 * the other parity the next call overwrites: Rule 2 of arena.py holds as if the
 * round had been waited out), then compares every rank's fingerprint with mine.
 * Entered, not reached the round's phase: a rank that took another path finds the
 * mismatch at its own entry and never gets there. Anything slower or wrong (late
 * ranks, a differing fingerprint, an abort) goes to Python's
 * settle_slow(seq, packed, what, tails, root) (Arena.settle_rest), which waits
 * with liveness and deadline and raises what the round would have raised, naming
 * the call it belongs to. Python's paths call Round.settle before they touch the
 * arena (Arena.settle). Who runs one: a program's one-sided ENTER (broadcast, reduce
 * and scatter, see Round.program).
 */
typedef struct {
    Py_ssize_t awaited; /* the one rank this rank waits for, or -1: none */
    PyObject *what;     /* names the call, for settle_slow */
    Py_ssize_t root;    /* the call's root (rooted calls: Python's compare reads its layout) */
    char *pipe_to;      /* where to copy the awaited rank's region [pipe_off, + pipe_len)
                         * as it is staged (NULL: after the round; see pipe_copy) */
    Py_ssize_t pipe_off, pipe_len;
    int piped;          /* set when that copy was whole before the signal */
} OneSided;

/* Whether rank r's fingerprint of parity is what it should be: packed, or with
 * expected (a tuple of every rank's, for gather and scatter, whose root's differs)
 * expected[r], whole or a tail after packed's seq. */
static int fp_agrees(Round *self, Py_ssize_t r, int parity, const char *packed,
                     PyObject *expected) {
    Py_ssize_t packed_len = self->fp_size;
    const char *want = packed, *fp = fingerprint(self, r, parity);
    if (expected != NULL) {
        PyObject *e = PyTuple_GET_ITEM(expected, r);
        Py_ssize_t len = PyBytes_Check(e) ? PyBytes_GET_SIZE(e) : -1;
        if (len == packed_len - 8)
            return memcmp(fp, packed, 8) == 0
                   && memcmp(fp + 8, PyBytes_AS_STRING(e), (size_t)len) == 0;
        if (len != packed_len)
            return 0; /* Python compares and explains */
        want = PyBytes_AS_STRING(e);
    }
    return memcmp(fp, want, (size_t)packed_len) == 0;
}

/* 0 once the pending round (if any) is settled; -1 with the exception of
 * settle_slow. Clears pending either way. */
static int settle(Round *self, uint64_t spin_ns) {
    uint64_t seq = self->pending, target = seq << PHASE_BITS;
    if (seq == 0)
        return 0;
    int parity = (int)(seq & 1), ok;
    Py_BEGIN_ALLOW_THREADS
    ok = arrived(self, target, spin_ns, self->yield_ns);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t r = 0; ok && r < self->n; r++)
        ok = fp_agrees(self, r, parity, self->pending_fp, self->pending_expected);
    PyObject *what = self->pending_what, *expected = self->pending_expected;
    self->pending = 0;
    self->pending_what = self->pending_expected = NULL;
    PyObject *res = NULL;
    if (ok) {
        res = Py_None;
        Py_INCREF(res);
    } else if (self->settle_slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a one-sided round without settle_slow");
    } else {
        res = PyObject_CallFunction(self->settle_slow, "Ky#OOn", (unsigned long long)seq,
                                    self->pending_fp, self->fp_size,
                                    what != NULL ? what : Py_None,
                                    expected != NULL ? expected : Py_None, self->pending_root);
    }
    Py_XDECREF(what);
    Py_XDECREF(expected);
    if (res == NULL)
        return -1;
    Py_DECREF(res);
    return 0;
}

/* settle(spin_ns) -> None: finish the pending one-sided round, if any (see above). */
static PyObject *Round_settle(Round *self, PyObject *arg) {
    unsigned long long spin_ns = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred() || settle(self, spin_ns) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Round_get_pending(Round *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->pending != 0);
}

static int Round_set_settle_slow(Round *self, PyObject *value, void *closure) {
    (void)closure;
    if (value != NULL && value != Py_None && !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "settle_slow: a callable or None");
        return -1;
    }
    Py_XINCREF(value == Py_None ? NULL : value);
    Py_XSETREF(self->settle_slow, value == Py_None ? NULL : value);
    return 0;
}

static int Round_set_pids(Round *self, PyObject *value, void *closure) {
    (void)closure;
    if (value == NULL || !PyTuple_Check(value) || PyTuple_GET_SIZE(value) != self->n) {
        PyErr_SetString(PyExc_ValueError, "pids: a tuple of one process id per rank");
        return -1;
    }
    pid_t *pids = PyMem_Malloc(sizeof(pid_t) * (size_t)self->n);
    if (pids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t r = 0; r < self->n; r++) {
        pids[r] = (pid_t)PyLong_AsLong(PyTuple_GET_ITEM(value, r));
        if (pids[r] == -1 && PyErr_Occurred()) {
            PyMem_Free(pids);
            return -1;
        }
    }
    PyMem_Free(self->pids);
    self->pids = pids;
    return 0;
}

/* A reader's copies of several ranks' regions as they are staged (a gather root's, see
 * pipelined copies): rank peer's region [off, off + len) into to, copied bytes of it so
 * far (the round then copies the rest); record: the program's GET this is. */
typedef struct {
    Py_ssize_t peer, off, len, copied, record;
    char *to;
} PipedGet;

typedef struct {
    PipedGet *gets;
    Py_ssize_t k;
} EachPipe;

/* pipe_copy for several ranks at once (a gather root): until every get is copied, every
 * rank with bytes left has signalled target, the group is aborted, or spin_ns +
 * yield_ns passed. Called without the GIL. */
static void pipe_copy_each(Round *s, int parity, uint64_t seq, uint64_t target, EachPipe *e,
                           uint64_t spin_ns, uint64_t yield_ns) {
    uint64_t want = seq & 0xffffffffu;
    Pace pace = {0, 0, 0};
    for (;;) {
        int moved = 0, left = 0, waiting = 0;
        for (Py_ssize_t i = 0; i < e->k; i++) {
            PipedGet *g = &e->gets[i];
            if (g->copied >= g->len)
                continue;
            left = 1;
            uint64_t p = __atomic_load_n(progress(s, g->peer), __ATOMIC_ACQUIRE);
            Py_ssize_t staged = (p >> 32) == want ? (Py_ssize_t)(p & 0xffffffffu) - g->off : 0;
            if (staged > g->len)
                staged = g->len;
            if (staged > g->copied) {
                copy_bytes(g->to + g->copied, region(s, g->peer, parity) + g->off + g->copied,
                           (size_t)(staged - g->copied));
                g->copied = staged;
                moved = 1;
            } else if (__atomic_load_n(word(s, g->peer), __ATOMIC_ACQUIRE) < target) {
                waiting = 1; /* (signalled: its progress came before; the round copies) */
            }
        }
        if (!left || (!moved && !waiting))
            return;
        if (!moved && !pause_or_stop(s, &pace, spin_ns, yield_ns))
            return;
    }
}

/* One round: stage data (see stage) into this rank's one-shot
 * region of parity seq & 1, publish packed (fp_size bytes), signal phase, wait
 * for every rank's signal, compare. Returns the status (see the top of the file),
 * or -1 with an exception set. expected: NULL, or a tuple of every rank's
 * expected fingerprint (gather and scatter, whose root's differs); without it
 * every rank's must equal packed. */
static int round_core(Round *self, uint64_t seq, long phase, const char *packed, PyObject *data,
                      uint64_t spin_ns, PyObject *expected, const uint64_t *exposure,
                      OneSided *one, EachPipe *each) {
    Py_ssize_t packed_len = self->fp_size;
    if (self->pending && settle(self, spin_ns) < 0)
        return -1;
    if (__atomic_load_n((uint32_t *)self->base, __ATOMIC_ACQUIRE))
        return 3;
    int parity = (int)(seq & 1);
    if (stage(self, seq, region(self, self->rank, parity), data) < 0)
        return -1;
    memcpy(fingerprint(self, self->rank, parity), packed, (size_t)packed_len);
    if (exposure != NULL) /* Arena.expose's three words, in the line's unused tail */
        memcpy(fingerprint(self, self->rank, parity) + packed_len, exposure, 24);
    uint64_t target = (seq << PHASE_BITS) | (uint64_t)phase;
    signal_phase(self, target);
    int ok;
    if (one != NULL && self->n > 1) { /* wait for the one rank awaited, if any */
        Py_ssize_t a = one->awaited;
        if (a >= 0) {
            Py_BEGIN_ALLOW_THREADS
            if (one->pipe_to != NULL)
                one->piped = pipe_copy(self, a, parity, seq, target, one->pipe_off, one->pipe_to,
                                       one->pipe_len, spin_ns, self->yield_ns) == one->pipe_len;
            ok = arrived_from(self, a, a + 1, target, spin_ns, self->yield_ns);
            Py_END_ALLOW_THREADS
            /* Late or different: Python waits for every rank (the round is then
             * whole), then compares every fingerprint */
            if (!ok || !fp_agrees(self, a, parity, packed, expected))
                return 2;
            if (self->n == 2)
                return 0; /* the one other rank was awaited: nothing left to settle */
        }
        self->pending = seq;
        memcpy(self->pending_fp, packed, (size_t)packed_len);
        Py_XINCREF(one->what);
        Py_XSETREF(self->pending_what, one->what);
        Py_XINCREF(expected);
        Py_XSETREF(self->pending_expected, expected);
        self->pending_root = one->root;
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    if (each != NULL)
        pipe_copy_each(self, parity, seq, target, each, spin_ns, self->yield_ns);
    ok = arrived(self, target, spin_ns, self->yield_ns);
    Py_END_ALLOW_THREADS
    if (!ok)
        return 2;
    for (Py_ssize_t r = 0; r < self->n; r++)
        if (!fp_agrees(self, r, parity, packed, expected))
            return 1;
    return 0;
}

/* run(seq, phase, packed, data, spin_ns[, expected]) -> status: round_core. */
static PyObject *Round_run(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "run(seq, phase, packed, data, spin_ns[, expected])");
        return NULL;
    }
    PyObject *expected = nargs == 6 ? args[5] : NULL;
    if (expected != NULL && (!PyTuple_Check(expected) || PyTuple_GET_SIZE(expected) != self->n)) {
        PyErr_SetString(PyExc_ValueError, "expected: a tuple of one fingerprint per rank");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    long phase = PyLong_AsLong(args[1]);
    unsigned long long spin_ns = PyLong_AsUnsignedLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    char *packed;
    Py_ssize_t packed_len;
    if (PyBytes_AsStringAndSize(args[2], &packed, &packed_len) < 0)
        return NULL;
    if (packed_len != self->fp_size) {
        PyErr_SetString(PyExc_ValueError, "packed fingerprint of the wrong size");
        return NULL;
    }
    int status = round_core(self, seq, phase, packed, args[3], spin_ns, expected, NULL, NULL,
                            NULL);
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* seq (little-endian u64, the fingerprint's first field) followed by tail, into
 * packed (fp_size bytes); -1 with an exception if tail has the wrong size. */
static int pack(Round *self, uint64_t seq, PyObject *tail, char *packed) {
    char *bytes;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(tail, &bytes, &len) < 0)
        return -1;
    if (len + 8 != self->fp_size) {
        PyErr_SetString(PyExc_ValueError, "fingerprint tail of the wrong size");
        return -1;
    }
    for (int i = 0; i < 8; i++)
        packed[i] = (char)(seq >> (8 * i));
    memcpy(packed + 8, bytes, (size_t)len);
    return 0;
}

/* oneshot(seq, tail, data, spin_ns) -> status
 *
 * run(seq, 1, packed, data, spin_ns) where packed is seq (little-endian u64, the
 * fingerprint's first field) followed by tail: the round of a one-shot call that runs
 * no program (no compiled fold for its op, or a list of pieces the lane stages), whose
 * caller then reads the regions of parity seq & 1 itself. On any other status than 0,
 * Python finishes the round (Arena.oneshot_rest).
 */
static PyObject *Round_oneshot(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "oneshot(seq, tail, data, spin_ns)");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long spin_ns = PyLong_AsUnsignedLongLong(args[3]);
    char packed[LINE];
    if (PyErr_Occurred() || pack(self, seq, args[1], packed) < 0)
        return NULL;
    int status = round_core(self, seq, 1, packed, args[2], spin_ns, NULL, NULL, NULL, NULL);
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* The exposure's meta word of a table of pieces (paths/single_copy.py's PIECE_TABLE): its
 * address is then an offset in the owner's one-shot region of the call's parity, where
 * each piece's address and bytes lie (two uint64 an entry). */
#define PIECE_TABLE 2
/* A bit of the meta word: this root moves a part of every other rank's piece itself
 * (paths/single_copy.py's SPLIT: a root with no piece of its own to copy), and the other
 * ranks run the programs that leave those parts to it (Python picks them). */
#define SPLIT 4

/* Writes the table of pieces (paths/single_copy.py's piece_table) of a list of
 * C-contiguous buffers at to: each one's address and bytes (two uint64), 16 bytes a
 * piece. -1 with an exception if one is not such a buffer. */
static int write_piece_table(PyObject *pieces, char *to) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pieces); i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PyList_GET_ITEM(pieces, i), &view, PyBUF_C_CONTIGUOUS) < 0)
            return -1;
        uint64_t entry[2] = {view.len ? (uint64_t)(uintptr_t)view.buf : 0, (uint64_t)view.len};
        memcpy(to + i * 16, entry, 16);
        PyBuffer_Release(&view);
    }
    return 0;
}

/* The table of pieces of a list (write_piece_table), as bytes to stage at the start of
 * my one-shot region; NULL with an exception if a piece is not a buffer or the table
 * does not fit the region. The caller keeps the buffers alive for the call. */
static PyObject *piece_table(Round *self, PyObject *pieces) {
    Py_ssize_t k = PyList_GET_SIZE(pieces);
    if (k * 16 > self->small_bytes) {
        PyErr_SetString(PyExc_ValueError, "exposure: a table of pieces larger than a region");
        return NULL;
    }
    PyObject *table = PyBytes_FromStringAndSize(NULL, k * 16);
    if (table != NULL && write_piece_table(pieces, PyBytes_AS_STRING(table)) < 0)
        Py_CLEAR(table);
    return table;
}

/* Arena.expose's three words (address, bytes, meta 0) of exposure: None (nothing: 0
 * and exposure untouched), (address, nbytes), or a C-contiguous buffer whose memory
 * that is. 1 when exposing, -1 with an exception. */
static int exposure_words(PyObject *exposure, uint64_t words[3]) {
    if (exposure == Py_None)
        return 0;
    words[2] = 0;
    if (PyTuple_Check(exposure)) {
        if (PyTuple_GET_SIZE(exposure) != 2) {
            PyErr_SetString(PyExc_ValueError, "exposure: (address, nbytes) or a buffer");
            return -1;
        }
        words[0] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(exposure, 0));
        words[1] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(exposure, 1));
        return PyErr_Occurred() ? -1 : 1;
    }
    /* a C-contiguous buffer: its address here costs a twentieth of what Python's
     * arr.ctypes.data costs */
    Py_buffer view;
    if (PyObject_GetBuffer(exposure, &view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    words[0] = (uint64_t)(uintptr_t)view.buf;
    words[1] = (uint64_t)view.len;
    PyBuffer_Release(&view);
    return 1;
}

/* rooted(seq, tails, data, spin_ns, exposure[, same]) -> status
 *
 * The general path's entry (phase 0) as the single-copy gather, scatter and all_to_all
 * and the uneven all_to_all enter: every rank r must have published seq followed by
 * tails[r] (a root's tail differs: it names its pieces), with data staged (a buffer or
 * a tuple or list of them, one after the other; an int skips bytes) and exposure,
 * None, (address, nbytes) or a C-contiguous buffer whose memory that is, written as
 * Arena.expose does, or (pieces, bits), pieces a list of C-contiguous buffers (with
 * data None): their table staged, and exposed with the word PIECE_TABLE | bits. same >
 * 0: the first same bytes of every rank's region must equal mine too (all_to_all's
 * split header), else status 4. Any other status but 0: Python finishes the entry
 * (Arena.rooted_entry, Arena.finish_entry) and the call. (The one-shot gather, scatter
 * and all_to_all are programs: see Round.program's rooted entry.)
 */
static PyObject *Round_rooted(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "rooted(seq, tails, data, spin_ns, exposure[, same])");
        return NULL;
    }
    Py_ssize_t same = nargs >= 6 ? PyLong_AsSsize_t(args[5]) : 0;
    if (same < 0 || same > self->small_bytes) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "same: bytes of a one-shot region");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long spin_ns = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *tails = args[1];
    if (!PyTuple_Check(tails) || PyTuple_GET_SIZE(tails) != self->n) {
        PyErr_SetString(PyExc_ValueError, "tails: a tuple of one fingerprint tail per rank");
        return NULL;
    }
    char packed[LINE];
    if (pack(self, seq, PyTuple_GET_ITEM(tails, self->rank), packed) < 0)
        return NULL;
    uint64_t exposure[3] = {0, 0, 0};
    int exposing = args[4] != Py_None;
    PyObject *data = args[2], *table = NULL;
    if (exposing && PyTuple_Check(args[4]) && PyTuple_GET_SIZE(args[4]) == 2
            && PyList_Check(PyTuple_GET_ITEM(args[4], 0))) {
        /* (pieces, bits): a list of buffers apart in memory (a gather or scatter root's
         * pieces): their table (see exposed_at) is staged in my region, where nothing else
         * is, and exposed with the word PIECE_TABLE | bits (SPLIT) */
        uint64_t bits = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(args[4], 1));
        if (PyErr_Occurred())
            return NULL;
        if (data != Py_None || (bits & ~(uint64_t)SPLIT)) {
            PyErr_SetString(PyExc_ValueError, "a table of pieces: no data, bits SPLIT or 0");
            return NULL;
        }
        if ((table = piece_table(self, PyTuple_GET_ITEM(args[4], 0))) == NULL)
            return NULL;
        data = table;
        exposure[1] = (uint64_t)PyBytes_GET_SIZE(table);
        exposure[2] = PIECE_TABLE | bits;
    } else if (exposure_words(args[4], exposure) < 0) {
        return NULL;
    }
    int status = round_core(self, seq, 0, packed, data, spin_ns, tails,
                            exposing ? exposure : NULL, NULL, NULL);
    Py_XDECREF(table);
    int parity = (int)(seq & 1);
    for (Py_ssize_t r = 0; status == 0 && same > 0 && r < self->n; r++)
        if (memcmp(region(self, r, parity), region(self, self->rank, parity), (size_t)same))
            status = 4; /* every fingerprint agrees, some region's layout differs */
    return status < 0 ? NULL : PyLong_FromLong(status);
}

/* ------------------------------------------------------------ single copy
 *
 * The single-copy collectives (paths/single_copy.py's SingleCopy) read every piece they need
 * straight from the buffer its owner exposed (Arena.expose: address, bytes and a
 * word, in the tail of the owner's fingerprint line), with process_vm_readv; then
 * every rank signals that it is done reading, and nobody returns before everyone
 * is. Python's version of the same reads is the fallback and the reference.
 */
static void exposed(Round *s, Py_ssize_t r, int parity, uint64_t *address, uint64_t *nbytes) {
    const char *at = fingerprint(s, r, parity) + s->fp_size;
    memcpy(address, at, 8);
    memcpy(nbytes, at + 8, 8);
}

/* The meta word rank r exposed with its buffer. */
static uint64_t exposed_meta(Round *s, Py_ssize_t r, int parity) {
    uint64_t meta;
    memcpy(&meta, fingerprint(s, r, parity) + s->fp_size + 16, 8);
    return meta;
}

/* One read of a reads list, resolved before any byte moves. */
typedef struct {
    Py_ssize_t q;      /* the other side: a rank, or this rank (mine) */
    char *local;       /* in dest */
    uint64_t remote;   /* the address on q's side (in mine when q is this rank) */
    Py_ssize_t length;
} Read;

/* Where bytes [offset, offset + length) of rank q's exposure lie: at offset of the
 * buffer it exposed. A rank that exposed a table of pieces (meta PIECE_TABLE: a list of
 * buffers apart in memory, a gather or scatter root's) exposed them as if laid end to
 * end: offset is walked through their lengths, and the bytes must lie in one piece (as
 * a program's copies do, each cut at the pieces' edges). 1 with *from set, 0 if not
 * there. */
static int exposed_at(Round *s, Py_ssize_t q, int parity, Py_ssize_t offset, Py_ssize_t length,
                      uint64_t *from) {
    if (offset >= 0) {
        uint64_t address, nbytes;
        exposed(s, q, parity, &address, &nbytes);
        if ((exposed_meta(s, q, parity) & ~(uint64_t)SPLIT) == PIECE_TABLE) {
            if (address > (uint64_t)s->small_bytes || nbytes > (uint64_t)s->small_bytes - address)
                return 0;
            const char *table = region(s, q, parity) + address;
            uint64_t left = (uint64_t)offset;
            for (uint64_t e = 0; e + 16 <= nbytes; e += 16) {
                uint64_t at, held;
                memcpy(&at, table + e, 8);
                memcpy(&held, table + e + 8, 8);
                if (left < held || (left == held && length == 0)) {
                    if ((uint64_t)length > held - left)
                        return 0;
                    *from = at + left;
                    return 1;
                }
                left -= held;
            }
            *from = 0; /* (nothing to copy at the end of the last piece) */
            return length == 0 && left == 0;
        }
        if ((uint64_t)offset + (uint64_t)length > nbytes)
            return 0;
        *from = address + (uint64_t)offset;
        return 1;
    }
    return 0;
}

/* reads(seq, pids, dest, mine, reads, phase, spin_ns) -> status
 *
 * dest: a C-contiguous buffer. reads: a tuple of (q, offset, length, at): copy length
 * bytes at byte offset of rank q's exposed buffer into dest[at:at + length] (q this
 * rank: the same from the buffer mine, a memmove); an uneven all_to_all's pieces, whose
 * offsets only its entry tells. Then signal phase and wait for everyone's, as run()
 * does. Status: 0 done; 2 done but someone is not there yet (Python waits); 3 the group
 * was aborted (nothing read); 4 a copy lies outside what its owner exposed or outside
 * its buffer here (nothing copied: Python's reads explain the disagreement). A failed
 * process_vm_readv raises OSError, as cma.read does.
 */
static PyObject *Round_reads(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "reads(seq, pids, dest, mine, reads, phase, spin_ns)");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    long phase = PyLong_AsLong(args[5]);
    unsigned long long spin_ns = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *pids = args[1], *list = args[4];
    if (!PyTuple_Check(pids) || PyTuple_GET_SIZE(pids) != self->n || !PyTuple_Check(list)) {
        PyErr_SetString(PyExc_ValueError, "pids: a tuple of one pid per rank; reads: a tuple");
        return NULL;
    }
    if (__atomic_load_n((uint32_t *)self->base, __ATOMIC_ACQUIRE))
        return PyLong_FromLong(3);
    Py_ssize_t count = PyTuple_GET_SIZE(list);
    Py_buffer mine = {0}, dest = {0};
    Read *todo = PyMem_Malloc(sizeof(Read) * (size_t)(count ? count : 1));
    pid_t *pid = PyMem_Malloc(sizeof(pid_t) * (size_t)self->n);
    int status = 0, parity = (int)(seq & 1);
    PyObject *result = NULL;
    if (todo == NULL || pid == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    if (PyObject_GetBuffer(args[2], &dest, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        goto fail;
    if (PyObject_GetBuffer(args[3], &mine, PyBUF_C_CONTIGUOUS) < 0)
        goto fail;
    for (Py_ssize_t r = 0; r < self->n; r++) {
        pid[r] = (pid_t)PyLong_AsLong(PyTuple_GET_ITEM(pids, r));
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *t = PyTuple_GET_ITEM(list, i);
        Read *rd = &todo[i];
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
            PyErr_SetString(PyExc_ValueError, "a read is (q, offset, length, at)");
            goto fail;
        }
        rd->q = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 0));
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        rd->length = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
        if (PyErr_Occurred())
            goto fail;
        if (rd->q < 0 || rd->q >= self->n) {
            PyErr_SetString(PyExc_ValueError, "a read names no rank");
            goto fail;
        }
        int there;
        if (rd->q == self->rank) {
            there = offset >= 0 && offset + rd->length <= mine.len;
            rd->remote = (uint64_t)(uintptr_t)mine.buf + (uint64_t)offset;
        } else {
            there = exposed_at(self, rd->q, parity, offset, rd->length, &rd->remote);
        }
        if (!there || rd->length < 0 || at < 0 || at + rd->length > dest.len) {
            status = 4;
            goto done;
        }
        rd->local = (char *)dest.buf + at;
    }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !err; i++) {
        Read *rd = &todo[i];
        char *remote = (char *)(uintptr_t)rd->remote;
        if (rd->length == 0)
            continue;
        if (rd->q == self->rank) {
            move_bytes(rd->local, remote, (size_t)rd->length);
            continue;
        }
        err = copy_across(pid[rd->q], rd->local, (uintptr_t)remote, (size_t)rd->length, 0);
    }
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    uint64_t target = (seq << PHASE_BITS) | (uint64_t)phase;
    signal_phase(self, target);
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = arrived(self, target, spin_ns, self->yield_ns);
    Py_END_ALLOW_THREADS
    status = ok ? 0 : 2;
done:
    result = PyLong_FromLong(status);
fail:
    PyMem_Free(todo);
    PyMem_Free(pid);
    if (mine.obj != NULL)
        PyBuffer_Release(&mine);
    if (dest.obj != NULL)
        PyBuffer_Release(&dest);
    return result;
}

/* alike(pieces, like, writable) -> bool: whether pieces is a list of n objects of
 * like's type, each C-contiguous (and writable) with like's format, shape and size:
 * the root's list of a tiny gather or scatter. Checked in one C call because the
 * Python loop cost a quarter of an 8-byte gather. */
/* splits(seq, out, head, itemsize, limit, count_at) -> status
 *
 * An uneven all_to_all after its entry (rooted, every rank in): each
 * rank's region of parity seq & 1 holds its split header (int64: the offset of its piece
 * for each rank, its send counts, its receive counts, in elements; see
 * paths.oneshot.split_header) and, at byte head, its staged input. Status 0: every
 * fingerprint equals mine but for the count at byte count_at, every rank sends each
 * the count that rank expects, every input was staged (at most limit bytes), and my
 * piece from every rank is copied into out (writable, C-contiguous, my receive counts
 * end to end). Otherwise nothing is copied and Python finds out why, to raise or go
 * on as the general path does: 1 some fingerprint differs (beyond the count), 2 two
 * ranks disagree on a split size, 3 every split size agrees but some input was not
 * staged (Python reads single-copy, from each header's offset of my piece), 4 out is
 * not my receive counts long. */
static PyObject *Round_splits(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "splits(seq, out, head, itemsize, limit, count_at)");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    Py_ssize_t head = PyLong_AsSsize_t(args[2]), isz = PyLong_AsSsize_t(args[3]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]), count_at = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t n = self->n, me = self->rank;
    if (isz <= 0 || head < 3 * n * 8 || limit < 0 || limit > self->small_bytes - head ||
        count_at < 0 || count_at + 8 > self->fp_size) {
        PyErr_SetString(PyExc_ValueError, "splits: bad head, itemsize, limit or count_at");
        return NULL;
    }
    int parity = (int)(seq & 1);
    const char *mine = fingerprint(self, me, parity);
    for (Py_ssize_t r = 0; r < n; r++) {
        const char *fp = fingerprint(self, r, parity);
        if (memcmp(fp, mine, (size_t)count_at) != 0 ||
            memcmp(fp + count_at + 8, mine + count_at + 8, (size_t)(self->fp_size - count_at - 8)))
            return PyLong_FromLong(1);
    }
    /* (headers are 8-byte aligned: regions start on cache lines) */
    Py_ssize_t total = 0;
    int unstaged = 0; /* 3 only once every split size is checked: Python then reads */
    for (Py_ssize_t q = 0; q < n; q++) {
        const int64_t *h = (const int64_t *)region(self, q, parity);
        int64_t sent = 0;
        for (Py_ssize_t r = 0; r < n; r++) {
            const int64_t *hr = (const int64_t *)region(self, r, parity);
            if (h[n + r] != hr[2 * n + q] || h[n + r] < 0)
                return PyLong_FromLong(2);
            sent += h[n + r];
        }
        if (sent > limit / isz)
            unstaged = 1;
        total += (Py_ssize_t)((const int64_t *)region(self, me, parity))[2 * n + q];
        if (h[me] < 0 || h[me] > sent - h[n + me]) /* my piece inside q's input */
            return PyLong_FromLong(2);
    }
    if (unstaged)
        return PyLong_FromLong(3);
    Py_buffer out;
    if (PyObject_GetBuffer(args[1], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return NULL;
    if (out.len != total * isz) {
        PyBuffer_Release(&out);
        return PyLong_FromLong(4);
    }
    const int64_t *own = (const int64_t *)region(self, me, parity);
    char *dst = out.buf;
    for (Py_ssize_t q = 0; q < n; q++) {
        const int64_t *h = (const int64_t *)region(self, q, parity);
        size_t len = (size_t)(own[2 * n + q] * isz);
        copy_bytes(dst, region(self, q, parity) + head + h[me] * isz, len);
        dst += len;
    }
    PyBuffer_Release(&out);
    return PyLong_FromLong(0);
}

static PyObject *Round_alike(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "alike(pieces, like, writable)");
        return NULL;
    }
    PyObject *pieces = args[0], *like = args[1];
    int writable = PyObject_IsTrue(args[2]);
    if (writable < 0)
        return NULL;
    if (!PyList_CheckExact(pieces) || PyList_GET_SIZE(pieces) != self->n)
        Py_RETURN_FALSE;
    Py_buffer want;
    PyObject *want_dtype = PyObject_GetAttr(like, dtype_name);
    if (want_dtype == NULL || PyObject_GetBuffer(like, &want, PyBUF_C_CONTIGUOUS) < 0) {
        Py_XDECREF(want_dtype);
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int ok = 1;
    for (Py_ssize_t i = 0; ok && i < self->n; i++) {
        PyObject *p = PyList_GET_ITEM(pieces, i);
        Py_buffer view;
        if (PyObject_GetBuffer(p, &view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0))
            < 0) {
            PyErr_Clear();
            ok = 0;
            break;
        }
        ok = looks_like(&view, &want, want_dtype);
        PyBuffer_Release(&view);
    }
    PyBuffer_Release(&want);
    Py_DECREF(want_dtype);
    return PyBool_FromLong(ok);
}

/* ------------------------------------------------------------------ programs
 *
 * A program (algorithms/_program.py) is a schedule flattened once per call shape into
 * records of nine integers: (opcode, peer, space, offset, nbytes, buf, at, src_buf,
 * src_at). This interprets the ones a one-shot call is made of, on this arena: PUT (the
 * call's bytes into my one-shot region of the call's parity), ENTER (the round: the
 * fingerprint, phase 1 (0 for a rooted entry, see Round_program), every rank's signal,
 * the comparison), GET (a rank's region into
 * the call's buffer), REDUCE_SLOTS (a rank set's regions folded in rank order into the
 * call's buffer, with the kernels of _fold.h; my own operand from the call's buffer
 * where the record names one in src_buf, src_at), COPY (between the call's buffers),
 * EXPECT (after the entry: a rank's region holds the program's constant bytes there,
 * what it was flattened on presuming, such as all_to_all's split headers; where it does
 * not, the program stops with status 4, and Python goes on from the entry) and
 * ROUND (nothing: rounds of a one-shot program have no messages). Whatever else a
 * program holds (messages, exposure, a peer's slot, a local reduction) is refused when
 * it is packed (_execute.compile_program), and Python's executor runs it.
 *
 * The packed form (int64, made once per program): a header of PROGRAM_HEADER words
 * (the input's and output's byte sizes, its flags WRITES_INPUT and PUTS_ASCEND, the
 * number of records, the side given as a list of pieces or -1 (LISTED_BOTH: both sides),
 * their number), then the
 * records, then the rank sets (each its length, then its ranks), a REDUCE_SLOTS
 * record's peer being where its set starts there, then the constants (a record whose
 * buf is CONSTANT_BUFFER names them by their byte offset from the form's start). A side given as pieces (torch's list
 * forms, _program.as_pieces) is a list or tuple of that many buffers of equal length,
 * which the records address as buffers 2, 3, ... (MAPPED: that many buffers each of the
 * side's length, every rank's part of it). Every offset and size was checked
 * against the buffers and the region when it was packed; a call checks its buffers'
 * sizes against the header.
 */
enum { P_ROUND, P_SEND, P_RECV, P_PUT, P_GET, P_REDUCE_SLOTS, P_ENTER, P_EXPOSE, P_WRITE,
       P_SIGNAL, P_WAIT, P_COPY, P_REDUCE, P_EXPECT, P_OPCODES };
#define PROGRAM_HEADER 6
#define RECORD_WORDS 9
#define WRITES_INPUT 1 /* header flags (word 2): a step writes the call's input */
#define PUTS_ASCEND 2  /* my region's PUTs lie in ascending order, none overlapping */
#define SIGNALS 4      /* SIGNAL or WAIT records of phases after the entry's: phase 0 only */
#define MAPPED 8       /* the pieces are every rank's whole buffer of the listed side, mapped
                        * here (a symmetric allocation's parts, _program.as_mapped): a fold
                        * of the exposed space reads rank q's as piece q, in my memory */
#define BUFS_HELD 18 /* call buffers (input, output, pieces) bound from the stack */
#define LISTED_BOTH 2 /* header word 4 (_program.BOTH): both sides are lists of pieces */
#define REGION_SPACE 1 /* _program.SPACE_CODES["region"] */
#define EXPOSED_SPACE 2 /* _program.SPACE_CODES["exposed"] */
#define CONSTANT_BUFFER (-2) /* _program.CONSTANT: the packed form's own bytes at `at` */

/* (the kernels, with the sources a fold names: srcs[0 .. nsrc)) */
#define FOLD_SOURCE(r) (srcs[(r)])
#define FOLD_SOURCES (nsrc)
#include "_fold.h"

FOLD_CLONES
static int fold_sources(char *const *srcs, Py_ssize_t nsrc, int type, int op, char *out,
                        Py_ssize_t count) {
    if (__builtin_expect(type >= T_F16, 0))
        return fold_halves(srcs, nsrc, -1, type, op, out, count);
    FOLD_SWITCH(type, op);
}

/* fold_sources where out itself holds source own (0 or 1: an in-place call's own
 * operand), read through out only: out = out op source 1 op ..., or source 0 op out op
 * source 2 ..., the same operations in the same order as fold_sources, with no copy of
 * that operand. (Source 2 or later cannot be out: the first pass writes out before
 * reading it; exposed_fold copies such an operand.) The kernels of _fold.h, with FOLD
 * redefined for this one function. */
#undef FOLD
#define FOLD(T, F)                                                       \
    do {                                                                 \
        T *restrict o = (T *)out;                                        \
        if (own == 1) {                                                  \
            const T *restrict a = (const T *)(FOLD_SOURCE(0));           \
            for (Py_ssize_t i = 0; i < count; i++)                       \
                o[i] = F(a[i], o[i]);                                    \
        }                                                                \
        for (Py_ssize_t r = own + 1; r < FOLD_SOURCES; r++) {            \
            const T *restrict c = (const T *)(FOLD_SOURCE(r));           \
            for (Py_ssize_t i = 0; i < count; i++)                       \
                o[i] = F(o[i], c[i]);                                    \
        }                                                                \
    } while (0)

FOLD_CLONES
static int fold_over(char *const *srcs, Py_ssize_t nsrc, Py_ssize_t own, int type, int op,
                     char *out, Py_ssize_t count) {
    if (__builtin_expect(type >= T_F16, 0))
        return fold_halves(srcs, nsrc, own, type, op, out, count);
    FOLD_SWITCH(type, op);
}

#define SET_HELD 16 /* rank sets this long fold from the stack; longer ones malloc */

/* Whether the running records gave up the GIL (ts: the thread state to take it back
 * with) or hold it (NULL). A single-copy program's records after its entry (long
 * copies, its closing wait) run without it, released once (run_records): each release
 * and take-back costs a turn of any other thread that waits for it (the group's
 * worker, which finishes async calls). */
typedef struct {
    PyThreadState *ts;
} Gil;

static inline void gil_hold(Gil *g) {
    if (g->ts != NULL) {
        PyEval_RestoreThread(g->ts);
        g->ts = NULL;
    }
}

/* A program's copy between call memory at local and bytes [offset, offset + nbytes) of
 * the buffer rank q exposed at its entry (single copy: process_vm_readv/writev, or a
 * memmove from my own), write choosing the direction. 0; 4 where those bytes are not
 * in what q exposed (the ranks disagree about the sizes: nothing copied); -1 with an
 * exception, the GIL held (OSError: the kernel refused the copy, or the peer is gone;
 * ValueError: nobody set the pids). Long copies let other threads run. */
static int exposed_copy(Round *self, Py_ssize_t q, int parity, Py_ssize_t offset, char *local,
                        Py_ssize_t nbytes, int write, Gil *g) {
    uint64_t remote;
    if (q < 0 || q >= self->n || !exposed_at(self, q, parity, offset, nbytes, &remote))
        return 4;
    if (q == self->rank) { /* (my own exposed buffer: plain memory) */
        char *mine = (char *)(uintptr_t)remote;
        if (write)
            move_bytes(mine, local, (size_t)nbytes);
        else
            move_bytes(local, mine, (size_t)nbytes);
        return 0;
    }
    if (self->pids == NULL) {
        gil_hold(g);
        PyErr_SetString(PyExc_ValueError, "program: a copy across processes, but no pids set");
        return -1;
    }
    int err;
    if (g->ts == NULL && nbytes >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS
        err = copy_across(self->pids[q], local, (uintptr_t)remote, (size_t)nbytes, write);
        Py_END_ALLOW_THREADS
    } else {
        err = copy_across(self->pids[q], local, (uintptr_t)remote, (size_t)nbytes, write);
    }
    if (err) {
        gil_hold(g);
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* The bytes of every operand's chunk together in a fold of exposed buffers
 * (exposed_fold), which reads each peer's chunk with one process_vm_readv into the
 * bounce buffer, then folds them while they are in the cache: about the L2 of one core
 * (1 MiB on the machine measured), each operand's chunk FOLD_MIN to FOLD_MAX bytes. A
 * smaller chunk costs system calls, and the kernel pins the pages of each; at 2 ranks
 * (one job, the hot reduce/cma and all_reduce/cma of 2-32 MiB, stop 70) an operand's
 * chunk of 32 or 64 KiB was 10-40% slower than Python's 256 KiB chunks, 128 KiB 5-10%
 * faster, 256 KiB to 1 MiB 15-25% faster, alike. */
#define FOLD_BYTES (1 << 20)

/* The parts of a symmetric allocation a MAPPED program's fold reads (rank q's at
 * parts[q], each bytes long): every rank maps them all, so no exposure, no system call. */
typedef struct {
    char *const *parts;
    Py_ssize_t bytes;
} Mapped;
#define FOLD_MIN (64 << 10)
#define FOLD_MAX (512 << 10)
#define PAGE 4096

/* A REDUCE_SLOTS of the exposed space: out = bytes [offset, offset + nbytes) of the
 * buffer every rank of set (its length, then its ranks) exposed, folded in the set's
 * order with kernel, a chunk at a time (FOLD_BYTES): a peer's chunk read into the
 * bounce buffer, my own read where it lies (my exposed buffer is my memory); with
 * mapped (a symmetric allocation's parts), every rank's read where it lies. In place
 * (my operand is out itself: all_reduce, a reduce root), it is read through out
 * (fold_over) where it is the first or second operand, else copied first, as is one
 * that overlaps out otherwise. Each chunk lands at its source's offset within a page,
 * so no copy runs at a short distance (_copy.h). 0; 4 where a rank's bytes lie outside
 * what it exposed (nothing read); -1 with an exception, the GIL held (no kernel, no
 * memory, no pids, a refused copy). */
static int exposed_fold(Round *self, const int64_t *set, int parity, Py_ssize_t offset,
                        char *out, Py_ssize_t nbytes, long kernel, const Mapped *mapped,
                        Gil *g) {
    Py_ssize_t k = (Py_ssize_t)set[0];
    uint64_t held[SET_HELD], *from = held;
    char *srcs_held[SET_HELD], **srcs = srcs_held;
    if (k == 1 && mapped == NULL) /* (one operand: a copy of it) */
        return exposed_copy(self, (Py_ssize_t)set[1], parity, offset, out, nbytes, 0, g);
    if (k == 1) { /* (the same, from a part) */
        if (set[1] < 0 || set[1] >= self->n || offset < 0 || nbytes > mapped->bytes
                || offset > mapped->bytes - nbytes)
            return 4;
        move_bytes(out, mapped->parts[set[1]] + offset, (size_t)nbytes);
        return 0;
    }
    if (k > SET_HELD) {
        from = PyMem_RawMalloc(sizeof(uint64_t) * (size_t)k);
        srcs = PyMem_RawMalloc(sizeof(char *) * (size_t)k);
    }
    int got = -1, bounced_any = mapped == NULL; /* (mapped: an operand copied first) */
    if (from == NULL || srcs == NULL) {
        gil_hold(g);
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        Py_ssize_t q = (Py_ssize_t)set[1 + j];
        if (q < 0 || q >= self->n) {
            got = 4;
            goto out;
        }
        if (mapped != NULL) { /* (rank q's part, in my memory) */
            if (offset < 0 || nbytes > mapped->bytes || offset > mapped->bytes - nbytes) {
                got = 4;
                goto out;
            }
            from[j] = (uint64_t)(uintptr_t)(mapped->parts[q] + offset);
            char *at = mapped->parts[q] + offset;
            if (at < out + nbytes && out < at + nbytes && !(at == out && j < 2))
                bounced_any = 1; /* (it overlaps out: see fold_over) */
        } else if (!exposed_at(self, q, parity, offset, nbytes, &from[j])) {
            got = 4;
            goto out;
        }
    }
    if (kernel < 0 || k < 1) {
        gil_hold(g);
        PyErr_SetString(PyExc_ValueError, "a program folds, but no kernel was given");
        goto out;
    }
    if (self->pids == NULL && mapped == NULL) {
        gil_hold(g);
        PyErr_SetString(PyExc_ValueError, "program: a fold across processes, but no pids set");
        goto out;
    }
    int type = (int)(kernel / 8), op = (int)(kernel % 8), size = type_size[type];
    Py_ssize_t chunk = FOLD_BYTES / k / PAGE * PAGE; /* (whole pages: whole elements) */
    chunk = chunk < FOLD_MIN ? FOLD_MIN : chunk > FOLD_MAX ? FOLD_MAX : chunk;
    if (!bounced_any) /* (every part read where it lies: one pass, nothing to bounce) */
        chunk = nbytes;
    size_t slot = bounced_any ? (size_t)chunk + PAGE : 0, need = slot * (size_t)k;
    if (self->bounce_bytes < need) {
        if (self->bounce != NULL)
            munmap(self->bounce, self->bounce_bytes);
        self->bounce_bytes = 0;
        self->bounce = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
        if (self->bounce == MAP_FAILED) {
            self->bounce = NULL;
            gil_hold(g);
            PyErr_NoMemory();
            goto out;
        }
        self->bounce_bytes = need;
    }
    PyThreadState *ts = g->ts == NULL && nbytes >= (1 << 16) ? PyEval_SaveThread() : NULL;
    int err = 0;
    for (Py_ssize_t done = 0; done < nbytes && !err; done += chunk) {
        Py_ssize_t len = nbytes - done < chunk ? nbytes - done : chunk, own = -1;
        char *o = out + done;
        for (Py_ssize_t j = 0; j < k && !err; j++) {
            Py_ssize_t q = (Py_ssize_t)set[1 + j];
            uint64_t at = from[j] + (uint64_t)done;
            char *bounced = slot ? self->bounce + slot * (size_t)j + (from[j] & (PAGE - 1)) : NULL;
            char *mine = (char *)(uintptr_t)at;
            if (q != self->rank && mapped == NULL)
                err = copy_across(self->pids[q], bounced, (uintptr_t)at, (size_t)len, 0);
            else if (mine == o && j < 2 && own < 0)
                own = j; /* (read through out: fold_over) */
            else if (mine < o + len && o < mine + len)
                memcpy(bounced, mine, (size_t)len);
            else
                bounced = mine;
            srcs[j] = bounced;
        }
        if (!err && (own < 0 ? fold_sources(srcs, k, type, op, o, len / size)
                             : fold_over(srcs, k, own, type, op, o, len / size)) < 0)
            err = -1;
    }
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    if (err) {
        gil_hold(g);
        if (err < 0) {
            PyErr_SetString(PyExc_ValueError, "a program folds with a kernel that does not exist");
        } else {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        goto out;
    }
    got = 0;
out:
    if (from != held)
        PyMem_RawFree(from);
    if (srcs != srcs_held)
        PyMem_RawFree(srcs);
    return got;
}

/* Whether every rank of a program's rank set (its length, then its ranks) signalled
 * target within the spin and yield times (each rank's own: arrived_from). */
static int set_arrived(Round *self, const int64_t *set, uint64_t target, uint64_t spin_ns,
                       Gil *g) {
    int ok = 1;
    PyThreadState *ts = g->ts == NULL ? PyEval_SaveThread() : NULL;
    for (int64_t j = 0; j < set[0] && ok; j++)
        ok = 0 <= set[1 + j] && set[1 + j] < self->n
             && arrived_from(self, (Py_ssize_t)set[1 + j], (Py_ssize_t)set[1 + j] + 1, target,
                             spin_ns, self->yield_ns);
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    return ok;
}

/* Run records [from, to) of prog on bufs (the call's input and output): 0; -1 with an
 * exception (no kernel for a fold, no memory, a copy across processes the kernel
 * refused); 4 where an EXPECT found other bytes or a copy from or into a peer's
 * exposed buffer lies outside it, its record in *stopped (nothing after it ran); 2
 * where a WAIT's ranks did not signal within the spin time, *stopped the record after
 * it (Python waits, then resumes there). An EXPOSE is the entry's (Round.program). */
static int records(Round *self, const int64_t *prog, Py_ssize_t from, Py_ssize_t to,
                   char *const *bufs, uint64_t seq, long kernel, uint64_t spin_ns,
                   Py_ssize_t *stopped, Gil *g) {
    const int64_t *sets = prog + PROGRAM_HEADER + prog[3] * RECORD_WORDS;
    int parity = (int)(seq & 1);
    for (Py_ssize_t i = from; i < to; i++) {
        const int64_t *rec = prog + PROGRAM_HEADER + i * RECORD_WORDS;
        Py_ssize_t nbytes = (Py_ssize_t)rec[4];
        if (nbytes == 0 && rec[0] != P_SIGNAL && rec[0] != P_WAIT)
            continue; /* ROUND, and empty pieces */
        char *mem = rec[5] >= 0 ? bufs[rec[5]] + rec[6]
                    : rec[5] == CONSTANT_BUFFER ? (char *)prog + rec[6] : NULL;
        int got;
        switch (rec[0]) {
        case P_PUT: {
            char *to_region = region(self, self->rank, parity) + rec[3];
            if (rec[3] + nbytes < PIPE_MIN || !(prog[2] & PUTS_ASCEND)) {
                copy_to_shared(to_region, mem, (size_t)nbytes);
                break;
            } /* the staging reaches PIPE_MIN bytes: in chunks, with progress (as stage).
               * Progress counts from the region's start, so only where the PUTs ascend:
               * then every byte the program stages below it is there (a gap is a part
               * the program does not stage, which no reader of it reads) */
            for (Py_ssize_t done = 0; done < nbytes; done += PIPE_CHUNK) {
                Py_ssize_t len = nbytes - done < PIPE_CHUNK ? nbytes - done : PIPE_CHUNK;
                copy_to_shared(to_region + done, mem + done, (size_t)len);
                publish_progress(self, seq, rec[3] + done + len);
            }
            break;
        }
        case P_GET:
            if (rec[2] == EXPOSED_SPACE) { /* a peer's exposed buffer (single copy) */
                got = exposed_copy(self, (Py_ssize_t)rec[1], parity, (Py_ssize_t)rec[3], mem,
                                   nbytes, 0, g);
                goto copied;
            }
            copy_bytes(mem, region(self, (Py_ssize_t)rec[1], parity) + rec[3], (size_t)nbytes);
            break;
        case P_WRITE: /* (into a peer's exposed buffer: pack_program allows no other) */
            got = exposed_copy(self, (Py_ssize_t)rec[1], parity, (Py_ssize_t)rec[3],
                               bufs[rec[7]] + rec[8], nbytes, 1, g);
        copied:
            if (got > 0)
                *stopped = i;
            if (got != 0)
                return got;
            break;
        case P_SIGNAL:
            signal_phase(self, (seq << PHASE_BITS) | (uint64_t)rec[3]);
            break;
        case P_WAIT:
            if (!set_arrived(self, sets + rec[1], (seq << PHASE_BITS) | (uint64_t)rec[3],
                             spin_ns, g)) {
                *stopped = i + 1;
                return 2;
            }
            break;
        case P_EXPOSE: /* (the entry's: Round.program) */
            break;
        case P_EXPECT:
            if (rec[1] < 0 || rec[1] >= self->n || mem == NULL) {
                gil_hold(g);
                PyErr_SetString(PyExc_ValueError, "an EXPECT record of no rank or no bytes");
                return -1;
            }
            if (memcmp(region(self, (Py_ssize_t)rec[1], parity) + rec[3], mem, (size_t)nbytes)) {
                *stopped = i;
                return 4;
            }
            break;
        case P_COPY: /* (memmove: an in-place call's input and output are one array) */
            move_bytes(mem, bufs[rec[7]] + rec[8], (size_t)nbytes);
            break;
        case P_REDUCE_SLOTS: {
            const int64_t *set = sets + rec[1];
            if (rec[2] == EXPOSED_SPACE) { /* the peers' exposed buffers (single copy), or
                                            * their parts of a symmetric allocation */
                Mapped parts = {bufs + 2, (Py_ssize_t)prog[prog[4]]};
                got = exposed_fold(self, set, parity, (Py_ssize_t)rec[3], mem, nbytes, kernel,
                                   prog[2] & MAPPED ? &parts : NULL, g);
                goto copied;
            }
            Py_ssize_t k = (Py_ssize_t)set[0];
            /* my own operand: the call's buffer (src_buf, src_at), not my region; one
             * that overlaps the output (in place) is staged in my region first, where
             * nobody else reads these bytes, else the fold would overwrite it unread */
            char *own = rec[7] >= 0 ? bufs[rec[7]] + rec[8] : NULL;
            if (own != NULL && own < mem + nbytes && mem < own + nbytes) {
                copy_bytes(region(self, self->rank, parity) + rec[3], own, (size_t)nbytes);
                own = NULL;
            }
#define OPERAND(q) (own != NULL && (q) == self->rank ? own : region(self, (q), parity) + rec[3])
            if (k == 1) {
                move_bytes(mem, OPERAND((Py_ssize_t)set[1]), (size_t)nbytes);
                break;
            }
            if (kernel < 0) {
                gil_hold(g);
                PyErr_SetString(PyExc_ValueError, "a program folds, but no kernel was given");
                return -1;
            }
            char *held[SET_HELD], **srcs = held;
            if (k > SET_HELD && (srcs = PyMem_RawMalloc(sizeof(char *) * (size_t)k)) == NULL) {
                gil_hold(g);
                PyErr_NoMemory();
                return -1;
            }
            for (Py_ssize_t j = 0; j < k; j++)
                srcs[j] = OPERAND((Py_ssize_t)set[1 + j]);
#undef OPERAND
            int type = (int)(kernel / 8), op = (int)(kernel % 8);
            Py_ssize_t count = nbytes / type_size[type];
            /* long enough to let other threads run (if not already) */
            PyThreadState *ts = g->ts == NULL && nbytes >= (1 << 16) ? PyEval_SaveThread() : NULL;
            fold_sources(srcs, k, type, op, mem, count);
            if (ts != NULL)
                PyEval_RestoreThread(ts);
            if (srcs != held)
                PyMem_RawFree(srcs);
            break;
        }
        default:
            gil_hold(g);
            PyErr_Format(PyExc_ValueError, "a program record with opcode %lld", (long long)rec[0]);
            return -1;
        }
    }
    return 0;
}

/* records() from the GIL: a single-copy program's (header flag SIGNALS) without it,
 * given up once, the others with it (their long folds give it up themselves). */
static inline int run_records(Round *self, const int64_t *prog, Py_ssize_t from,
                              Py_ssize_t to, char *const *bufs, uint64_t seq, long kernel,
                              uint64_t spin_ns, Py_ssize_t *stopped) {
    Gil g = {NULL};
    if (__builtin_expect((prog[2] & SIGNALS) && from < to, 0))
        g.ts = PyEval_SaveThread();
    int ran = records(self, prog, from, to, bufs, seq, kernel, spin_ns, stopped, &g);
    gil_hold(&g);
    return ran;
}

/* The call buffers of prog: inp and out into bufs[0] and bufs[1] (NULL: None, or a
 * side given as pieces), each piece of the listed side into bufs[2 + i] (LISTED_BOTH:
 * the input's there, the output's after them); views holds what was got (obj NULL
 * where nothing was). -1 with an exception. */
static int bind_buffers(const int64_t *prog, PyObject *inp, PyObject *out, Py_buffer *views,
                        char **bufs) {
    Py_ssize_t side = (Py_ssize_t)prog[4], count = (Py_ssize_t)prog[5];
    for (int b = 0; b < 2; b++) {
        PyObject *obj = b == 0 ? inp : out;
        int flags = PyBUF_C_CONTIGUOUS | (b == 1 || (prog[2] & WRITES_INPUT) ? PyBUF_WRITABLE : 0);
        if (b == side || side == LISTED_BOTH) {
            Py_ssize_t first = 2 + (side == LISTED_BOTH && b == 1 ? count : 0);
            if (!(PyList_Check(obj) || PyTuple_Check(obj))
                    || PySequence_Fast_GET_SIZE(obj) != count) {
                PyErr_Format(PyExc_ValueError, "program: the %s is a list or tuple of %zd "
                             "buffers", b == 0 ? "input" : "output", count);
                return -1;
            }
            for (Py_ssize_t i = 0; i < count; i++) {
                Py_buffer *view = &views[first + i];
                if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(obj, i), view, flags) < 0)
                    return -1;
                if (view->len * ((prog[2] & MAPPED) ? 1 : count) != prog[b]) {
                    PyErr_SetString(PyExc_ValueError, "program: a piece of another size than "
                                                      "the program's");
                    return -1;
                }
                bufs[first + i] = view->buf;
            }
            continue;
        }
        if (obj == Py_None) {
            if (prog[b] != 0) {
                PyErr_SetString(PyExc_ValueError, "program: a buffer it needs is None");
                return -1;
            }
            continue;
        }
        if (PyObject_GetBuffer(obj, &views[b], flags) < 0)
            return -1;
        if (views[b].len != prog[b]) {
            PyErr_SetString(PyExc_ValueError, "program: a buffer of another size than the "
                                              "program's");
            return -1;
        }
        bufs[b] = views[b].buf;
    }
    return 0;
}

/* Whether every piece of prog's listed side (bufs 2 ...) looks like the other side's
 * buffer (looks_like: type, length, shape, dtype), as a gather's or scatter's pieces
 * must look like the array of the rank's own (torch's list forms; the interpreter
 * itself checks lengths only); with both sides listed (all_to_all of lists), every
 * piece like the input's first. 1 where no side is listed or the other is None. (A
 * MAPPED program's pieces are every rank's part of its side: not asked.) */
static int pieces_look_alike(const int64_t *prog, const Py_buffer *views, Py_ssize_t nb) {
    Py_ssize_t side = (Py_ssize_t)prog[4];
    if (side < 0 || (side != LISTED_BOTH && views[1 - side].obj == NULL))
        return 1;
    const Py_buffer *like = side == LISTED_BOTH ? &views[2] : &views[1 - side];
    PyObject *like_dtype = PyObject_GetAttr(like->obj, dtype_name);
    if (like_dtype == NULL) {
        PyErr_Clear();
        return 0;
    }
    int alike = 1;
    for (Py_ssize_t i = side == LISTED_BOTH ? 3 : 2; i < nb && alike; i++)
        alike = looks_like(&views[i], like, like_dtype);
    Py_DECREF(like_dtype);
    return alike;
}

/* Whether no output piece of a program with both sides listed (bufs 2 + count ...)
 * overlaps an input piece (bufs 2 ...): its peers read my input pieces, and my own
 * piece is copied, while I write my output pieces (an all_to_all of lists in place
 * goes to the general path, which stages the input first). 1 for any other program. */
static int sides_apart(const int64_t *prog, const Py_buffer *views) {
    if (prog[4] != LISTED_BOTH)
        return 1;
    Py_ssize_t count = (Py_ssize_t)prog[5];
    for (Py_ssize_t o = 2 + count; o < 2 + 2 * count; o++) {
        const char *lo = views[o].buf, *hi = lo + views[o].len;
        for (Py_ssize_t i = 2; i < 2 + count; i++) {
            const char *ilo = views[i].buf;
            if (views[o].len && views[i].len && ilo < hi && lo < ilo + views[i].len)
                return 0;
        }
    }
    return 1;
}

/* program(seq, packed, spin_ns, prog, inp, out, kernel, start[, what]) -> 0, or
 * resume * 8 + status: run the packed program prog (bytes, see above) on inp and out
 * (buffers, or None where the header's size is 0; the side the header lists, a list
 * or tuple of its pieces) from record start, the ENTER
 * record (if any at or after start) being the round of round_core with fingerprint
 * packed, phase 1 (packed: the whole fingerprint, or its tail after seq, as oneshot
 * takes it). 0: the program ran to its end. Otherwise the round's status (1 to 3, see
 * the top of the file) and the record to resume from once Python finished the round
 * (its wait, comparison or error): call again with that start. kernel: the fold code
 * (ops.compiled_kernel), -1 for none.
 *
 * packed may instead be a rooted entry (tails, root, exposure): the call's entry is
 * then the general path's (phase 0), as gather's, scatter's and all_to_all's, which
 * are decided after it (a legal uneven call goes on from there on the general path).
 * tails: every rank's fingerprint after seq (a root's names its pieces); root: the
 * call's root, whose layout Python's comparison reads, or -1 (all_to_all has none);
 * exposure: None, (address, nbytes) or a
 * C-contiguous buffer, exposed as Arena.expose does for a general path taking over.
 * What the interpreter cannot take of such a call (a buffer not C-contiguous, one to
 * write not writable, pieces not like the array of the rank's own side) is status 5:
 * nothing was done (Python's general path explains, with the same sequence number).
 *
 * An ENTER whose peer names a rank set (one rank or none) is one-sided (see one-sided
 * rounds above) when what is given (not None): it names the call for its settling.
 * Without it the entry awaits every rank, which is always right (an async call does
 * so: its errors belong to its Work, not to the next call). A GET of at least
 * PIPE_MIN bytes from the awaited rank's region right after a one-sided entry is
 * copied as that rank stages them (pipe_copy), the round then skipping it.
 *
 * packed may also be None where start lies past the program's ENTER: the call entered
 * elsewhere (the general path's entry, in Python), and the records after it run here.
 *
 * A single-copy program (paths/single_copy.py's calls as their registered "cma"
 * schedules) has an EXPOSE before its ENTER: the entry exposes that part of the call's
 * buffers (as Arena.expose), in place of the rooted entry's exposure. After the entry,
 * a GET or WRITE of the exposed space copies from or into the buffer that rank
 * exposed (exposed_copy: process_vm_readv/writev to the pids set on this Round), and
 * SIGNAL and WAIT are the program's own rounds (its closing one): phases after the
 * entry's, so such a program (header flag SIGNALS) takes a rooted entry only. Status
 * 2 from a WAIT: its ranks did not signal within the spin time, resume the record
 * after it once Python waited; status 4 from a copy: the bytes lie outside what that
 * rank exposed (nothing of that copy moved); an OSError: the kernel refused a copy. */
static PyObject *Round_program(Round *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "program(seq, packed, spin_ns, prog, inp, out, kernel, start[, what])");
        return NULL;
    }
    PyObject *what = nargs == 9 ? args[8] : NULL;
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long spin_ns = PyLong_AsUnsignedLongLong(args[2]);
    long kernel = PyLong_AsLong(args[6]);
    Py_ssize_t start = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred())
        return NULL;
    char *packed, *raw, with_seq[LINE];
    Py_ssize_t packed_len, raw_len;
    PyObject *tails = NULL; /* a rooted entry's (see above) */
    PyObject *table = NULL; /* the list whose table of pieces the entry stages (borrowed) */
    Py_ssize_t root = -1;
    uint64_t exposure[3] = {0, 0, 0};
    int exposing = 0;
    if (PyTuple_Check(args[1])) {
        PyObject *entry = args[1];
        if (PyTuple_GET_SIZE(entry) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(entry, 0))
                || PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 0)) != self->n) {
            PyErr_SetString(PyExc_ValueError, "program: a rooted entry is (tails, root, "
                                              "exposure), one tail per rank");
            return NULL;
        }
        tails = PyTuple_GET_ITEM(entry, 0);
        root = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
        if (root == -1 && PyErr_Occurred())
            return NULL;
        if (root < -1 || root >= self->n) { /* (-1: a call without a root, all_to_all) */
            PyErr_SetString(PyExc_ValueError, "program: the root is neither -1 nor a rank "
                                              "of the group");
            return NULL;
        }
        PyObject *exposes = PyTuple_GET_ITEM(entry, 2);
        if (PyTuple_Check(exposes) && PyTuple_GET_SIZE(exposes) == 3
                && PyList_Check(PyTuple_GET_ITEM(exposes, 0))) {
            /* (pieces, bits, at): a list's table of pieces, staged at byte at of my
             * region (past what the program stages there) once the region is mine */
            uint64_t bits = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(exposes, 1));
            Py_ssize_t table_at = PyLong_AsSsize_t(PyTuple_GET_ITEM(exposes, 2));
            if (PyErr_Occurred())
                return NULL;
            table = PyTuple_GET_ITEM(exposes, 0);
            Py_ssize_t table_len = PyList_GET_SIZE(table) * 16;
            if ((bits & ~(uint64_t)SPLIT) || table_at < 0 || table_at % 8
                    || table_at > self->small_bytes || table_len > self->small_bytes - table_at) {
                PyErr_SetString(PyExc_ValueError, "program: a table of pieces is (pieces, bits "
                                                  "SPLIT or 0, an 8-aligned offset in the region)");
                return NULL;
            }
            exposure[0] = (uint64_t)table_at;
            exposure[1] = (uint64_t)table_len;
            exposure[2] = PIECE_TABLE | bits;
            exposing = 1;
        } else if ((exposing = exposure_words(exposes, exposure)) < 0) {
            return NULL;
        }
        if (pack(self, seq, PyTuple_GET_ITEM(tails, self->rank), with_seq) < 0)
            return NULL;
        packed = with_seq;
        packed_len = self->fp_size;
    } else if (args[1] == Py_None) { /* no entry: the run starts after it (see above) */
        packed = NULL;
        packed_len = self->fp_size;
    } else {
        if (PyBytes_AsStringAndSize(args[1], &packed, &packed_len) < 0)
            return NULL;
        if (packed_len + 8 == self->fp_size) { /* the tail only: seq goes first (see pack) */
            if (pack(self, seq, args[1], with_seq) < 0)
                return NULL;
            packed = with_seq;
            packed_len = self->fp_size;
        }
    }
    if (PyBytes_AsStringAndSize(args[3], &raw, &raw_len) < 0)
        return NULL;
    const int64_t *prog = (const int64_t *)raw;
    if (packed_len != self->fp_size || raw_len < PROGRAM_HEADER * 8
        || prog[3] < 0 || raw_len < (PROGRAM_HEADER + prog[3] * RECORD_WORDS) * 8
        || start < 0 || start > prog[3]) {
        PyErr_SetString(PyExc_ValueError, "program: a bad fingerprint, program or start");
        return NULL;
    }
    if (kernel >= 0 && (kernel / 8 >= N_TYPES || kernel % 8 >= N_OPS
                        || (kernel / 8 >= T_F16 && kernel % 8 > OP_PROD))) {
        PyErr_SetString(PyExc_ValueError, "program: no such kernel");
        return NULL;
    }
    if ((prog[2] & SIGNALS) && tails == NULL && packed != NULL) {
        PyErr_SetString(PyExc_ValueError, "program: its own rounds follow a rooted entry "
                                          "(tails, root, exposure), whose phase is 0");
        return NULL;
    }
    if (!(prog[4] == -1 ? prog[5] == 0 : (prog[4] >= 0 && prog[4] <= LISTED_BOTH) && prog[5] > 0)
            || (prog[4] == LISTED_BOTH && (prog[2] & MAPPED))) {
        PyErr_SetString(PyExc_ValueError, "program: a bad side of pieces");
        return NULL;
    }
    Py_ssize_t nb = 2 + (Py_ssize_t)prog[5] * (prog[4] == LISTED_BOTH ? 2 : 1);
    Py_buffer views_held[BUFS_HELD], *views = views_held;
    char *bufs_held[BUFS_HELD], **bufs = bufs_held;
    if (nb > BUFS_HELD) {
        views = PyMem_Malloc(sizeof(Py_buffer) * (size_t)nb);
        bufs = PyMem_Malloc(sizeof(char *) * (size_t)nb);
        if (views == NULL || bufs == NULL) {
            PyMem_Free(views);
            PyMem_Free(bufs);
            return PyErr_NoMemory();
        }
    }
    for (Py_ssize_t b = 0; b < nb; b++) {
        views[b].obj = NULL;
        bufs[b] = NULL;
    }
    PyObject *result = NULL;
    int status = 0;
    Py_ssize_t n = (Py_ssize_t)prog[3], at = start;
    PipedGet gets_held[STAGE_HELD], *gets = gets_held;
    Py_ssize_t ngets = 0, piped_end = 0;
    if (bind_buffers(prog, args[4], args[5], views, bufs) < 0
            || (tails != NULL && !(prog[2] & MAPPED) && !pieces_look_alike(prog, views, nb))
            || !sides_apart(prog, views)) {
        if (tails == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "program: output pieces overlap input pieces");
            goto fail;
        }
        PyErr_Clear(); /* a rooted call the interpreter does not take: nothing done */
        status = 5;
        goto done;
    }
    for (; at < n; at++) { /* the records before the round, then the round */
        const int64_t *r = prog + PROGRAM_HEADER + at * RECORD_WORDS;
        if (r[0] == P_ENTER)
            break;
        if (r[0] == P_EXPOSE) { /* the buffer the entry exposes (Arena.expose's words) */
            if (exposing) {
                PyErr_SetString(PyExc_ValueError, "program: an exposure given twice");
                goto fail;
            }
            exposure[0] = r[4] ? (uint64_t)(uintptr_t)(bufs[r[5]] + r[6]) : 0;
            exposure[1] = (uint64_t)r[4];
            exposure[2] = 0;
            exposing = 1;
        }
    }
    if (at < n && packed == NULL) {
        PyErr_SetString(PyExc_ValueError, "program: an entry to run, but none given");
        goto fail;
    }
    OneSided one = {-1, what, root, NULL, 0, 0, 0}, *one_sided = NULL;
    const int64_t *rec = prog + PROGRAM_HEADER + at * RECORD_WORDS;
    if (at < n && rec[1] >= 0 && what != NULL && what != Py_None) { /* one-sided */
        const int64_t *set = prog + PROGRAM_HEADER + n * RECORD_WORDS + rec[1];
        if (set[0] > 1 || (set[0] == 1 && !(0 <= set[1] && set[1] < self->n))) {
            PyErr_SetString(PyExc_ValueError, "program: a one-sided entry awaits one rank "
                                              "of the group or none");
            goto fail;
        }
        one.awaited = set[0] == 1 ? (Py_ssize_t)set[1] : -1;
        const int64_t *get = rec + RECORD_WORDS;
        if (one.awaited >= 0 && at + 1 < n && get[0] == P_GET && get[1] == one.awaited
            && get[2] == REGION_SPACE && get[4] >= PIPE_MIN) {
            one.pipe_to = bufs[get[5]] + get[6];
            one.pipe_off = (Py_ssize_t)get[3];
            one.pipe_len = (Py_ssize_t)get[4];
        }
        one_sided = &one;
    }
    if (at < n && one_sided == NULL) { /* a reader of several ranks (a gather root): the
                                        * GETs of at least PIPE_MIN bytes among the copies
                                        * right after the entry are copied as staged */
        Py_ssize_t k = 0;
        for (piped_end = at + 1; piped_end < n; piped_end++) {
            const int64_t *r = prog + PROGRAM_HEADER + piped_end * RECORD_WORDS;
            if (r[0] != P_GET && r[0] != P_COPY)
                break;
            k += r[0] == P_GET && r[2] == REGION_SPACE && r[1] != self->rank && r[4] >= PIPE_MIN;
        }
        if (k > STAGE_HELD && (gets = PyMem_Malloc(sizeof(PipedGet) * (size_t)k)) == NULL) {
            gets = gets_held; /* (no memory: no pipe, the records copy it all) */
            k = 0;
        }
        for (Py_ssize_t j = at + 1; j < piped_end && ngets < k; j++) {
            const int64_t *r = prog + PROGRAM_HEADER + j * RECORD_WORDS;
            if (r[0] == P_GET && r[2] == REGION_SPACE && r[1] != self->rank && r[4] >= PIPE_MIN)
                gets[ngets++] = (PipedGet){(Py_ssize_t)r[1], (Py_ssize_t)r[3], (Py_ssize_t)r[4],
                                           0, j, bufs[r[5]] + r[6]};
        }
    }
    if (at < n) { /* as round_core, before anything is written: the pending one-sided
                   * round (whose end frees the regions of this parity), then an abort */
        if (self->pending && settle(self, spin_ns) < 0)
            goto fail;
        if (__atomic_load_n((uint32_t *)self->base, __ATOMIC_ACQUIRE)) {
            status = 3; /* (Python raises what the abort says; nothing ran) */
            at = start;
            goto done;
        }
        /* (the region is mine from here: nobody reads this parity's bytes any more) */
        if (table != NULL && write_piece_table(table, region(self, self->rank, (int)(seq & 1))
                                               + exposure[0]) < 0)
            goto fail;
    }
    Py_ssize_t stopped = 0;
    int ran = run_records(self, prog, start, at, bufs, seq, kernel, spin_ns, &stopped);
    if (ran == 0 && at < n) {
        EachPipe each = {gets, ngets};
        status = round_core(self, seq, tails != NULL ? 0 : 1, packed, Py_None, spin_ns, tails,
                            exposing ? exposure : NULL, one_sided, ngets ? &each : NULL);
        at++;
        if (status < 0)
            goto fail;
        if (status == 0 && one.piped)
            at++; /* the GET after the entry is done */
        if (status == 0 && ngets) { /* the piped GETs' rest, and the copies among them */
            int parity = (int)(seq & 1);
            for (Py_ssize_t g = 0; at < piped_end; at++) {
                if (g < ngets && gets[g].record == at) {
                    PipedGet *p = &gets[g++];
                    if (p->copied < p->len)
                        copy_bytes(p->to + p->copied, region(self, p->peer, parity) + p->off
                                   + p->copied, (size_t)(p->len - p->copied));
                } else if ((ran = run_records(self, prog, at, at + 1, bufs, seq, kernel,
                                              spin_ns, &stopped)) != 0) {
                    break;
                }
            }
        }
        if (status == 0 && ran == 0)
            ran = run_records(self, prog, at, n, bufs, seq, kernel, spin_ns, &stopped);
    }
    if (ran < 0)
        goto fail;
    if (ran > 0) { /* an EXPECT's presumption does not hold (after the entry, or past it
                    * when resumed): nothing after it ran */
        status = ran;
        at = stopped;
    }
done:
    result = PyLong_FromSsize_t(status == 0 ? 0 : at * 8 + status);
fail:
    for (Py_ssize_t b = 0; b < nb; b++)
        if (views[b].obj != NULL)
            PyBuffer_Release(&views[b]);
    if (views != views_held) {
        PyMem_Free(views);
        PyMem_Free(bufs);
    }
    if (gets != gets_held)
        PyMem_Free(gets);
    return result;
}

static PyMethodDef Round_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Round_run, METH_FASTCALL,
     "run(seq, phase, packed, data, spin_ns[, expected]) -> status: one arena round (see the module)."},
    {"oneshot", (PyCFunction)(void (*)(void))Round_oneshot, METH_FASTCALL,
     "oneshot(seq, tail, data, spin_ns) -> status: a phase-1 round (see the source)."},
    {"settle", (PyCFunction)Round_settle, METH_O,
     "settle(spin_ns) -> None: finish the pending one-sided round, if any (see the source)."},
    {"rooted", (PyCFunction)(void (*)(void))Round_rooted, METH_FASTCALL,
     "rooted(seq, tails, data, spin_ns, exposure[, same]) -> status: the general path's entry "
     "round, every rank's own fingerprint tail (see rooted in the source)."},
    {"splits", (PyCFunction)(void (*)(void))Round_splits, METH_FASTCALL,
     "splits(seq, out, head, itemsize, limit, count_at) -> status: an uneven all_to_all's checks "
     "and copies after its entry (see the source)."},
    {"program", (PyCFunction)(void (*)(void))Round_program, METH_FASTCALL,
     "program(seq, packed, spin_ns, prog, inp, out, kernel, start[, what]) -> 0 or resume * 8 + "
     "status: a packed one-shot program on this arena, its ENTER the round; packed a "
     "fingerprint or a rooted entry (tails, root, exposure) (see programs in the source)."},
    {"alike", (PyCFunction)(void (*)(void))Round_alike, METH_FASTCALL,
     "alike(pieces, like, writable) -> bool: a list of n arrays like like (see the source)."},
    {"reads", (PyCFunction)(void (*)(void))Round_reads, METH_FASTCALL,
     "reads(seq, pids, dest, mine, reads, phase, spin_ns) -> status: single-copy reads from the "
     "peers' exposed buffers, then a round (see single copy in the source)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Round_getset[] = {
    {"pending", (getter)Round_get_pending, NULL,
     "whether a one-sided round waits to be settled", NULL},
    {"settle_slow", NULL, (setter)Round_set_settle_slow,
     "(write-only) settle_slow(seq, packed, what, tails, root): Python's end of a late or "
     "differing one-sided round", NULL},
    {"pids", NULL, (setter)Round_set_pids,
     "(write-only) every rank's process id: where a program's copies from and into a "
     "peer's exposed buffer go", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast.transport._tiny.Round",
    .tp_doc = "One rank's view of an arena for compiled tiny rounds.",
    .tp_basicsize = sizeof(Round),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Round_init,
    .tp_dealloc = (destructor)Round_dealloc,
    .tp_traverse = (traverseproc)Round_traverse,
    .tp_clear = (inquiry)Round_clear,
    .tp_methods = Round_methods,
    .tp_getset = Round_getset,
};

/* same_start(a, b) -> whether two contiguous arrays' data start at one address: whether
 * a gather's input or a scatter's output is the root's own piece of its list, in place
 * (lanes._in_place). NumPy's __array_interface__ costs 1 us an array, on the root's
 * entry, which every rank waits for; this costs 0.06. False where either has no
 * contiguous buffer (the caller then copies, which is right either way). */
static PyObject *same_start(PyObject *Py_UNUSED(module), PyObject *const *args,
                            Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "same_start(a, b)");
        return NULL;
    }
    Py_buffer a, b;
    if (PyObject_GetBuffer(args[0], &a, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    if (PyObject_GetBuffer(args[1], &b, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyBuffer_Release(&a);
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int same = a.buf == b.buf;
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return PyBool_FromLong(same);
}

static PyMethodDef module_methods[] = {
    {"same_start", (PyCFunction)(void (*)(void))same_start, METH_FASTCALL,
     "same_start(a, b) -> bool: whether two contiguous arrays' data start at one address."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_tiny",
    .m_doc = "The arena's hottest round in C (see transport/_tiny.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__tiny(void) {
    if ((dtype_name = PyUnicode_InternFromString("dtype")) == NULL
        || PyType_Ready(&RoundType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RoundType);
    /* the program opcodes this file numbers (a test holds them to _program's) */
    if (PyModule_AddIntConstant(m, "PROGRAM_OPCODES", P_OPCODES) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_PUT", P_PUT) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_ENTER", P_ENTER) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_REDUCE_SLOTS", P_REDUCE_SLOTS) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_COPY", P_COPY) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_EXPECT", P_EXPECT) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_CONSTANT", CONSTANT_BUFFER) < 0
        || PyModule_AddIntConstant(m, "PROGRAM_HEADER", PROGRAM_HEADER) < 0) {
        Py_DECREF(&RoundType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "Round", (PyObject *)&RoundType) < 0) {
        Py_DECREF(&RoundType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
