/* The group FIFO's inline claim, compiled (see meshcast._fifo).
 *
 * Every synchronous tiny call claims its idle group before it runs inline and
 * leaves the claim after: two Python method calls that took a lock, read four
 * attributes and wrote one, 0.2 us of a 1.1-1.5 us call. Here the claim's state
 * lives in the object itself and both methods are C: each runs whole while its
 * thread holds the GIL, so the check and the set cannot interleave with another
 * thread's Python code; the FIFO's Python side keeps the invariant that makes
 * that enough (a job is queued, or the worker has set running, at every moment
 * between a submit and the end of its job: see CallFifo._loop). A free-threaded
 * build has no such guarantee: there this module refuses to load and the FIFO
 * keeps its Python claim.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#ifdef Py_GIL_DISABLED
#error "the compiled claim relies on the GIL (meshcast._fifo keeps its Python claim)"
#endif

typedef struct {
    PyObject_HEAD
    char running;       /* a call runs: inline, or on the worker thread */
    char closed;        /* the group was destroyed */
    PyObject *failure;  /* the first failure (poisons the group), or None/NULL */
    PyObject *queue;    /* the deque of queued jobs */
} Claim;

static PyObject *poison_name, *wake_name;

static int Claim_traverse(Claim *self, visitproc visit, void *arg) {
    Py_VISIT(self->failure);
    Py_VISIT(self->queue);
    return 0;
}

static int Claim_clear(Claim *self) {
    Py_CLEAR(self->failure);
    Py_CLEAR(self->queue);
    return 0;
}

static void Claim_dealloc(Claim *self) {
    PyObject_GC_UnTrack(self);
    Claim_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1 if jobs are queued, 0 if none (or no queue yet), -1 with an exception. */
static int queued(Claim *self) {
    if (self->queue == NULL || self->queue == Py_None)
        return 0;
    Py_ssize_t k = PyObject_Length(self->queue);
    return k < 0 ? -1 : k > 0;
}

static PyObject *Claim_enter_inline(Claim *self, PyObject *Py_UNUSED(ignored)) {
    if (self->running || self->closed || (self->failure != NULL && self->failure != Py_None))
        Py_RETURN_FALSE;
    int q = queued(self);
    if (q < 0)
        return NULL;
    if (q)
        Py_RETURN_FALSE;
    self->running = 1;
    Py_RETURN_TRUE;
}

static PyObject *Claim_leave_inline(Claim *self, PyObject *error) {
    if (error != Py_None) { /* rare: Python decides whether it poisons, under the lock */
        PyObject *r = PyObject_CallMethodOneArg((PyObject *)self, poison_name, error);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    self->running = 0;
    int q = queued(self);
    if (q < 0)
        return NULL;
    if (q) /* a job queued during the claim: its worker may be waiting for this */
        return PyObject_CallMethodNoArgs((PyObject *)self, wake_name);
    Py_RETURN_NONE;
}

static PyMethodDef Claim_methods[] = {
    {"enter_inline", (PyCFunction)Claim_enter_inline, METH_NOARGS,
     "enter_inline() -> bool: claim the idle group (see CallFifo.enter_inline)."},
    {"leave_inline", (PyCFunction)Claim_leave_inline, METH_O,
     "leave_inline(error) -> None: end the claim (see CallFifo.leave_inline)."},
    {NULL},
};

static PyMemberDef Claim_members[] = {
    {"_running", T_BOOL, offsetof(Claim, running), 0, "a call runs"},
    {"_closed", T_BOOL, offsetof(Claim, closed), 0, "the group was destroyed"},
    {"failure", T_OBJECT, offsetof(Claim, failure), 0, "the failure that poisoned the group"},
    {"_queue", T_OBJECT, offsetof(Claim, queue), 0, "the queued jobs"},
    {NULL},
};

static PyTypeObject ClaimType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "meshcast._claim.Claim",
    .tp_doc = "The state of a group FIFO's inline claim, with its two hot methods.",
    .tp_basicsize = sizeof(Claim),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Claim_dealloc,
    .tp_traverse = (traverseproc)Claim_traverse,
    .tp_clear = (inquiry)Claim_clear,
    .tp_methods = Claim_methods,
    .tp_members = Claim_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "meshcast._claim",
    .m_doc = "The group FIFO's inline claim, compiled (see meshcast._fifo).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__claim(void) {
    poison_name = PyUnicode_InternFromString("_poison");
    wake_name = PyUnicode_InternFromString("_wake");
    if (poison_name == NULL || wake_name == NULL || PyType_Ready(&ClaimType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Claim", (PyObject *)&ClaimType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
