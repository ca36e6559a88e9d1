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
 * (kind, peer, row): kind 0 receives row `row` from `peer` into the table at
 * row * cap (at most cap bytes), kind 1 sends row `row` to `peer` at its own length,
 * which the row says: len_base + max(0, the int32 at len_word in the row), at most
 * cap. So a row forwarded in the second phase travels at whatever length it arrived
 * with, which the sender cannot know when the program is built.
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

typedef int (*isend_fn)(const void *, int, intptr_t, int, int, intptr_t, void *);
typedef int (*irecv_fn)(void *, int, intptr_t, int, int, intptr_t, void *);
typedef int (*testall_fn)(int, void *, int *, void *);

typedef struct {
    int kind, peer;
    Py_ssize_t row;
} Step;

typedef struct {
    PyObject_HEAD
    isend_fn isend;
    irecv_fn irecv;
    testall_fn testall;
    intptr_t comm, byte;
    int tag;
    char *table;
    Py_ssize_t cap, rows, len_base, len_word;
    Step *steps;            /* every phase's operations, back to back */
    Py_ssize_t *bounds;     /* phase p is steps [bounds[p], bounds[p + 1]) */
    Py_ssize_t nphases, active;
    char *requests;         /* one MPI_Request per operation of the largest phase */
    Py_ssize_t request_size;
    char *statuses;
    PyObject *keep;         /* the table's owner */
} Rows;

static void Rows_free(Rows *self) {
    PyMem_Free(self->steps);
    PyMem_Free(self->bounds);
    PyMem_Free(self->requests);
    PyMem_Free(self->statuses);
    self->steps = NULL;
    self->bounds = NULL;
    self->requests = NULL;
    self->statuses = NULL;
    self->nphases = 0;
    self->active = -1;
    Py_CLEAR(self->keep);
}

static int parse_program(Rows *self, PyObject *program) {
    PyObject *phases = PySequence_Fast(program, "the program must be a sequence of phases");
    if (phases == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(phases), total = 0, largest = 0;
    int ok = 0;
    self->bounds = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (self->bounds == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t p = 0; p < n; p++) {
        Py_ssize_t len = PyObject_Length(PySequence_Fast_GET_ITEM(phases, p));
        if (len < 0)
            goto done;
        total += len;
        largest = len > largest ? len : largest;
        self->bounds[p + 1] = total;
    }
    self->steps = PyMem_Calloc(total ? total : 1, sizeof(Step));
    self->requests = PyMem_Calloc(largest ? largest : 1, self->request_size);
    if (self->steps == NULL || self->requests == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t i = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        PyObject *phase = PySequence_Fast(PySequence_Fast_GET_ITEM(phases, p), "a phase");
        if (phase == NULL)
            goto done;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(phase); k++, i++) {
            Step *s = &self->steps[i];
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(phase, k), "iin", &s->kind, &s->peer,
                                  &s->row)) {
                Py_DECREF(phase);
                goto done;
            }
            if ((s->kind != 0 && s->kind != 1) || s->row < 0 || s->row >= self->rows ||
                s->peer < 0) {
                PyErr_SetString(PyExc_ValueError, "Rows: a bad operation in the program");
                Py_DECREF(phase);
                goto done;
            }
        }
        Py_DECREF(phase);
    }
    self->nphases = n;
    ok = 1;
done:
    Py_DECREF(phases);
    return ok ? largest : -1;
}

static int Rows_init(Rows *self, PyObject *args, PyObject *kwds) {
    unsigned long long isend, irecv, testall, comm, byte;
    Py_buffer table;
    Py_ssize_t status_size;
    PyObject *program;
    Rows_free(self);
    if (!PyArg_ParseTuple(args, "KKKKKiw*nnnnnO", &isend, &irecv, &testall, &comm, &byte,
                          &self->tag, &table, &self->cap, &self->len_base, &self->len_word,
                          &self->request_size, &status_size, &program))
        return -1;
    int largest = -1;
    if (!isend || !irecv || !testall || self->cap <= 0 || self->request_size <= 0 ||
        status_size <= 0 || self->len_word < 0 || self->len_word + 4 > self->cap) {
        PyErr_SetString(PyExc_ValueError, "Rows: a null function or bad sizes");
        goto done;
    }
    self->table = table.buf;
    self->rows = table.len / self->cap;
    largest = parse_program(self, program);
    if (largest < 0)
        goto done;
    self->statuses = PyMem_Calloc(largest ? largest : 1, status_size);
    if (self->statuses == NULL) {
        PyErr_NoMemory();
        largest = -1;
        goto done;
    }
    self->isend = (isend_fn)(uintptr_t)isend;
    self->irecv = (irecv_fn)(uintptr_t)irecv;
    self->testall = (testall_fn)(uintptr_t)testall;
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

static int post(Rows *self, Py_ssize_t p) {
    for (Py_ssize_t i = self->bounds[p]; i < self->bounds[p + 1]; i++) {
        Step *s = &self->steps[i];
        char *row = self->table + s->row * self->cap;
        void *req = self->requests + (i - self->bounds[p]) * self->request_size;
        int code;
        if (s->kind == 0) {
            code = self->irecv(row, (int)self->cap, self->byte, s->peer, self->tag, self->comm,
                               req);
        } else {
            int32_t word;
            memcpy(&word, row + self->len_word, sizeof word);
            Py_ssize_t len = self->len_base + (word > 0 ? word : 0);
            code = self->isend(row, (int)(len < self->cap ? len : self->cap), self->byte,
                               s->peer, self->tag, self->comm, req);
        }
        if (code != 0)
            return code;
    }
    return 0;
}

/* Test the active phase's requests; 1 when they are done. */
static int done(Rows *self, int *code) {
    Py_ssize_t p = self->active;
    int flag = 0;
    *code = self->testall((int)(self->bounds[p + 1] - self->bounds[p]), self->requests, &flag,
                          self->statuses);
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
    int code = 0;
    /* The GIL goes while MPI runs: the group's other threads (an async call's worker,
     * the hosts' heartbeats) keep going, and MPI was initialized for threads. */
    Py_BEGIN_ALLOW_THREADS
    for (; p < self->nphases; p++) {
        if (self->bounds[p + 1] == self->bounds[p])
            continue;
        code = post(self, p);
        if (code != 0)
            break;
        self->active = p;
        while (!done(self, &code) && code == 0 && polls-- > 0)
            sched_yield();
        if (code != 0 || polls < 0)
            break;
        self->active = -1;
    }
    Py_END_ALLOW_THREADS
    if (code != 0)
        return failed(code, p);
    return PyLong_FromSsize_t(p);
}

static PyObject *Rows_test(Rows *self, PyObject *unused) {
    if (self->active < 0)
        Py_RETURN_TRUE;
    int code;
    int ready = done(self, &code);
    if (code != 0)
        return failed(code, self->active);
    if (ready)
        self->active = -1;
    return PyBool_FromLong(ready);
}

static PyMethodDef Rows_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Rows_run, METH_FASTCALL,
     "run(first, polls) -> phases completed: post phase `first` and the next ones, yielding "
     "between tests at most `polls` times in all (see the module)."},
    {"test", (PyCFunction)Rows_test, METH_NOARGS,
     "test() -> whether the phase run left active is done."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast.transport._mpi_rows.Rows",
    .tp_doc = "Rows(isend, irecv, testall, comm, byte, tag, table, cap, len_base, len_word, "
              "request_size, status_size, program): a program of row exchanges run in C.",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Rows_init,
    .tp_dealloc = (destructor)Rows_dealloc,
    .tp_methods = Rows_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_mpi_rows",
    .m_doc = "A program of row exchanges over MPI, run in C (see transport/_mpi_rows.c).",
    .m_size = -1,
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
