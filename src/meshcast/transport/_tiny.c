/* The arena's hottest round, compiled: copy in, fingerprint, signal, spin, compare.
 *
 * A tiny collective spends its few microseconds in interpreter work, not in
 * waiting (see meshcast.small_calls). This module does the mechanical middle
 * of one round of the arena protocol (transport/arena.py, whose rules it
 * follows exactly) in one C call; everything that can go wrong or must wait
 * long is handed back to Python, which owns the slow paths and the messages:
 *
 *   0  every rank reached the phase and published the same fingerprint;
 *   1  every rank reached the phase but some fingerprint differs
 *      (Python compares and raises MismatchError, or reads the counts);
 *   2  some rank has not reached the phase within the spin budget
 *      (Python waits: yield, futex, liveness, timeout, abort; then compares);
 *   3  the group's abort word is set (Python raises what it says).
 *
 * Layout constants come from Python (Arena.layout), so this file knows no
 * offsets of its own. Memory order: the data and the fingerprint are written
 * before the signal word is stored (sequentially consistent), and the signal
 * store is ordered before reading the sleeping words (a Dekker pair with
 * Arena._wait_one, which publishes "sleeping on r" and then re-reads r's word).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define PHASE_BITS 24

typedef struct {
    PyObject_HEAD
    char *base;         /* the mapped segment */
    Py_ssize_t n, rank;
    Py_ssize_t ranks_off, fp_off, small_off, small_bytes, fp_size;
    unsigned long long yield_ns; /* how long to yield after spinning */
    PyObject *keep;     /* an object that keeps the mapping alive */
} Round;

static inline uint64_t *word(Round *s, Py_ssize_t r) {
    return (uint64_t *)(s->base + s->ranks_off + r * LINE);
}

static inline uint32_t *sleeping(Round *s, Py_ssize_t r) {
    return (uint32_t *)(s->base + s->ranks_off + r * LINE + 8);
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
static int arrived(Round *s, uint64_t target, uint64_t spin_ns, uint64_t yield_ns) {
    uint64_t start = 0;
    int yielding = 0;
    for (Py_ssize_t r = 0; r < s->n; r++) {
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

static void Round_dealloc(Round *self) {
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* run(seq, phase, packed, data, spin_ns[, expected]) -> status (see the top of the file).
 *
 * data: None, or a C-contiguous buffer copied into this rank's one-shot region
 * of parity seq & 1 before signalling.
 * expected: a tuple of every rank's expected fingerprint (gather and scatter,
 * whose root's differs); without it every rank's must equal packed.
 */
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
    if (__atomic_load_n((uint32_t *)self->base, __ATOMIC_ACQUIRE))
        return PyLong_FromLong(3);
    int parity = (int)(seq & 1);
    if (args[3] != Py_None) {
        Py_buffer view;
        if (PyObject_GetBuffer(args[3], &view, PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        if (view.len > self->small_bytes) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "data larger than a one-shot region");
            return NULL;
        }
        memcpy(region(self, self->rank, parity), view.buf, (size_t)view.len);
        PyBuffer_Release(&view);
    }
    memcpy(fingerprint(self, self->rank, parity), packed, (size_t)packed_len);
    uint64_t target = ((uint64_t)seq << PHASE_BITS) | (uint64_t)phase;
    __atomic_store_n(word(self, self->rank), target, __ATOMIC_SEQ_CST);
    for (Py_ssize_t r = 0; r < self->n; r++) {
        if (__atomic_load_n(sleeping(self, r), __ATOMIC_SEQ_CST) == (uint32_t)(self->rank + 1)) {
            syscall(SYS_futex, (uint32_t *)word(self, self->rank), FUTEX_WAKE, INT32_MAX, NULL,
                    NULL, 0);
            break;
        }
    }
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = arrived(self, target, spin_ns, self->yield_ns);
    Py_END_ALLOW_THREADS
    if (!ok)
        return PyLong_FromLong(2);
    for (Py_ssize_t r = 0; r < self->n; r++) {
        const char *want = packed;
        if (expected != NULL) {
            PyObject *e = PyTuple_GET_ITEM(expected, r);
            if (!PyBytes_Check(e) || PyBytes_GET_SIZE(e) != packed_len)
                return PyLong_FromLong(1); /* Python compares and explains */
            want = PyBytes_AS_STRING(e);
        }
        if (memcmp(fingerprint(self, r, parity), want, (size_t)packed_len) != 0)
            return PyLong_FromLong(1);
    }
    return PyLong_FromLong(0);
}

static PyMethodDef Round_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Round_run, METH_FASTCALL,
     "run(seq, phase, packed, data, spin_ns[, expected]) -> status: one arena round (see the module)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast.transport._tiny.Round",
    .tp_doc = "One rank's view of an arena for compiled tiny rounds.",
    .tp_basicsize = sizeof(Round),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Round_init,
    .tp_dealloc = (destructor)Round_dealloc,
    .tp_methods = Round_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_tiny",
    .m_doc = "The arena's hottest round in C (see transport/_tiny.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__tiny(void) {
    if (PyType_Ready(&RoundType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RoundType);
    if (PyModule_AddObject(m, "Round", (PyObject *)&RoundType) < 0) {
        Py_DECREF(&RoundType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
