/* A blocking send or receive of a small message through one shared-memory ring, in C
 * (meshcast.transport.shm: ShmTransport.send_now and recv_now).
 *
 * The Python side decides whether a message may take this way (under the transport's
 * lock: no queued send, no earlier message or posted receive that could claim it, the
 * peer alive); these functions only move the bytes and keep the ring's protocol (the
 * module docstring of shm.py, Rules 2 and 4): the producer writes the header and data,
 * then `head` (release), then bumps the consumer's doorbell and wakes its progress
 * thread if that asked to be woken; the consumer reads `head` (acquire), then the
 * message, then writes `tail` (release) and wakes a producer that waits for space.
 * What they save is the interpreter's work on a dozen shared words per message, which
 * is most of a small send's time.
 *
 * A ring at address `ring`: head u64 at +0, "producer waits for space" u64 at +8, tail
 * u64 at +64, data from +128 (`size` bytes). A doorbell line: the bell u32 at +0 and
 * the sleeping flag u32 at +8 (0 never wake, 1 always, 2 only when urgent).
 * A message: header <IIqQQ> (group, kind, tag, nbytes, mode) and nbytes of data. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING_DATA 128
#define HEADER 32
#define WAKE_ALWAYS 1
#define WAKE_URGENT 2

typedef struct {
    uint32_t group, kind;
    int64_t tag;
    uint64_t nbytes, mode;
} Header;

static inline uint64_t *head_of(char *ring) { return (uint64_t *)ring; }
static inline uint64_t *waits_of(char *ring) { return (uint64_t *)(ring + 8); }
static inline uint64_t *tail_of(char *ring) { return (uint64_t *)(ring + 64); }

/* Copy n bytes into the ring from position pos (which wraps at size), or out of it. */
static void ring_write(char *data, uint64_t size, uint64_t pos, const char *src, uint64_t n) {
    uint64_t start = pos % size, first = n < size - start ? n : size - start;
    memcpy(data + start, src, first);
    if (first < n)
        memcpy(data, src + first, n - first);
}

static void ring_read(const char *data, uint64_t size, uint64_t pos, char *dst, uint64_t n) {
    uint64_t start = pos % size, first = n < size - start ? n : size - start;
    memcpy(dst, data + start, first);
    if (first < n)
        memcpy(dst + first, data, n - first);
}

/* Bump the doorbell at `bell` and wake its owner's progress thread if it sleeps there
 * and asked to be woken for this (urgent: a producer waits for space). */
static void ring_bell(char *bell, int urgent) {
    __atomic_fetch_add((uint32_t *)bell, 1, __ATOMIC_SEQ_CST);
    uint32_t flag = __atomic_load_n((uint32_t *)(bell + 8), __ATOMIC_SEQ_CST);
    if (flag == WAKE_ALWAYS || (urgent && flag == WAKE_URGENT))
        syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

/* The leading arguments of put and take: (ring, size, bell, group, kind, tag). */
static int message_args(PyObject *const *args, char **ring, uint64_t *size, char **bell,
                        Header *h) {
    *ring = (char *)(uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    *size = PyLong_AsUnsignedLongLong(args[1]);
    *bell = (char *)(uintptr_t)PyLong_AsUnsignedLongLong(args[2]);
    *h = (Header){(uint32_t)PyLong_AsUnsignedLong(args[3]),
                  (uint32_t)PyLong_AsUnsignedLong(args[4]), PyLong_AsLongLong(args[5]), 0, 0};
    if (PyErr_Occurred())
        return -1;
    if (!*ring || !*bell || *size < HEADER) {
        PyErr_SetString(PyExc_ValueError, "a null ring or doorbell, or a ring too small");
        return -1;
    }
    return 0;
}

/* put(ring, size, bell, group, kind, tag, data) -> True when the whole message was
 * written (False: not enough free space, nothing written). `bell`: the consumer's. */
static PyObject *put(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "put(ring, size, bell, group, kind, tag, data)");
        return NULL;
    }
    char *ring, *bell;
    uint64_t size;
    Header h;
    if (message_args(args, &ring, &size, &bell, &h) < 0)
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[6], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    h.nbytes = (uint64_t)data.len;
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_RELAXED);  /* ours alone */
    uint64_t tail = __atomic_load_n(tail_of(ring), __ATOMIC_ACQUIRE);
    int fits = size - (head - tail) >= HEADER + h.nbytes;
    if (fits) {
        ring_write(ring + RING_DATA, size, head, (const char *)&h, HEADER);
        ring_write(ring + RING_DATA, size, head + HEADER, data.buf, h.nbytes);
        __atomic_store_n(head_of(ring), head + HEADER + h.nbytes, __ATOMIC_RELEASE);
        ring_bell(bell, 0);
    }
    PyBuffer_Release(&data);
    return PyBool_FromLong(fits);
}

/* take(ring, size, bell, group, kind, tag, out) -> 1 the first message in the ring was
 * this one and is now in `out` (its size), 0 the ring is empty, -1 something else is
 * first (or only part of it is there): nothing consumed. `bell`: the producer's. */
static PyObject *take(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "take(ring, size, bell, group, kind, tag, out)");
        return NULL;
    }
    char *ring, *bell;
    uint64_t size;
    Header want;
    if (message_args(args, &ring, &size, &bell, &want) < 0)
        return NULL;
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_ACQUIRE);
    uint64_t tail = __atomic_load_n(tail_of(ring), __ATOMIC_RELAXED);  /* ours alone */
    if (head == tail)
        return PyLong_FromLong(0);
    if (head - tail < HEADER)
        return PyLong_FromLong(-1);
    Py_buffer out;
    if (PyObject_GetBuffer(args[6], &out, PyBUF_WRITABLE) < 0)
        return NULL;
    Header h;
    ring_read(ring + RING_DATA, size, tail, (char *)&h, HEADER);
    long state = -1;
    if (h.group == want.group && h.kind == want.kind && h.tag == want.tag && h.mode == 0 &&
        h.nbytes == (uint64_t)out.len && head - tail >= HEADER + h.nbytes) {
        ring_read(ring + RING_DATA, size, tail + HEADER, out.buf, h.nbytes);
        __atomic_store_n(tail_of(ring), tail + HEADER + h.nbytes, __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (__atomic_load_n(waits_of(ring), __ATOMIC_RELAXED))
            ring_bell(bell, 1);
        state = 1;
    }
    PyBuffer_Release(&out);
    return PyLong_FromLong(state);
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The ring holds data not consumed yet (the consumer's look). */
static int has_data(char *ring, uint64_t size, uint64_t need) {
    (void)size, (void)need;
    return __atomic_load_n(head_of(ring), __ATOMIC_ACQUIRE) !=
           __atomic_load_n(tail_of(ring), __ATOMIC_RELAXED);
}

/* The ring has `need` bytes free (the producer's look: head is its own). */
static int has_room(char *ring, uint64_t size, uint64_t need) {
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_RELAXED);
    return size - (head - __atomic_load_n(tail_of(ring), __ATOMIC_ACQUIRE)) >= need;
}

/* Look at the ring until `ready` or spin_ns passed: a pause between looks, a yield every
 * 64th (the peer may share our core). Called without the GIL. */
static int spin_until(int (*ready)(char *, uint64_t, uint64_t), char *ring, uint64_t size,
                      uint64_t need, uint64_t spin) {
    uint64_t until = now_ns() + spin;
    for (unsigned k = 1;; k++) {
        if (ready(ring, size, need))
            return 1;
        if ((k & 63) == 0) {
            if (now_ns() >= until)
                return 0;
            sched_yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            __asm__ __volatile__("yield");
#endif
        }
    }
}

/* wait(ring, spin_ns) -> whether the ring holds data that were not there when called
 * or are there now, within spin_ns. The GIL is released meanwhile. */
static PyObject *wait_data(PyObject *Py_UNUSED(module), PyObject *const *args,
                           Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wait(ring, spin_ns)");
        return NULL;
    }
    char *ring = (char *)(uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    uint64_t spin = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (!ring) {
        PyErr_SetString(PyExc_ValueError, "a null ring");
        return NULL;
    }
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = spin_until(has_data, ring, 0, 0, spin);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(found);
}

/* room(ring, size, need, spin_ns) -> whether the ring has `need` bytes free within
 * spin_ns (the producer's side: the consumer is copying out an earlier message). The
 * GIL is released meanwhile. */
static PyObject *room(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "room(ring, size, need, spin_ns)");
        return NULL;
    }
    char *ring = (char *)(uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    uint64_t size = PyLong_AsUnsignedLongLong(args[1]);
    uint64_t need = PyLong_AsUnsignedLongLong(args[2]);
    uint64_t spin = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!ring) {
        PyErr_SetString(PyExc_ValueError, "a null ring");
        return NULL;
    }
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = spin_until(has_room, ring, size, need, spin);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"put", (PyCFunction)(void (*)(void))put, METH_FASTCALL,
     "put(ring, size, bell, group, kind, tag, data) -> whether the message was written."},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(ring, size, bell, group, kind, tag, out) -> 1 taken, 0 empty, -1 another first."},
    {"wait", (PyCFunction)(void (*)(void))wait_data, METH_FASTCALL,
     "wait(ring, spin_ns) -> whether the ring holds data within spin_ns."},
    {"room", (PyCFunction)(void (*)(void))room, METH_FASTCALL,
     "room(ring, size, need, spin_ns) -> whether need bytes are free within spin_ns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_rings",
    .m_doc = "A small message through a shared-memory ring, in C (see transport/_rings.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__rings(void) { return PyModule_Create(&module); }
