/* A program of row exchanges over MPI, run in C.
 *
 * Every call of a group that spans hosts starts with an exchange of rows
 * (meshcast.spanning): every rank's row must reach every rank's table. Over MPI
 * the rows go straight between ranks, in one phase or in two (to the other hosts'
 * ranks first, then inside the host, forwarding what came in), as the program that
 * Python builds says (meshcast.algorithms.hierarchical.agreement_steps). Through
 * mpi4py every post and every test is interpreter work, and on a machine whose
 * cores the ranks share, every rank's interpreter work sits on every other rank's
 * critical path; here a whole exchange is one C call.
 *
 * The program: phases, run one after the other; each phase a list of operations
 * (kind, peer, rows): kind 0 receives the rows `rows` from `peer`, kind 1 sends them
 * to `peer`. Row r lives in the table at r * cap. A row travels at its own length,
 * which the row says: len_base + max(0, the int32 at len_word in the row), at most
 * cap. So a row forwarded in the second phase travels at whatever length it arrived
 * with, which the sender cannot know when the program is built.
 *
 * Several rows to one peer go as one message when they are short: the first row at
 * its length, the others after it in the spare room of the first row's place (the
 * sender's and the receiver's), at most pack_max bytes in all. Every message costs
 * each rank MPI's per-message work on cores the ranks share, so at 2 emulated hosts x
 * 2 ranks the second phase's two rows a mate as one message made an 8 B all_reduce
 * faster (see PACK_BYTES in meshcast/transport/mpi_rows.py). Longer rows go one
 * message each, each straight into its place: copying them would cost more than the
 * message saved. The receiver cannot know in advance which it will be: it receives
 * the first message into the first row's place, and its length (MPI_Get_count) says
 * whether the other rows came with it (they are then copied out) or follow, one
 * message each, which it then receives in a second batch (same peer and tag: MPI
 * keeps one sender's messages in order).
 *
 * run(first, polls) posts phase `first` and goes on; between tests it yields the
 * core, at most `polls` times in all. It returns the number of phases completed:
 * len(program) when all are done, else the index of the phase still active. Python
 * then waits with test() (its deadline, the hosts' heartbeats, failure notices) and
 * calls run again from the next phase. An MPI error code raises
 * RuntimeError(code, phase): Python makes it an MPI exception and explains it.
 *
 * MPI's functions come as addresses from Python (those of the library mpi4py
 * loaded) and its handles as integers (mpi4py's _handleof), with the sizes of
 * MPI_Request and MPI_Status, so this builds without an MPI header and works
 * whether the library's handles are ints (MPICH) or pointers (Open MPI): both pass
 * in one integer register.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_copy.h"

typedef int (*isend_fn)(const void *, int, intptr_t, int, int, intptr_t, void *);
typedef int (*irecv_fn)(void *, int, intptr_t, int, int, intptr_t, void *);
typedef int (*testall_fn)(int, void *, int *, void *);
typedef int (*get_count_fn)(const void *, intptr_t, int *);

typedef struct {
    int kind, peer;
    Py_ssize_t first, nrows;  /* rows[first .. first + nrows) of Rows.rows_of */
    Py_ssize_t packer;        /* a send of several rows: the step of its phase that packs
                               * the same rows (itself or an earlier one) */
    Py_ssize_t packed;        /* that step's message this call: its length, -1: unpacked */
    Py_ssize_t request;       /* a receive: its request's index in the first batch */
    int early;                /* a receive posted with the phase before (see find_early) */
} Step;

typedef struct {
    PyObject_HEAD
    isend_fn isend;
    irecv_fn irecv;
    testall_fn testall;
    get_count_fn get_count;
    intptr_t comm, byte;
    int tag;
    char *table;
    Py_ssize_t cap, rows, len_base, len_word, pack_max;
    Step *steps;            /* every phase's operations, back to back */
    Py_ssize_t *rows_of;    /* the operations' rows, back to back */
    Py_ssize_t *bounds;     /* phase p is steps [bounds[p], bounds[p + 1]) */
    Py_ssize_t nphases, active;
    int batch;              /* the active phase's batch: 1 or 2 */
    int lo, nreq, follow;   /* its requests [lo, lo + nreq); sends of rows that follow */
    Py_ssize_t region;      /* MPI_Requests a phase may need: one per row of the largest */
    Py_ssize_t base;        /* the active phase's first request: (phase & 1) * region */
    Py_ssize_t preposted;   /* the phase whose early receives are posted, or -1 */
    int npre;               /* how many */
    char *requests;         /* two regions: a phase's requests, the next one's early ones */
    Py_ssize_t request_size, status_size;
    char *statuses;
    PyObject *keep;         /* the table's owner */
} Rows;

static void Rows_free(Rows *self) {
    PyMem_Free(self->steps);
    PyMem_Free(self->rows_of);
    PyMem_Free(self->bounds);
    PyMem_Free(self->requests);
    PyMem_Free(self->statuses);
    self->steps = NULL;
    self->rows_of = NULL;
    self->bounds = NULL;
    self->requests = NULL;
    self->statuses = NULL;
    self->nphases = 0;
    self->active = -1;
    self->preposted = -1;
    Py_CLEAR(self->keep);
}

/* One operation (kind, peer, rows) into *s, its rows at self->rows_of[at ...]: the number
 * of rows, or -1 with an exception (rows NULL: count them only). */
static Py_ssize_t parse_step(Rows *self, PyObject *op, Step *s, Py_ssize_t at) {
    PyObject *rows_obj;
    int kind, peer;
    if (!PyArg_ParseTuple(op, "iiO", &kind, &peer, &rows_obj))
        return -1;
    PyObject *rows = PySequence_Fast(rows_obj, "an operation's rows must be a sequence");
    if (rows == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows);
    int bad = (kind != 0 && kind != 1) || peer < 0 || n < 1;
    for (Py_ssize_t k = 0; k < n && !bad && s != NULL; k++) {
        Py_ssize_t row = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(rows, k));
        if (row == -1 && PyErr_Occurred()) {
            Py_DECREF(rows);
            return -1;
        }
        bad = row < 0 || row >= self->rows;
        self->rows_of[at + k] = row;
    }
    Py_DECREF(rows);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "Rows: a bad operation in the program");
        return -1;
    }
    if (s != NULL) {
        s->kind = kind;
        s->peer = peer;
        s->first = at;
        s->nrows = n;
        s->packer = -1;
        s->packed = -1;
        s->request = -1;
        s->early = 0;
    }
    return n;
}

/* Whether two operations name the same rows in the same order. */
static int same_rows(Rows *self, const Step *a, const Step *b) {
    return a->nrows == b->nrows &&
           memcmp(self->rows_of + a->first, self->rows_of + b->first,
                  a->nrows * sizeof(Py_ssize_t)) == 0;
}

/* Which step packs each send of several rows: the first of its phase with the same rows
 * (the second phase sends every mate the same rows: packed once, sent to each). */
static void find_packers(Rows *self) {
    for (Py_ssize_t p = 0; p < self->nphases; p++) {
        for (Py_ssize_t i = self->bounds[p]; i < self->bounds[p + 1]; i++) {
            Step *s = &self->steps[i];
            if (s->kind != 1 || s->nrows < 2)
                continue;
            s->packer = i;
            for (Py_ssize_t j = self->bounds[p]; j < i; j++) {
                if (self->steps[j].packer == j && same_rows(self, s, &self->steps[j])) {
                    s->packer = j;
                    break;
                }
            }
        }
    }
}

/* Which receives post with the phase before theirs: those from a peer that sends nothing
 * in that phase, so that no message of it can match them (a peer's messages with one tag
 * match receives in the order they were posted). Their messages then find a receive
 * waiting instead of going to MPI's unexpected queue (a copy, a search when the receive
 * comes), and the rank that sends them does not wait for this one to get there. */
static void find_early(Rows *self) {
    for (Py_ssize_t p = 1; p < self->nphases; p++) {
        for (Py_ssize_t i = self->bounds[p]; i < self->bounds[p + 1]; i++) {
            Step *s = &self->steps[i];
            s->early = s->kind == 0;
            for (Py_ssize_t j = self->bounds[p - 1]; j < self->bounds[p] && s->early; j++)
                if (self->steps[j].kind == 0 && self->steps[j].peer == s->peer)
                    s->early = 0;
        }
    }
}

static int parse_program(Rows *self, PyObject *program) {
    PyObject *phases = PySequence_Fast(program, "the program must be a sequence of phases");
    if (phases == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(phases), total = 0, largest = 0;
    Py_ssize_t nrows = 0, width = 0;  /* rows in all; rows in the phase being read */
    int ok = 0;
    self->bounds = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (self->bounds == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t p = 0; p < n; p++) {
        PyObject *phase = PySequence_Fast(PySequence_Fast_GET_ITEM(phases, p), "a phase");
        if (phase == NULL)
            goto done;
        Py_ssize_t len = PySequence_Fast_GET_SIZE(phase);
        for (Py_ssize_t k = 0; k < len; k++) {
            Py_ssize_t got = parse_step(self, PySequence_Fast_GET_ITEM(phase, k), NULL, 0);
            if (got < 0) {
                Py_DECREF(phase);
                goto done;
            }
            nrows += got;
            width += got;
        }
        Py_DECREF(phase);
        total += len;
        largest = width > largest ? width : largest;
        width = 0;
        self->bounds[p + 1] = total;
    }
    self->steps = PyMem_Calloc(total ? total : 1, sizeof(Step));
    self->rows_of = PyMem_Calloc(nrows ? nrows : 1, sizeof(Py_ssize_t));
    self->region = largest ? largest : 1;
    self->requests = PyMem_Calloc(2 * self->region, self->request_size);
    if (self->steps == NULL || self->rows_of == NULL || self->requests == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t i = 0, at = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        PyObject *phase = PySequence_Fast(PySequence_Fast_GET_ITEM(phases, p), "a phase");
        if (phase == NULL)
            goto done;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(phase); k++, i++) {
            Py_ssize_t got = parse_step(self, PySequence_Fast_GET_ITEM(phase, k),
                                        &self->steps[i], at);
            if (got < 0) {
                Py_DECREF(phase);
                goto done;
            }
            at += got;
        }
        Py_DECREF(phase);
    }
    self->nphases = n;
    find_packers(self);
    find_early(self);
    ok = 1;
done:
    Py_DECREF(phases);
    return ok ? largest : -1;
}

static int Rows_init(Rows *self, PyObject *args, PyObject *Py_UNUSED(kwds)) {
    unsigned long long isend, irecv, testall, get_count, comm, byte;
    Py_buffer table;
    PyObject *program;
    Rows_free(self);
    if (!PyArg_ParseTuple(args, "KKKKKKiw*nnnnnnO", &isend, &irecv, &testall, &get_count,
                          &comm, &byte, &self->tag, &table, &self->cap, &self->len_base,
                          &self->len_word, &self->pack_max, &self->request_size,
                          &self->status_size, &program))
        return -1;
    int largest = -1;
    if (!isend || !irecv || !testall || !get_count || self->cap <= 0 ||
        self->request_size <= 0 || self->status_size <= 0 || self->len_word < 0 ||
        self->len_word + 4 > self->len_base || self->len_base > self->cap) {
        PyErr_SetString(PyExc_ValueError, "Rows: a null function or bad sizes");
        goto done;
    }
    self->table = table.buf;
    self->rows = table.len / self->cap;
    largest = parse_program(self, program);
    if (largest < 0)
        goto done;
    self->statuses = PyMem_Calloc(largest ? largest : 1, self->status_size);
    if (self->statuses == NULL) {
        PyErr_NoMemory();
        largest = -1;
        goto done;
    }
    self->isend = (isend_fn)(uintptr_t)isend;
    self->irecv = (irecv_fn)(uintptr_t)irecv;
    self->testall = (testall_fn)(uintptr_t)testall;
    self->get_count = (get_count_fn)(uintptr_t)get_count;
    self->comm = (intptr_t)comm;
    self->byte = (intptr_t)byte;
    self->keep = table.obj;  /* the buffer's owner outlives the pointer we keep */
    Py_XINCREF(self->keep);
done:
    PyBuffer_Release(&table);
    if (largest < 0)
        Rows_free(self);
    return largest < 0 ? -1 : 0;
}

static void Rows_dealloc(Rows *self) {
    Rows_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A row's length as the row says it (see the program above). */
static Py_ssize_t row_length(Rows *self, const char *row) {
    int32_t word;
    memcpy(&word, row + self->len_word, sizeof word);
    Py_ssize_t len = self->len_base + (word > 0 ? word : 0);
    return len < self->cap ? len : self->cap;
}

static inline char *row_at(Rows *self, const Step *s, Py_ssize_t k) {
    return self->table + self->rows_of[s->first + k] * self->cap;
}

/* A send of several rows, packed when they are short: the other rows copied after the
 * first in the spare room of its place. The message's length, or -1 (one message a row). */
static Py_ssize_t pack_rows(Rows *self, const Step *s) {
    char *first = row_at(self, s, 0);
    Py_ssize_t total = row_length(self, first);
    for (Py_ssize_t k = 1; k < s->nrows; k++)
        total += row_length(self, row_at(self, s, k));
    if (total > self->pack_max || total > self->cap)
        return -1;
    Py_ssize_t at = row_length(self, first);
    for (Py_ssize_t k = 1; k < s->nrows; k++) {
        const char *row = row_at(self, s, k);
        Py_ssize_t len = row_length(self, row);
        copy_bytes(first + at, row, len);
        at += len;
    }
    return total;
}

/* The other rows of a packed message, received after its first row in that row's
 * place, into their places. Each row's length is read from the row, as its sender
 * did, and the reading stops at the message's end, so a message that is not what this
 * program expects cannot write past it (its rows then fail the caller's check). */
static void unpack_rows(Rows *self, const Step *s, Py_ssize_t count) {
    const char *first = row_at(self, s, 0);
    Py_ssize_t at = row_length(self, first);
    for (Py_ssize_t k = 1; k < s->nrows && at + self->len_base <= count; k++) {
        Py_ssize_t len = row_length(self, first + at);
        if (len > count - at)
            len = count - at;
        copy_bytes(row_at(self, s, k), first + at, len);
        at += len;
    }
}

/* The active phase's request i. */
static inline void *request(Rows *self, Py_ssize_t i) {
    return self->requests + (self->base + i) * self->request_size;
}

/* Post phase p: its first batch (every receive's first message, every send's first
 * message), then the sends of rows that follow one message each, which the first
 * batch does not wait for: their receiver posts its receives for them only once its
 * own first batch is done, so waiting for them there could wait for each other. */
/* Send rows k0 .. k1-1 of step s one message each (requests from *n on). */
static int send_rows(Rows *self, const Step *s, Py_ssize_t k0, Py_ssize_t k1, int *n) {
    int code = 0;
    for (Py_ssize_t k = k0; k < k1 && code == 0; k++) {
        char *row = row_at(self, s, k);
        code = self->isend(row, (int)row_length(self, row), self->byte, s->peer, self->tag,
                           self->comm, request(self, (*n)++));
    }
    return code;
}

/* Post phase p's early receives, into the first requests of its region (the phase
 * before p is active in the other one). */
static int post_early(Rows *self, Py_ssize_t p) {
    char *region = self->requests + (p & 1) * self->region * self->request_size;
    int n = 0, code = 0;
    for (Py_ssize_t i = self->bounds[p]; i < self->bounds[p + 1] && code == 0; i++) {
        Step *s = &self->steps[i];
        if (s->early) {
            s->request = n;
            code = self->irecv(row_at(self, s, 0), (int)self->cap, self->byte, s->peer,
                               self->tag, self->comm, region + n++ * self->request_size);
        }
    }
    self->preposted = n ? p : -1;
    self->npre = n;
    return code;
}

static int post(Rows *self, Py_ssize_t p) {
    int code = 0, ready = self->preposted == p;
    int n = ready ? self->npre : 0;  /* the early receives took the region's first requests */
    Py_ssize_t lo = self->bounds[p], hi = self->bounds[p + 1];
    self->base = (p & 1) * self->region;
    self->preposted = -1;
    for (Py_ssize_t i = lo; i < hi && code == 0; i++) {  /* every receive's first message */
        Step *s = &self->steps[i];
        if (s->kind == 0 && !(ready && s->early)) {
            s->request = n;
            code = self->irecv(row_at(self, s, 0), (int)self->cap, self->byte, s->peer,
                               self->tag, self->comm, request(self, n++));
        }
    }
    for (Py_ssize_t i = lo; i < hi && code == 0; i++) {  /* every send's first message */
        Step *s = &self->steps[i];
        if (s->kind != 1)
            continue;
        if (s->nrows > 1 && s->packer == i)
            s->packed = pack_rows(self, s);
        Py_ssize_t packed = s->nrows > 1 ? self->steps[s->packer].packed : -1;
        if (packed >= 0)
            code = self->isend(row_at(self, s, 0), (int)packed, self->byte, s->peer,
                               self->tag, self->comm, request(self, n++));
        else
            code = send_rows(self, s, 0, 1, &n);
    }
    int first = n;
    for (Py_ssize_t i = lo; i < hi && code == 0; i++) {  /* the rows that follow */
        Step *s = &self->steps[i];
        if (s->kind == 1 && s->nrows > 1 && self->steps[s->packer].packed < 0)
            code = send_rows(self, s, 1, s->nrows, &n);
    }
    if (code != 0)
        return code;
    self->active = p;
    self->batch = 1;
    self->lo = 0;
    self->nreq = first;
    self->follow = n - first;
    return p + 1 < self->nphases ? post_early(self, p + 1) : 0;
}

/* Phase p's first batch is done: copy out the rows that came packed, and post the
 * receives of the rows that follow one message each. The second batch, when there is
 * one, is those receives and the sends of such rows. *more: 1 when it is now active. */
static int finish(Rows *self, Py_ssize_t p, int *more) {
    *more = 0;
    if (self->batch != 1)
        return 0;
    int first = self->nreq, n = first + self->follow, code = 0;
    for (Py_ssize_t i = self->bounds[p]; i < self->bounds[p + 1] && code == 0; i++) {
        const Step *s = &self->steps[i];
        if (s->kind != 0 || s->nrows < 2)
            continue;
        int count = 0;
        code = self->get_count(self->statuses + s->request * self->status_size, self->byte,
                               &count);
        if (code != 0)
            break;
        if (count > row_length(self, row_at(self, s, 0))) {
            unpack_rows(self, s, count);
            continue;
        }
        for (Py_ssize_t k = 1; k < s->nrows && code == 0; k++)
            code = self->irecv(row_at(self, s, k), (int)self->cap, self->byte, s->peer,
                               self->tag, self->comm, request(self, n++));
    }
    if (n > first) {
        self->batch = 2;
        self->lo = first;
        self->nreq = n - first;
        *more = 1;
    }
    return code;
}

/* Test the active batch's requests; 1 when they are done. */
static int done(Rows *self, int *code) {
    int flag = 0;
    *code = self->testall(self->nreq, request(self, self->lo), &flag, self->statuses);
    return *code == 0 && flag;
}

static PyObject *failed(int code, Py_ssize_t phase) {
    PyObject *exc = Py_BuildValue("(in)", code, phase);
    if (exc != NULL) {
        PyErr_SetObject(PyExc_RuntimeError, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Post phase *p and the next ones, each once the previous is done, testing at most
 * polls times in all (yielding between tests): the MPI error code, else 0 with *p the
 * phases completed (nphases, or the one left active). Called without the GIL. */
static int run_phases(Rows *self, Py_ssize_t *p, long polls) {
    int code = 0, more;
    for (; *p < self->nphases; (*p)++) {
        if (self->bounds[*p + 1] == self->bounds[*p])
            continue;
        code = post(self, *p);
        for (more = 1; code == 0 && more;) {
            while (!done(self, &code) && code == 0 && polls-- > 0)
                sched_yield();
            if (code != 0 || polls < 0)
                return code;
            code = finish(self, *p, &more);
        }
        if (code != 0)
            return code;
        self->active = -1;
    }
    return 0;
}

static PyObject *Rows_run(Rows *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "run(first, polls)");
        return NULL;
    }
    Py_ssize_t p = PyLong_AsSsize_t(args[0]);
    long polls = PyLong_AsLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (p < 0 || p > self->nphases || self->active >= 0) {
        PyErr_SetString(PyExc_ValueError, "run: no such phase, or one is still active");
        return NULL;
    }
    int code;
    /* The GIL goes while MPI runs: the group's other threads (an async call's worker,
     * the hosts' heartbeats) keep going, and MPI was initialized for threads. */
    Py_BEGIN_ALLOW_THREADS
    code = run_phases(self, &p, polls);
    Py_END_ALLOW_THREADS
    if (code != 0)
        return failed(code, p);
    return PyLong_FromSsize_t(p);
}

static PyObject *Rows_test(Rows *self, PyObject *Py_UNUSED(ignored)) {
    if (self->active < 0)
        Py_RETURN_TRUE;
    int code, more = 0;
    int ready = done(self, &code);
    if (code == 0 && ready)
        code = finish(self, self->active, &more);
    if (code != 0)
        return failed(code, self->active);
    if (ready && !more)
        self->active = -1;
    return PyBool_FromLong(ready && !more);
}

/* ------------------------------------------------------------------ eager calls
 *
 * A tiny call whose data rides in the rows (meshcast.spanning_lane), in one C call:
 * write my row, run the program, check every row, combine the rows into the
 * caller's array. A row (meshcast.agreement_rows) is its cell, len_base bytes that
 * start with the call's sequence number (8 bytes, little-endian), then its payload.
 *
 * eager(seq, mine, head, data, expect, out, code, row, at, polls) -> status:
 *   mine: my row's index; head: the rest of my cell; data: my payload (or None);
 *   expect: the cells (less the sequence number) rows 0 .. n-1 must hold, back to
 *   back; out, code, row, at: the combine (out None: none), as combine() says.
 * Status 0: done, every row as expected, combined. 1: done, but some row is not as
 * expected (the table holds every row: Python reads it and raises, or finishes the
 * call the general way). 2 + p: phase p is still active: Python waits for it with
 * test(), runs the rest with run(), then calls check() and combine().
 * Everything is checked before anything is sent: a bad argument raises ValueError.
 */
#define COPY_ROW (-1)
#define COPY_ALL (-2)

#define FOLD_SOURCE(r) (first_row + (r) * stride)
#define FOLD_SOURCES (n)
#include "_fold.h"

FOLD_CLONES
static int fold_rows(const char *first_row, Py_ssize_t stride, Py_ssize_t n, int type, int op,
                     char *out, Py_ssize_t count) {
    FOLD_SWITCH(type, op);
}

static inline char *payload(Rows *self, Py_ssize_t row) {
    return self->table + row * self->cap + self->len_base;
}

/* The rows expect names (n of them), or -1 with an exception. */
static Py_ssize_t expected_rows(Rows *self, Py_buffer *expect) {
    Py_ssize_t cell = self->len_base - 8;
    Py_ssize_t n = cell > 0 ? expect->len / cell : 0;
    if (cell <= 0 || n < 1 || n * cell != expect->len || n > self->rows) {
        PyErr_SetString(PyExc_ValueError, "expect is not whole cells of rows in the table");
        return -1;
    }
    return n;
}

static int combine_ok(Rows *self, Py_ssize_t n, Py_ssize_t len, long code, Py_ssize_t row,
                      Py_ssize_t at) {
    Py_ssize_t room = self->cap - self->len_base, piece = len;
    const char *bad = NULL;
    if (code == COPY_ALL) {
        piece = len / n;
        if (piece * n != len)
            bad = "out is not n pieces";
    } else if (code == COPY_ROW) {
        if (row < 0 || row >= n)
            bad = "no such row";
    } else if (code < 0 || code / 8 >= T_F16 || code % 8 >= N_OPS || n < 2 ||
               len % type_size[code / 8] != 0) {
        bad = "no such combine kernel for this size"; /* (nor for halves: working copies) */
    }
    if (bad == NULL && (at < 0 || piece > room - at))
        bad = "at and out beyond a row's payload";
    if (bad != NULL)
        PyErr_SetString(PyExc_ValueError, bad);
    return bad == NULL;
}

/* The sequence number as the rows hold it (little-endian, as Python packs it). */
static void seq_bytes(uint64_t seq, unsigned char le[8]) {
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(seq >> (8 * i));
}

static int check_rows(Rows *self, uint64_t seq, Py_buffer *expect, Py_ssize_t n) {
    Py_ssize_t cell = self->len_base - 8;
    unsigned char le[8];
    seq_bytes(seq, le);
    for (Py_ssize_t r = 0; r < n; r++) {
        const char *row = self->table + r * self->cap;
        if (memcmp(row, le, 8) != 0 ||
            memcmp(row + 8, (const char *)expect->buf + r * cell, cell) != 0)
            return 1;
    }
    return 0;
}

static void combine_rows(Rows *self, Py_ssize_t n, Py_buffer *out, long code, Py_ssize_t row,
                         Py_ssize_t at) {
    if (out->len == 0)
        return;
    if (code == COPY_ROW) {
        copy_bytes(out->buf, payload(self, row) + at, out->len);
    } else if (code == COPY_ALL) {
        Py_ssize_t piece = out->len / n;
        for (Py_ssize_t r = 0; r < n; r++)
            copy_bytes((char *)out->buf + r * piece, payload(self, r) + at, piece);
    } else {
        fold_rows(payload(self, 0) + at, self->cap, n, (int)(code / 8), (int)(code % 8),
                  out->buf, out->len / type_size[code / 8]);
    }
}

/* The combine's output (None: no combine), checked: 1 when there is one, 0 when
 * there is none, -1 with an exception. */
static int get_out(Rows *self, PyObject *obj, Py_buffer *out, Py_ssize_t n, long code,
                   Py_ssize_t row, Py_ssize_t at) {
    if (obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(obj, out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return -1;
    if (!combine_ok(self, n, out->len, code, row, at)) {
        PyBuffer_Release(out);
        return -1;
    }
    return 1;
}

static PyObject *Rows_eager(Rows *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "eager(seq, mine, head, data, expect, out, code, row, at, polls)");
        return NULL;
    }
    uint64_t seq = PyLong_AsUnsignedLongLong(args[0]);
    Py_ssize_t mine = PyLong_AsSsize_t(args[1]);
    long code = PyLong_AsLong(args[6]);
    Py_ssize_t row = PyLong_AsSsize_t(args[7]), at = PyLong_AsSsize_t(args[8]);
    long polls = PyLong_AsLong(args[9]);
    if (PyErr_Occurred())
        return NULL;
    if (self->active >= 0 || mine < 0 || mine >= self->rows) {
        PyErr_SetString(PyExc_ValueError, "eager: a phase is still active, or no such row");
        return NULL;
    }
    Py_buffer head, data, expect, out;
    int has_data = 0, has_out = 0, code_mpi = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[2], &head, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[4], &expect, PyBUF_SIMPLE) < 0)
        goto release_head;
    Py_ssize_t n = expected_rows(self, &expect);
    if (n < 0)
        goto release_expect;
    if (head.len != self->len_base - 8) {
        PyErr_SetString(PyExc_ValueError, "head is not a cell less its sequence number");
        goto release_expect;
    }
    if (args[3] != Py_None) {
        if (PyObject_GetBuffer(args[3], &data, PyBUF_C_CONTIGUOUS) < 0)
            goto release_expect;
        has_data = 1;
        if (data.len > self->cap - self->len_base) {
            PyErr_SetString(PyExc_ValueError, "data longer than a row's payload");
            goto release_data;
        }
    }
    has_out = get_out(self, args[5], &out, n, code, row, at);
    if (has_out < 0)
        goto release_data;
    char *my = self->table + mine * self->cap;
    unsigned char le[8];
    seq_bytes(seq, le);
    memcpy(my, le, 8);
    memcpy(my + 8, head.buf, head.len);
    if (has_data)
        copy_bytes(my + self->len_base, data.buf, data.len);
    Py_ssize_t p = 0;
    Py_BEGIN_ALLOW_THREADS
    code_mpi = run_phases(self, &p, polls);
    Py_END_ALLOW_THREADS
    if (code_mpi != 0) {
        failed(code_mpi, p);
    } else if (p < self->nphases) {
        result = PyLong_FromSsize_t(2 + p);
    } else if (check_rows(self, seq, &expect, n)) {
        result = PyLong_FromLong(1);
    } else {
        if (has_out)
            combine_rows(self, n, &out, code, row, at);
        result = PyLong_FromLong(0);
    }
    if (has_out)
        PyBuffer_Release(&out);
release_data:
    if (has_data)
        PyBuffer_Release(&data);
release_expect:
    PyBuffer_Release(&expect);
release_head:
    PyBuffer_Release(&head);
    return result;
}

static PyObject *Rows_check(Rows *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check(seq, expect)");
        return NULL;
    }
    uint64_t seq = PyLong_AsUnsignedLongLong(args[0]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer expect;
    if (PyObject_GetBuffer(args[1], &expect, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t n = expected_rows(self, &expect);
    PyObject *result = n < 0 ? NULL : PyLong_FromLong(check_rows(self, seq, &expect, n));
    PyBuffer_Release(&expect);
    return result;
}

static PyObject *Rows_combine(Rows *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "combine(n, out, code, row, at)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    long code = PyLong_AsLong(args[2]);
    Py_ssize_t row = PyLong_AsSsize_t(args[3]), at = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (n < 1 || n > self->rows) {
        PyErr_SetString(PyExc_ValueError, "combine: no such number of rows");
        return NULL;
    }
    Py_buffer out;
    int has_out = get_out(self, args[1], &out, n, code, row, at);
    if (has_out < 0)
        return NULL;
    if (has_out) {
        combine_rows(self, n, &out, code, row, at);
        PyBuffer_Release(&out);
    }
    Py_RETURN_NONE;
}

static PyObject *Rows_phases(Rows *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(self->nphases);
}

static PyMethodDef Rows_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Rows_run, METH_FASTCALL,
     "run(first, polls) -> phases completed: post phase `first` and the next ones, yielding "
     "between tests at most `polls` times in all (see the module)."},
    {"test", (PyCFunction)Rows_test, METH_NOARGS,
     "test() -> whether the phase run left active is done."},
    {"phases", (PyCFunction)Rows_phases, METH_NOARGS, "phases() -> the program's phases."},
    {"eager", (PyCFunction)(void (*)(void))Rows_eager, METH_FASTCALL,
     "eager(seq, mine, head, data, expect, out, code, row, at, polls) -> status: a tiny call "
     "in one C call (see eager calls in the source)."},
    {"check", (PyCFunction)(void (*)(void))Rows_check, METH_FASTCALL,
     "check(seq, expect) -> 0 when every row is as expected, else 1."},
    {"combine", (PyCFunction)(void (*)(void))Rows_combine, METH_FASTCALL,
     "combine(n, out, code, row, at): the rows 0 .. n-1 into out (see eager calls)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast.transport._mpi_rows.Rows",
    .tp_doc = "Rows(isend, irecv, testall, get_count, comm, byte, tag, table, cap, len_base, "
              "len_word, pack_max, request_size, status_size, program): a program of row "
              "exchanges run in C.",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Rows_init,
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_methods = Rows_methods,
};

/* Waiting for an exchange of persistent requests (the fused all_reduce's steps, see
 * meshcast.transport.mpi._persistent): started and tested here, so that a poll costs
 * MPI's test and a yield, not an interpreter's round through mpi4py; on a machine whose
 * cores the ranks share, every rank's polls take cores the others' progress needs.
 *
 * exchange(startall, testall, iprobe, requests, statuses, comm, probe, any_source,
 * start, polls) -> 0 when every request is done, 1 when they are not after `polls`
 * yields, 2 when a message under tag `probe` (>= 0) is waiting from any member (see
 * Bound.prepare: a member whose call differs); an MPI error code raises
 * RuntimeError(code, -1). `requests`: the MPI_Request handles back to back; `statuses`
 * room for as many MPI_Status plus one. */
typedef int (*startall_fn)(int, void *);
typedef int (*iprobe_fn)(int, int, intptr_t, int *, void *);

static int wait_requests(startall_fn startall, testall_fn testall, iprobe_fn iprobe,
                         int n, void *requests, char *statuses, Py_ssize_t status_size,
                         intptr_t comm, int probe, int any_source, int start, long polls) {
    int code = 0, flag = 0;
    if (start && n > 0) {
        code = startall(n, requests);
        if (code != 0)
            return -code;
    }
    for (;;) {
        code = testall(n, requests, &flag, statuses);
        if (code != 0)
            return -code;
        if (flag)
            return 0;
        if (probe >= 0) {
            code = iprobe(any_source, probe, comm, &flag, statuses + n * status_size);
            if (code != 0)
                return -code;
            if (flag)
                return 2;
        }
        if (polls-- <= 0)
            return 1;
        sched_yield();
    }
}

static PyObject *exchange(PyObject *Py_UNUSED(module), PyObject *const *args,
                          Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "exchange(startall, testall, iprobe, requests, "
                                         "statuses, comm, probe, any_source, start, polls)");
        return NULL;
    }
    unsigned long long startall = PyLong_AsUnsignedLongLong(args[0]);
    unsigned long long testall = PyLong_AsUnsignedLongLong(args[1]);
    unsigned long long iprobe = PyLong_AsUnsignedLongLong(args[2]);
    unsigned long long comm = PyLong_AsUnsignedLongLongMask(args[5]);
    int probe = (int)PyLong_AsLong(args[6]), any_source = (int)PyLong_AsLong(args[7]);
    int start = PyObject_IsTrue(args[8]);
    long polls = PyLong_AsLong(args[9]);
    if (PyErr_Occurred())
        return NULL;
    if (!startall || !testall || !iprobe) {
        PyErr_SetString(PyExc_ValueError, "exchange: a null function");
        return NULL;
    }
    Py_buffer requests, statuses;
    if (PyObject_GetBuffer(args[3], &requests, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[4], &statuses, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&requests);
        return NULL;
    }
    int n = (int)(requests.len / requests.itemsize);
    Py_ssize_t status_size = statuses.len / (n + 1);
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = wait_requests((startall_fn)(uintptr_t)startall, (testall_fn)(uintptr_t)testall,
                           (iprobe_fn)(uintptr_t)iprobe, n, requests.buf, statuses.buf,
                           status_size, (intptr_t)comm, probe, any_source, start, polls);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&requests);
    PyBuffer_Release(&statuses);
    if (result < 0)
        return failed(-result, -1);
    return PyLong_FromLong(result);
}

/* A fused collective's three steps in one C call (meshcast.algorithms.hierarchical,
 * _FusedPlan: all_reduce, and reduce_scatter with an empty third step): the happy path
 * only. Step 1's exchange, the check of the host's cells and the fold of the host's
 * partial sum of my piece (`piece` bytes at `start` of `work`, and the mates' `parts`);
 * step 2's exchange, the check of the rails' cells and the fold of the hosts' sums (my
 * host's is `partial` from byte `own`, the others' are the rows of `got`) into `dest`;
 * step 3's exchange. It returns (steps done, state of the next step): state 0 not
 * started (all done when steps done is 3), 1 started and pending after `polls` yields,
 * 2 done but not checked (its cells differ: Python reads them), 3 a message under tag
 * `probe` waits, 4 an MPI error code (in the tuple's third item). Python goes on from
 * there.
 *
 * fused(startall, testall, iprobe, comm, any_source, probe, polls, step1, step2, step3,
 *       statuses, head, cells, parts, partial, heads, got, work, dest, at, rail_at, start,
 *       piece, own, code[, times]) -- byte offsets and sizes; code the fold kernel (type *
 * 8 + op). `times` (a traced call's, else absent or None): 6 int64 that get each step's
 * begin and end on time.time_ns()'s clock, 0 where the step did not begin or end here.
 */
static inline int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Whether a row other than `mine` of the `n` rows `stride` bytes apart starts otherwise
 * than `head`'s `k` bytes. */
static int differ(const char *rows, Py_ssize_t stride, Py_ssize_t n, Py_ssize_t mine,
                  const char *head, Py_ssize_t k) {
    for (Py_ssize_t j = 0; j < n; j++)
        if (j != mine && memcmp(rows + j * stride, head, k) != 0)
            return 1;
    return 0;
}

static void fold_into(char *out, const char *rows, Py_ssize_t stride, Py_ssize_t n,
                      long code, Py_ssize_t bytes, Py_ssize_t itemsize) {
    if (n == 1)
        copy_bytes(out, rows, bytes);
    else
        fold_rows(rows, stride, n, (int)(code / 8), (int)(code % 8), out, bytes / itemsize);
}

typedef struct {
    void *buf;
    Py_ssize_t len;
} Reqs;

static PyObject *fused(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 25 && nargs != 26) {
        PyErr_SetString(PyExc_TypeError, "fused: 25 or 26 arguments (see the source)");
        return NULL;
    }
    startall_fn startall = (startall_fn)(uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    testall_fn testall = (testall_fn)(uintptr_t)PyLong_AsUnsignedLongLong(args[1]);
    iprobe_fn iprobe = (iprobe_fn)(uintptr_t)PyLong_AsUnsignedLongLong(args[2]);
    intptr_t comm = (intptr_t)PyLong_AsUnsignedLongLongMask(args[3]);
    int any_source = (int)PyLong_AsLong(args[4]), probe = (int)PyLong_AsLong(args[5]);
    long polls = PyLong_AsLong(args[6]);
    Py_ssize_t at = PyLong_AsSsize_t(args[19]), rail_at = PyLong_AsSsize_t(args[20]);
    Py_ssize_t start = PyLong_AsSsize_t(args[21]), piece = PyLong_AsSsize_t(args[22]);
    Py_ssize_t own = PyLong_AsSsize_t(args[23]);
    long code = PyLong_AsLong(args[24]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer b[13];
    int got_n = 0, traced = nargs == 26 && args[25] != Py_None;
    PyObject *result = NULL;
    /* 7..10: step1, step2, step3 handles, statuses; 11..18: head .. work, dest; 25 times */
    for (int i = 0; i < 12 + traced; i++, got_n++) {
        if (PyObject_GetBuffer(args[i < 12 ? 7 + i : 25], &b[i],
                               PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
            goto done;
    }
    int64_t *times = traced ? (int64_t *)b[12].buf : NULL;
    if (traced && (b[12].itemsize != 8 || b[12].len < 6 * 8)) {
        PyErr_SetString(PyExc_ValueError, "fused: times must be 6 int64");
        goto done;
    }
    Py_buffer *req[3] = {&b[0], &b[1], &b[2]};
    char *statuses = b[3].buf;
    const char *head = b[4].buf;
    Py_ssize_t k = b[4].len;
    char *cells = b[5].buf, *parts = b[6].buf, *partial = b[7].buf, *heads = b[8].buf;
    char *got = b[9].buf, *work = b[10].buf, *dest = b[11].buf;
    Py_ssize_t L = k ? b[5].len / k : 0, H = k ? b[8].len / k : 0, mine = b[11].len;
    Py_ssize_t itemsize = b[10].itemsize;
    if (!startall || !testall || !iprobe || k <= 0 || L < 1 || H < 1 || at < 0 || at >= L ||
        rail_at < 0 || rail_at >= H || start < 0 || own < 0 || b[6].len != L * piece ||
        b[9].len != H * mine || b[7].len != piece || start + piece > b[10].len ||
        own + mine > piece || itemsize <= 0 || b[11].itemsize != itemsize ||
        piece % itemsize != 0 || mine % itemsize != 0) {
        PyErr_SetString(PyExc_ValueError, "fused: bad functions, buffers or sizes");
        goto done;
    }
    Py_ssize_t status_size = b[3].len;  /* divided per request below */
    int step = 0, state = 0, error = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; step < 3; step++) {
        int n = (int)(req[step]->len / req[step]->itemsize);
        Py_ssize_t each = status_size / (n + 1 > 1 ? n + 1 : 1);
        if (times)
            times[2 * step] = wall_ns();
        int r = wait_requests(startall, testall, iprobe, n, req[step]->buf, statuses, each,
                              comm, step < 2 ? probe : -1, any_source, 1, polls);
        if (r < 0) {
            state = 4;
            error = -r;
            break;
        }
        if (r == 1 || r == 2) {
            state = r == 1 ? 1 : 3;
            break;
        }
        if (step == 0) {
            if (differ(cells, k, L, at, head, k)) {
                state = 2;
                break;
            }
            copy_bytes(parts + at * piece, work + start, piece);
            fold_into(partial, parts, piece, L, code, piece, itemsize);
        } else if (step == 1) {
            if (differ(heads, k, H, rail_at, head, k)) {
                state = 2;
                break;
            }
            copy_bytes(got + rail_at * mine, partial + own, mine);
            fold_into(dest, got, mine, H, code, mine, itemsize);
        }
        if (times)
            times[2 * step + 1] = wall_ns();
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(iii)", step, state, error);
done:
    for (int i = 0; i < got_n; i++)
        PyBuffer_Release(&b[i]);
    return result;
}

/* An exchange of rows with heads, in one C call: row g of `work` (`head`, then piece g of
 * `src`) goes to member g, and row j of `got` comes from member j (a head, then its piece
 * for me); once every row arrived and every head equals mine, piece j of `dst` is the
 * piece of row j (mine: my own piece of `src`). The happy path only; it returns (state,
 * MPI error): 0 done, 1 started and pending after `polls` yields, 2 done but some head
 * differs (`dst` untouched), 3 a message under tag `probe` waits, 4 an MPI error code.
 * Python goes on from there. `dst` may be `src` (each piece is read before it is written).
 *
 * swap_rows(startall, testall, iprobe, requests, statuses, comm, probe, any_source, polls,
 *           head, src, work, got, dst, me) */
static PyObject *swap_rows(PyObject *Py_UNUSED(module), PyObject *const *args,
                           Py_ssize_t nargs) {
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "swap_rows: 15 arguments (see the source)");
        return NULL;
    }
    startall_fn startall = (startall_fn)(uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    testall_fn testall = (testall_fn)(uintptr_t)PyLong_AsUnsignedLongLong(args[1]);
    iprobe_fn iprobe = (iprobe_fn)(uintptr_t)PyLong_AsUnsignedLongLong(args[2]);
    intptr_t comm = (intptr_t)PyLong_AsUnsignedLongLongMask(args[5]);
    int probe = (int)PyLong_AsLong(args[6]), any_source = (int)PyLong_AsLong(args[7]);
    long polls = PyLong_AsLong(args[8]);
    Py_ssize_t me = PyLong_AsSsize_t(args[14]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer b[7];
    int got_n = 0;
    PyObject *result = NULL;
    /* 3, 4: requests, statuses; 9..13: head, src, work, got, dst */
    const int at[7] = {3, 4, 9, 10, 11, 12, 13};
    for (int i = 0; i < 7; i++, got_n++) {
        if (PyObject_GetBuffer(args[at[i]], &b[i], i == 2 || i == 3 ? PyBUF_SIMPLE
                               : PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
            goto done;
    }
    const char *head = b[2].buf, *src = b[3].buf;
    char *work = b[4].buf, *got = b[5].buf, *dst = b[6].buf;
    Py_ssize_t k = b[2].len, rows = b[5].len;
    Py_ssize_t n = (Py_ssize_t)(b[0].len / (b[0].itemsize ? b[0].itemsize : 1));
    Py_ssize_t members = n / 2 + 1;  /* a receive and a send per other member */
    Py_ssize_t piece = members ? b[3].len / members : 0, row = k + piece;
    if (!startall || !testall || !iprobe || k <= 0 || n % 2 || me < 0 || me >= members ||
        b[3].len != members * piece || b[6].len != b[3].len || b[4].len != members * row ||
        rows != members * row) {
        PyErr_SetString(PyExc_ValueError, "swap_rows: bad functions, buffers or sizes");
        goto done;
    }
    Py_ssize_t status_size = b[1].len / (n + 1);
    int state = 0, error = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < members; g++) {
        memcpy(work + g * row, head, k);
        copy_bytes(work + g * row + k, src + g * piece, piece);
    }
    int r = wait_requests(startall, testall, iprobe, (int)n, b[0].buf, b[1].buf, status_size,
                          comm, probe, any_source, 1, polls);
    if (r < 0) {
        state = 4;
        error = -r;
    } else if (r == 1) {
        state = 1;
    } else if (r == 2) {
        state = 3;
    } else if (differ(got, row, members, me, head, k)) {
        state = 2;
    } else {
        for (Py_ssize_t g = 0; g < members; g++)
            if (g != me)
                copy_bytes(dst + g * piece, got + g * row + k, piece);
        if (dst != src)
            copy_bytes(dst + me * piece, src + me * piece, piece);
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(ii)", state, error);
done:
    for (int i = 0; i < got_n; i++)
        PyBuffer_Release(&b[i]);
    return result;
}

static PyMethodDef module_methods[] = {
    {"exchange", (PyCFunction)(void (*)(void))exchange, METH_FASTCALL,
     "exchange(startall, testall, iprobe, requests, statuses, comm, probe, any_source, "
     "start, polls) -> 0 done, 1 not yet, 2 a message under `probe` waits (see the source)."},
    {"swap_rows", (PyCFunction)(void (*)(void))swap_rows, METH_FASTCALL,
     "swap_rows(...) -> (state, MPI error): an exchange of rows with heads, checked and "
     "unpacked (see the source)."},
    {"fused", (PyCFunction)(void (*)(void))fused, METH_FASTCALL,
     "fused(...) -> (steps done, state, MPI error): a fused collective's happy path "
     "(see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_mpi_rows",
    .m_doc = "A program of row exchanges over MPI, run in C (see transport/_mpi_rows.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__mpi_rows(void) {
    if (PyType_Ready(&RowsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RowsType);
    if (PyModule_AddObject(m, "Rows", (PyObject *)&RowsType) < 0) {
        Py_DECREF(&RowsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
