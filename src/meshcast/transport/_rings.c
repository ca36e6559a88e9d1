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
#include <structmember.h>
#include <linux/futex.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "_copy.h"

#define RING_DATA 128
#define HEADER 32
#define WAKE_ALWAYS 1
#define WAKE_URGENT 2
#define MODE_ADDRESS 1 /* shm.py's _MODE_CMA: the payload is (address, send id) */
#define KIND_FIN 2     /* shm.py's _KIND_FIN: "I copied your message"; tag = send id */
#define ADDRESS 16     /* the payload of an address message: <QQ> */

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
    copy_to_shared(data + start, src, first);
    if (first < n)
        copy_to_shared(data, src + first, n - first);
}

static void ring_read(const char *data, uint64_t size, uint64_t pos, char *dst, uint64_t n) {
    uint64_t start = pos % size, first = n < size - start ? n : size - start;
    copy_bytes(dst, data + start, first);
    if (first < n)
        copy_bytes(dst + first, data, n - first);
}

/* Bump the doorbell at `bell` and wake its owner's progress thread if it sleeps there
 * and asked to be woken for this (urgent: a producer waits for space). */
static void ring_bell(char *bell, int urgent) {
    __atomic_fetch_add((uint32_t *)bell, 1, __ATOMIC_SEQ_CST);
    uint32_t flag = __atomic_load_n((uint32_t *)(bell + 8), __ATOMIC_SEQ_CST);
    if (flag == WAKE_ALWAYS || (urgent && flag == WAKE_URGENT))
        syscall(SYS_futex, (uint32_t *)bell, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

/* Write message `h` (h->nbytes bytes at `buf`) into `ring` if it fits whole: 1 written,
 * 0 not enough free space (nothing written). `bell`: the consumer's. */
static int ring_put_payload(char *ring, uint64_t size, char *bell, const Header *h,
                            const void *buf, uint64_t n) {
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_RELAXED);  /* ours alone */
    uint64_t tail = __atomic_load_n(tail_of(ring), __ATOMIC_ACQUIRE);
    if (size - (head - tail) < HEADER + n)
        return 0;
    ring_write(ring + RING_DATA, size, head, (const char *)h, HEADER);
    if (n)
        ring_write(ring + RING_DATA, size, head + HEADER, buf, n);
    __atomic_store_n(head_of(ring), head + HEADER + n, __ATOMIC_RELEASE);
    ring_bell(bell, 0);
    return 1;
}

static int ring_put(char *ring, uint64_t size, char *bell, const Header *h, const void *buf) {
    return ring_put_payload(ring, size, bell, h, buf, h->nbytes);
}

/* The consumer is done with the first `n` bytes at `tail`: free them, and wake a
 * producer that waits for space (Rule 4). */
static void ring_consumed(char *ring, char *bell, uint64_t tail, uint64_t n) {
    __atomic_store_n(tail_of(ring), tail + n, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(waits_of(ring), __ATOMIC_RELAXED))
        ring_bell(bell, 1);
}

/* Take the first message of `ring` into `buf` (`len` bytes) if it is the one `want`
 * names (group, kind, tag) with exactly `len` bytes and all there: 1 taken, 0 the ring
 * is empty, -1 something else is first (nothing consumed). `bell`: the producer's. */
static int ring_take(char *ring, uint64_t size, char *bell, const Header *want, void *buf,
                     uint64_t len) {
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_ACQUIRE);
    uint64_t tail = __atomic_load_n(tail_of(ring), __ATOMIC_RELAXED);  /* ours alone */
    if (head == tail)
        return 0;
    if (head - tail < HEADER)
        return -1;
    Header h;
    ring_read(ring + RING_DATA, size, tail, (char *)&h, HEADER);
    if (h.group != want->group || h.kind != want->kind || h.tag != want->tag || h.mode != 0 ||
        h.nbytes != len || head - tail < HEADER + h.nbytes)
        return -1;
    ring_read(ring + RING_DATA, size, tail + HEADER, buf, h.nbytes);
    ring_consumed(ring, bell, tail, HEADER + h.nbytes);
    return 1;
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
    int fits = ring_put(ring, size, bell, &h, data.buf);
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
    Py_buffer out;
    if (PyObject_GetBuffer(args[6], &out, PyBUF_WRITABLE) < 0)
        return NULL;
    int state = ring_take(ring, size, bell, &want, out.buf, (uint64_t)out.len);
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

/* ------------------------------------------------------------------ Port
 *
 * A blocking send or receive of a small message to or from one peer of one group, the
 * whole call in C: the transport's checks (ShmTransport.port), its lock, and put or
 * take; and for a large one the single-copy protocol (send_address, the receiver's
 * copy and FIN in recv, the sender's wait for that FIN in fin), whose every step cost
 * the interpreter tens of microseconds. It serves only the quiet case -- the group open, the peer alive, no send queued
 * to the peer, no message from it half received, and no posted receive or unexpected
 * message at all -- and answers -1 otherwise, so that Python decides with the exact
 * matching rules (ShmTransport.send_now/recv_now). A small message's round trip was
 * mostly the interpreter's lookups and frames around put and take. */

typedef struct {
    PyObject_HEAD
    char *out_ring, *out_bell, *in_ring, *in_bell;
    uint64_t size, max_bytes;
    uint64_t copy_bytes;           /* messages this large go single-copy (0: never) */
    long pid;                      /* the peer's, for process_vm_readv */
    uint32_t group, kind;
    PyObject *acquire, *release;   /* the transport lock's bound methods */
    PyObject *transport;           /* for its `_closed` */
    PyObject *sendq, *gone, *peer, *incoming, *j, *posted, *unexpected;
} Port;

static PyObject *closed_name;

static void port_dealloc(Port *self) {
    Py_XDECREF(self->acquire);
    Py_XDECREF(self->release);
    Py_XDECREF(self->transport);
    Py_XDECREF(self->sendq);
    Py_XDECREF(self->gone);
    Py_XDECREF(self->peer);
    Py_XDECREF(self->incoming);
    Py_XDECREF(self->j);
    Py_XDECREF(self->posted);
    Py_XDECREF(self->unexpected);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int port_init(Port *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"out_ring", "out_bell", "in_ring", "in_bell", "size", "max_bytes",
                            "group", "kind", "lock", "transport", "sendq", "gone", "peer",
                            "incoming", "j", "posted", "unexpected", "pid", "copy_bytes",
                            NULL};
    unsigned long long out_ring, out_bell, in_ring, in_bell, size, max_bytes, copy_bytes = 0;
    unsigned long group, kind;
    long pid = 0;
    PyObject *lock, *transport, *sendq, *gone, *peer, *incoming, *j, *posted, *unexpected;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KKKKKKkkOOOOOOOOO|lK", names, &out_ring,
                                     &out_bell, &in_ring, &in_bell, &size, &max_bytes, &group,
                                     &kind, &lock, &transport, &sendq, &gone, &peer, &incoming,
                                     &j, &posted, &unexpected, &pid, &copy_bytes))
        return -1;
    if (!out_ring || !out_bell || !in_ring || !in_bell || size < HEADER) {
        PyErr_SetString(PyExc_ValueError, "a null ring or doorbell, or a ring too small");
        return -1;
    }
    if (!PyList_Check(posted) || !PyList_Check(unexpected) || !PyDict_Check(incoming) ||
        !PyAnySet_Check(gone)) {
        PyErr_SetString(PyExc_TypeError, "posted, unexpected: lists; incoming: a dict; gone: a set");
        return -1;
    }
    self->out_ring = (char *)(uintptr_t)out_ring;
    self->out_bell = (char *)(uintptr_t)out_bell;
    self->in_ring = (char *)(uintptr_t)in_ring;
    self->in_bell = (char *)(uintptr_t)in_bell;
    self->size = size;
    self->max_bytes = max_bytes;
    self->copy_bytes = pid > 0 ? copy_bytes : 0;
    self->pid = pid;
    self->group = (uint32_t)group;
    self->kind = (uint32_t)kind;
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (!release) {
        Py_XDECREF(acquire);
        return -1;
    }
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release);
    Py_XSETREF(self->transport, Py_NewRef(transport));
    Py_XSETREF(self->sendq, Py_NewRef(sendq));
    Py_XSETREF(self->gone, Py_NewRef(gone));
    Py_XSETREF(self->peer, Py_NewRef(peer));
    Py_XSETREF(self->incoming, Py_NewRef(incoming));
    Py_XSETREF(self->j, Py_NewRef(j));
    Py_XSETREF(self->posted, Py_NewRef(posted));
    Py_XSETREF(self->unexpected, Py_NewRef(unexpected));
    return 0;
}

/* The transport is open and the peer alive: 1, 0 not, -1 error. */
static int port_open(Port *self) {
    PyObject *closed = PyObject_GetAttr(self->transport, closed_name);
    if (!closed)
        return -1;
    int open = closed == Py_None;
    Py_DECREF(closed);
    if (!open)
        return 0;
    int gone = PySet_Contains(self->gone, self->peer);
    return gone < 0 ? -1 : !gone;
}

static int port_lock(Port *self) {
    PyObject *got = PyObject_CallNoArgs(self->acquire);
    Py_XDECREF(got);
    return got ? 0 : -1;
}

static int port_unlock(Port *self) {
    PyObject *done = PyObject_CallNoArgs(self->release);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* Under the lock, the quiet case (the transport open, the peer alive, no send to it
 * queued): write one message to the peer, whole into the ring (`address` 0) or as the
 * address of `data` and `send_id` (single-copy). 1 written, 0 no room now, -1 not the
 * quiet case, -2 error. */
static int port_put(Port *self, Py_buffer *data, int64_t tag, int address, uint64_t send_id) {
    if (port_lock(self) < 0)
        return -2;
    int open = port_open(self);
    Py_ssize_t queued = open > 0 ? PyObject_Size(self->sendq) : 0;
    int state = -1;
    if (open > 0 && queued == 0) {
        Header h = {self->group, self->kind, tag, (uint64_t)data->len, 0};
        if (address) {
            uint64_t where[2] = {(uint64_t)(uintptr_t)data->buf, send_id};
            h.mode = MODE_ADDRESS;
            state = ring_put_payload(self->out_ring, self->size, self->out_bell, &h, where,
                                     ADDRESS);
        } else {
            state = ring_put(self->out_ring, self->size, self->out_bell, &h, data->buf);
        }
    }
    int failed = open < 0 || queued < 0;
    if (port_unlock(self) < 0 || failed)
        return -2;
    return state;
}

/* send(data, tag) -> 1 written, 0 no room now, -1 not the quiet case (or data that is
 * not C-contiguous, or too large): nothing written. */
static PyObject *port_send(Port *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send(data, tag)");
        return NULL;
    }
    int64_t tag = PyLong_AsLongLong(args[1]);
    if (tag == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return PyLong_FromLong(-1);
    }
    int state = (uint64_t)data.len < self->max_bytes ? port_put(self, &data, tag, 0, 0) : -1;
    PyBuffer_Release(&data);
    return state == -2 ? NULL : PyLong_FromLong(state);
}

/* Under the lock, the quiet case: take the first message of the ring from the peer if
 * it is the address of the one `tag` names, `out->len` bytes (shm.py's single-copy
 * message): copy it straight out of the sender's memory, then answer with the FIN
 * that completes its send, right behind whatever we sent it before. 1 taken, 0 the
 * ring is empty, -1 something else is first, a send to the peer is queued (the FIN
 * would overtake it), there is no room for the FIN, or the copy failed (nothing
 * consumed: the general path copies again and explains), -2 error. The copy runs
 * without the GIL, the transport's lock held, as the general path's does. */
static int port_take_address(Port *self, Py_buffer *out, int64_t tag) {
    char *ring = self->in_ring;
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_ACQUIRE);
    uint64_t tail = __atomic_load_n(tail_of(ring), __ATOMIC_RELAXED);  /* ours alone */
    if (head == tail)
        return 0;
    if (head - tail < HEADER + ADDRESS)
        return -1;
    Header h;
    uint64_t where[2];  /* the sender's address, its send id */
    ring_read(ring + RING_DATA, self->size, tail, (char *)&h, HEADER);
    if (h.group != self->group || h.kind != self->kind || h.tag != tag ||
        h.mode != MODE_ADDRESS || h.nbytes != (uint64_t)out->len)
        return -1;
    ring_read(ring + RING_DATA, self->size, tail + HEADER, (char *)where, ADDRESS);
    Py_ssize_t queued = PyObject_Size(self->sendq);
    if (queued != 0)
        return queued < 0 ? -2 : -1;
    if (!has_room(self->out_ring, self->size, HEADER))
        return -1;
    int failed;  /* (the peer is gone, or a bad address) */
    char *dst = out->buf;
    size_t n = (size_t)out->len;
    pid_t pid = (pid_t)self->pid;
    Py_BEGIN_ALLOW_THREADS
    failed = copy_across(pid, dst, (uintptr_t)where[0], n, 0);
    Py_END_ALLOW_THREADS
    if (failed)
        return -1;
    ring_consumed(ring, self->in_bell, tail, HEADER + ADDRESS);
    Header fin = {0, KIND_FIN, (int64_t)where[1], 0, 0};
    ring_put_payload(self->out_ring, self->size, self->out_bell, &fin, NULL, 0);
    return 1;
}

/* Take the lock, then whether the ring from the peer is quiet: the transport open, the
 * peer alive, no message from it half received, and with `alone` no posted receive or
 * unexpected message at all. 1 quiet, 0 not, -1 error (the lock held in these three:
 * port_leave releases it), -2 error without the lock. */
static int port_quiet(Port *self, int alone) {
    if (port_lock(self) < 0)
        return -2;
    int open = port_open(self);
    if (open <= 0)
        return open;
    PyObject *partial = PyDict_GetItemWithError(self->incoming, self->j);
    if (PyErr_Occurred())
        return -1;
    if (partial != NULL && partial != Py_None)
        return 0;
    return !alone ||
           (PyList_GET_SIZE(self->posted) == 0 && PyList_GET_SIZE(self->unexpected) == 0);
}

/* Release the lock port_quiet took; `state`, or -2 on an error. */
static int port_leave(Port *self, int state) {
    if (PyErr_Occurred())
        state = -2;
    return port_unlock(self) < 0 ? -2 : state;
}

/* Wait up to `spin` ns for data in the ring from the peer, without the lock and the GIL. */
static int port_wait_data(Port *self, uint64_t spin) {
    int found;
    char *ring = self->in_ring;
    Py_BEGIN_ALLOW_THREADS
    found = spin_until(has_data, ring, 0, 0, spin);
    Py_END_ALLOW_THREADS
    return found;
}

/* One look under the lock: 1 taken, 0 empty, -1 not the quiet case or another message
 * first, -2 error. */
static int port_look(Port *self, Py_buffer *out, int64_t tag) {
    int quiet = port_quiet(self, 1);
    if (quiet == -2)
        return -2;
    int state = quiet < 0 ? -2 : -1;
    if (quiet > 0) {
        Header want = {self->group, self->kind, tag, 0, 0};
        state = ring_take(self->in_ring, self->size, self->in_bell, &want, out->buf,
                          (uint64_t)out->len);
        /* Not in the ring: maybe its address. Of any size: a compiled batch sends
         * single-copy from a smaller size than copy_bytes (Batch, below), and a sender
         * without the compiled port sends large ones through the ring. */
        if (state == -1 && self->copy_bytes)
            state = port_take_address(self, out, tag);
    }
    return port_leave(self, state);
}

/* Look, wait for data without the lock and the GIL, look again: 1 taken, 0 nothing
 * came, -1 not the quiet case or another message first, -2 error. */
static int port_take(Port *self, Py_buffer *out, int64_t tag, uint64_t spin) {
    int state = port_look(self, out, tag);
    if (state == 0) {
        /* ShmTransport.patience: the copy of a large one; and with no spin time (ranks
         * outnumber cores) still the short look-around of spin_until's first 64
         * pauses, as recv_now's wait does, so that both paths take the same messages */
        if (spin)
            spin += (uint64_t)out->len / 2;
        if (port_wait_data(self, spin))
            state = port_look(self, out, tag);
    }
    return state;
}

/* recv(out, tag, spin_ns) -> 1 taken, 0 nothing came within spin_ns (and half a
 * nanosecond a byte: see ShmTransport.patience), -1 not the quiet
 * case, another message first, or `out` not writable and C-contiguous: nothing taken.
 * Looks, then waits for data without the lock and the GIL, then looks again. */
static PyObject *port_recv(Port *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "recv(out, tag, spin_ns)");
        return NULL;
    }
    int64_t tag = PyLong_AsLongLong(args[1]);
    uint64_t spin = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        return PyLong_FromLong(-1);
    }
    int state = port_take(self, &out, tag, spin);
    PyBuffer_Release(&out);
    if (state == -2)
        return NULL;
    return PyLong_FromLong(state);
}

/* send_address(data, tag, send_id) -> 1 written, 0 no room now, -1 not the quiet case (or
 * data not C-contiguous, or smaller than single-copy messages): the single-copy form of
 * send: only data's address and `send_id` go into the ring (shm.py's _MODE_CMA
 * message); the receiver copies the data out of our memory and answers with a FIN
 * naming `send_id` (see fin). The caller keeps data alive and unchanged until then. */
static PyObject *port_send_address(Port *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_address(data, tag, send_id)");
        return NULL;
    }
    int64_t tag = PyLong_AsLongLong(args[1]);
    uint64_t send_id = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return PyLong_FromLong(-1);
    }
    int state = self->copy_bytes && (uint64_t)data.len >= self->copy_bytes
                    ? port_put(self, &data, tag, 1, send_id)
                    : -1;
    PyBuffer_Release(&data);
    return state == -2 ? NULL : PyLong_FromLong(state);
}

/* Under the lock: take the first message from the peer if it is the FIN of `send_id`.
 * 1 taken, 0 empty, -1 something else first or a message half received, -2 error. */
static int port_look_fin(Port *self, uint64_t send_id) {
    int quiet = port_quiet(self, 0);
    if (quiet == -2)
        return -2;
    int state = quiet < 0 ? -2 : -1;
    char *ring = self->in_ring;
    uint64_t head = __atomic_load_n(head_of(ring), __ATOMIC_ACQUIRE);
    uint64_t tail = __atomic_load_n(tail_of(ring), __ATOMIC_RELAXED);  /* ours alone */
    if (quiet > 0 && head == tail) {
        state = 0;
    } else if (quiet > 0 && head - tail >= HEADER) {
        Header h;
        ring_read(ring + RING_DATA, self->size, tail, (char *)&h, HEADER);
        if (h.kind == KIND_FIN && (uint64_t)h.tag == send_id && h.nbytes == 0) {
            ring_consumed(ring, self->in_bell, tail, HEADER);
            state = 1;
        }
    }
    return port_leave(self, state);
}

/* fin(send_id, spin_ns) -> 1 the FIN of a send_address message came first in the ring and
 * is consumed (the send is complete: the caller finishes it), 0 nothing came within
 * spin_ns, -1 something else is first: the general path's progress pass decides.
 * Waits for data without the lock and the GIL. */
static PyObject *port_fin(Port *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fin(send_id, spin_ns)");
        return NULL;
    }
    uint64_t send_id = PyLong_AsUnsignedLongLong(args[0]);
    uint64_t spin = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    int state = port_look_fin(self, send_id);
    if (state == 0 && spin && port_wait_data(self, spin))
        state = port_look_fin(self, send_id);
    if (state == -2)
        return NULL;
    return PyLong_FromLong(state);
}

static PyMethodDef port_methods[] = {
    {"send_address", (PyCFunction)(void (*)(void))port_send_address, METH_FASTCALL,
     "send_address(data, tag, send_id) -> 1 written, 0 no room, -1 the general path."},
    {"fin", (PyCFunction)(void (*)(void))port_fin, METH_FASTCALL,
     "fin(send_id, spin_ns) -> 1 the send's FIN taken, 0 none came, -1 the general path."},
    {"send", (PyCFunction)(void (*)(void))port_send, METH_FASTCALL,
     "send(data, tag) -> 1 written, 0 no room, -1 the general path must decide."},
    {"recv", (PyCFunction)(void (*)(void))port_recv, METH_FASTCALL,
     "recv(out, tag, spin_ns) -> 1 taken, 0 nothing came, -1 the general path must decide."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PortType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast.transport._rings.Port",
    .tp_doc = "Blocking small sends and receives with one peer of one group, in C.",
    .tp_basicsize = sizeof(Port),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)port_init,
    .tp_dealloc = (destructor)port_dealloc,
    .tp_methods = port_methods,
};

/* ------------------------------------------------------------------ batch */

/* A group's batch_isend_irecv (meshcast._api.P2POp objects naming the group, or none
 * for the default one) read straight out of the ops' slots, so that the common case
 * costs one C call from the front door (TinyCallLane.make_batch): the sends written in
 * list order (whole into the ring, waiting for room as long as a receive waits for
 * data, or single-copy as Port.send_address writes them), then the receives taken in
 * list order (as Port.recv), then the single-copy sends' FINs awaited (as Port.fin).
 * The checks are the Python batch's (_api._batch_lane); an op it cannot take as it is
 * returns None before anything moves. */
enum { AT_KIND, AT_TENSOR, AT_PEER, AT_GROUP, AT_TAG, AT_GROUP_PEER, N_AT };
static const char *slot_names[N_AT] = {"kind", "tensor", "peer", "group", "tag", "group_peer"};
static PyObject *dtype_name, *isend_kind, *irecv_kind, *send_verb, *recv_verb;
#define BATCH_MAX 64 /* ops one compiled batch takes (a longer list: the Python batch) */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;      /* batch(ops) without an argument tuple */
    PyObject *op_type, *array_type; /* P2POp, numpy.ndarray: exactly these */
    PyObject *ports;                /* global rank -> Port */
    PyObject *dtypes;               /* dtype -> whether a message may carry it */
    PyObject *works;                /* (verb, peer, tag) -> its finished Work */
    PyObject *seq;                  /* the group's _p2p_seq: numbers the messages */
    PyObject *send_ids;             /* the transport's single-copy send ids */
    PyObject *group;                /* the ops' group (None stands for it if is_default) */
    int is_default;
    Py_ssize_t at[N_AT];            /* where P2POp keeps each slot */
    int64_t tag_min, tag_end;
    uint64_t single_min, spin;      /* single-copy from this many bytes; spin time, ns */
} Batch;

/* (the kept Works name their group, whose lane holds this: a cycle the collector
 * must see through) */
static int batch_traverse(Batch *self, visitproc visit, void *arg) {
    Py_VISIT(self->op_type);
    Py_VISIT(self->array_type);
    Py_VISIT(self->ports);
    Py_VISIT(self->dtypes);
    Py_VISIT(self->works);
    Py_VISIT(self->seq);
    Py_VISIT(self->send_ids);
    Py_VISIT(self->group);
    return 0;
}

static int batch_clear(Batch *self) {
    Py_CLEAR(self->op_type);
    Py_CLEAR(self->array_type);
    Py_CLEAR(self->ports);
    Py_CLEAR(self->dtypes);
    Py_CLEAR(self->works);
    Py_CLEAR(self->seq);
    Py_CLEAR(self->send_ids);
    Py_CLEAR(self->group);
    return 0;
}

static void batch_dealloc(Batch *self) {
    PyObject_GC_UnTrack(self);
    batch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int batch_init(Batch *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"op_type", "array_type", "ports", "dtypes", "works", "seq",
                            "send_ids", "group", "is_default", "tag_min", "tag_end",
                            "single_min", "spin_ns", NULL};
    PyObject *op_type, *array_type, *ports, *dtypes, *works, *seq, *send_ids, *group;
    int is_default;
    long long tag_min, tag_end;
    unsigned long long single_min, spin;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!O!OOOpLLKK", names, &PyType_Type,
                                     &op_type, &PyType_Type, &array_type, &PyDict_Type, &ports,
                                     &PyDict_Type, &dtypes, &PyDict_Type, &works, &seq,
                                     &send_ids, &group, &is_default, &tag_min, &tag_end,
                                     &single_min, &spin))
        return -1;
    for (int i = 0; i < N_AT; i++) {
        PyObject *d = PyObject_GetAttrString(op_type, slot_names[i]);
        if (!d)
            return -1;
        int member = Py_IS_TYPE(d, &PyMemberDescr_Type);
        if (member)
            self->at[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!member) {
            PyErr_Format(PyExc_TypeError, "P2POp.%s is not a slot", slot_names[i]);
            return -1;
        }
    }
    Py_XSETREF(self->op_type, Py_NewRef(op_type));
    Py_XSETREF(self->array_type, Py_NewRef(array_type));
    Py_XSETREF(self->ports, Py_NewRef(ports));
    Py_XSETREF(self->dtypes, Py_NewRef(dtypes));
    Py_XSETREF(self->works, Py_NewRef(works));
    Py_XSETREF(self->seq, Py_NewRef(seq));
    Py_XSETREF(self->send_ids, Py_NewRef(send_ids));
    Py_XSETREF(self->group, Py_NewRef(group));
    self->is_default = is_default;
    self->tag_min = tag_min;
    self->tag_end = tag_end;
    self->single_min = single_min;
    self->spin = spin;
    return 0;
}

/* The kind slot: 1 a send, 0 a receive, -1 neither (then nothing is done here). */
static int send_kind(PyObject *kind) {
    if (kind == isend_kind)
        return 1;
    if (kind == irecv_kind)
        return 0;
    if (!PyUnicode_Check(kind))
        return -1;
    if (PyUnicode_Compare(kind, isend_kind) == 0)
        return 1;
    return PyUnicode_Compare(kind, irecv_kind) == 0 ? 0 : -1;
}

typedef struct {
    Port *port;          /* the peer's (borrowed) */
    PyObject *peer, *tag; /* the op's (borrowed) */
    int64_t tag_value;
    int sends, has_buf;
    Py_buffer buf;
    long state;          /* 1 done, 0 not done, -send_id: a send whose FIN is to come */
} BatchOp;

/* One op read and checked: 1 taken (its buffer held), 0 not one this call takes. */
static int batch_op(Batch *self, PyObject *op, BatchOp *o) {
    if (!Py_IS_TYPE(op, (PyTypeObject *)self->op_type))
        return 0;
    PyObject *v[N_AT];
    for (int i = 0; i < N_AT; i++)
        if (!(v[i] = *(PyObject **)((char *)op + self->at[i])))
            return 0;
    o->sends = send_kind(v[AT_KIND]);
    if (o->sends < 0 || !Py_IS_TYPE(v[AT_TENSOR], (PyTypeObject *)self->array_type) ||
        !PyLong_CheckExact(v[AT_PEER]) || !PyLong_CheckExact(v[AT_TAG]) ||
        v[AT_GROUP_PEER] != Py_None ||
        (v[AT_GROUP] != self->group && !(v[AT_GROUP] == Py_None && self->is_default)))
        return 0;
    int overflow;
    o->tag_value = PyLong_AsLongLongAndOverflow(v[AT_TAG], &overflow);
    if (overflow || o->tag_value < self->tag_min || o->tag_value >= self->tag_end)
        return 0;
    PyObject *port = PyDict_GetItemWithError(self->ports, v[AT_PEER]);
    if (!port || !Py_IS_TYPE(port, &PortType))
        return 0;
    PyObject *dtype = PyObject_GetAttr(v[AT_TENSOR], dtype_name);
    if (!dtype)
        return 0;
    PyObject *ok = PyDict_GetItemWithError(self->dtypes, dtype);
    Py_DECREF(dtype);
    if (ok != Py_True)
        return 0;
    int flags = PyBUF_C_CONTIGUOUS | (o->sends ? 0 : PyBUF_WRITABLE);
    if (PyObject_GetBuffer(v[AT_TENSOR], &o->buf, flags) < 0)
        return 0;
    o->has_buf = 1;
    o->port = (Port *)port;
    o->peer = v[AT_PEER];
    o->tag = v[AT_TAG];
    o->state = 0;
    return 1;
}

/* Write a send whole into the ring (waiting up to the patience for room) or as its
 * address: port_put's 1 written, 0 no room, -1 not the quiet case, -2 error. */
static int batch_put(Batch *self, BatchOp *o, uint64_t send_id) {
    Port *port = o->port;
    int address = send_id != 0;
    if (!address && (uint64_t)o->buf.len >= port->max_bytes)
        return 0;
    int sent = port_put(port, &o->buf, o->tag_value, address, send_id);
    if (sent == 0 && !address && self->spin) {
        int room;
        char *ring = port->out_ring;
        uint64_t size = port->size, need = HEADER + (uint64_t)o->buf.len;
        uint64_t patience = self->spin + (uint64_t)o->buf.len / 2;  /* (ShmTransport.patience) */
        Py_BEGIN_ALLOW_THREADS
        room = spin_until(has_room, ring, size, need, patience);
        Py_END_ALLOW_THREADS
        if (room)
            sent = port_put(port, &o->buf, o->tag_value, address, send_id);
    }
    return sent;
}

/* The receives in list order from `from`, up to the first that is not taken (a later
 * one could take a message an earlier one matches): the index of that one, or n. */
static Py_ssize_t batch_receive(Batch *self, BatchOp *o, Py_ssize_t from, Py_ssize_t n) {
    for (Py_ssize_t i = from; i < n; i++) {
        if (o[i].sends)
            continue;
        if (port_take(o[i].port, &o[i].buf, o[i].tag_value, self->spin) != 1) {
            PyErr_Clear(); /* (the general path meets it again) */
            return i;
        }
        o[i].state = 1;
    }
    return n;
}

/* batch(ops) -> a list of one Work per op, in op order: every op done, its finished Work
 * kept; None: not a list this call takes, nothing done; False: some send could be
 * written and none was (the general batch posts them all); or a tuple of every op's
 * state (1 done, 0 not done: the general path's turn, -send_id: a single-copy send
 * whose FIN is still to come) for TinyCallLane.batch_done. The ops done are
 * numbered (the group's _p2p_seq). */
static PyObject *batch_call(Batch *self, PyObject *ops) {
    if (!PyList_CheckExact(ops) || PyList_GET_SIZE(ops) == 0 ||
        PyList_GET_SIZE(ops) > BATCH_MAX)
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(ops), taken = 0, sends = 0;
    BatchOp o[BATCH_MAX];
    for (; taken < n; taken++) {
        o[taken].has_buf = 0;
        if (!batch_op(self, PyList_GET_ITEM(ops, taken), &o[taken]))
            break;
        sends += o[taken].sends;
    }
    PyObject *result = NULL;
    if (taken < n) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* the sends in order, up to the first that cannot be written now (later ones must
     * not overtake it) */
    Py_ssize_t written = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!o[i].sends)
            continue;
        uint64_t send_id = 0;
        if ((uint64_t)o[i].buf.len >= self->single_min && o[i].port->copy_bytes) {
            PyObject *id = PyIter_Next(self->send_ids);
            send_id = id ? PyLong_AsUnsignedLongLong(id) : 0;
            Py_XDECREF(id);
            if (!send_id) {
                PyErr_Clear();
                break;
            }
        }
        int sent = batch_put(self, &o[i], send_id);
        if (sent != 1) {
            PyErr_Clear();
            break;
        }
        o[i].state = send_id ? -(long)send_id : 1;
        written++;
    }
    if (sends && !written) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    Py_ssize_t stuck = batch_receive(self, o, 0, n);
    int fins = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o[i].state >= 0)
            continue;
        Port *port = o[i].port;
        uint64_t send_id = (uint64_t)(-o[i].state);
        uint64_t patience = self->spin ? self->spin + (uint64_t)o[i].buf.len / 2 : 0;
        int fin = port_look_fin(port, send_id);
        if (fin == 0 && patience && port_wait_data(port, patience))
            fin = port_look_fin(port, send_id);
        if (fin == 1) {
            o[i].state = 1;
            fins = 1;
        }
        PyErr_Clear();
    }
    /* a peer that answered before it sent: its message sat behind our FIN */
    if (fins && stuck < n)
        batch_receive(self, o, stuck, n);
    int all_done = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o[i].state != 0) /* numbered like any message, for later ones */
            Py_XDECREF(PyIter_Next(self->seq));
        all_done &= o[i].state == 1;
    }
    PyErr_Clear(); /* (a counter does not fail; the messages moved regardless) */
    if (all_done) {
        PyObject *list = PyList_New(n);
        for (Py_ssize_t i = 0; list && i < n; i++) {
            PyObject *key = PyTuple_Pack(3, o[i].sends ? send_verb : recv_verb, o[i].peer,
                                         o[i].tag);
            PyObject *work = key ? PyDict_GetItemWithError(self->works, key) : NULL;
            Py_XDECREF(key);
            if (!work) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, i, Py_NewRef(work));
        }
        PyErr_Clear();
        if (list) {
            result = list;
            goto done;
        }
    }
    result = PyTuple_New(n);
    for (Py_ssize_t i = 0; result && i < n; i++) {
        PyObject *state = PyLong_FromLong(o[i].state);
        if (!state) {
            Py_CLEAR(result);
            break;
        }
        PyTuple_SET_ITEM(result, i, state);
    }
done:
    for (Py_ssize_t i = 0; i < n && i <= taken; i++) /* (past `taken`: never read) */
        if (o[i].has_buf)
            PyBuffer_Release(&o[i].buf);
    return result;
}

static PyObject *batch_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames) {
        PyErr_SetString(PyExc_TypeError, "batch(ops)");
        return NULL;
    }
    return batch_call((Batch *)self, args[0]);
}

static PyObject *batch_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Batch *self = (Batch *)PyType_GenericNew(type, args, kwds);
    if (self)
        self->vectorcall = batch_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast.transport._rings.Batch",
    .tp_doc = "batch_isend_irecv of P2POps of one group, straight from the ops, in C.",
    .tp_basicsize = sizeof(Batch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_new = batch_new,
    .tp_traverse = (traverseproc)batch_traverse,
    .tp_clear = (inquiry)batch_clear,
    .tp_init = (initproc)batch_init,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Batch, vectorcall),
};

/* copy_across(pid, address, buffer, write) -> 0 done, else an errno: buffer's bytes
 * from address in process pid (write false), or to it (write true), without the GIL,
 * through _copy.h's copy_across (a bounce buffer at short distances). cma.py's copies. */
static PyObject *copy_across_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "copy_across(pid, address, buffer, write)");
        return NULL;
    }
    long pid = PyLong_AsLong(args[0]);
    unsigned long long address = PyLong_AsUnsignedLongLong(args[1]);
    int write = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || write < 0)
        return NULL;
    Py_buffer local;
    int flags = write ? PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE;
    if (PyObject_GetBuffer(args[2], &local, flags) < 0)
        return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = copy_across((pid_t)pid, local.buf, (uintptr_t)address, (size_t)local.len, write);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&local);
    return PyLong_FromLong(err);
}

static PyMethodDef methods[] = {
    {"copy_across", (PyCFunction)(void (*)(void))copy_across_py, METH_FASTCALL,
     "copy_across(pid, address, buffer, write) -> 0 done, else an errno."},
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

PyMODINIT_FUNC PyInit__rings(void) {
    closed_name = PyUnicode_InternFromString("_closed");
    dtype_name = PyUnicode_InternFromString("dtype");
    isend_kind = PyUnicode_InternFromString("isend");
    irecv_kind = PyUnicode_InternFromString("irecv");
    send_verb = PyUnicode_InternFromString("send");
    recv_verb = PyUnicode_InternFromString("recv");
    if (!closed_name || !dtype_name || !isend_kind || !irecv_kind || !send_verb ||
        !recv_verb || PyType_Ready(&PortType) < 0 || PyType_Ready(&BatchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddObjectRef(m, "Port", (PyObject *)&PortType) < 0 ||
              PyModule_AddObjectRef(m, "Batch", (PyObject *)&BatchType) < 0))
        Py_CLEAR(m);
    return m;
}
