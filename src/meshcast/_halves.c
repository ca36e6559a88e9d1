/* bfloat16 and float16 to and from float32, compiled (see meshcast.buffers).
 *
 * A float16 or bfloat16 reduction runs on a float32 working copy of the data and is
 * rounded back once (ops.working_dtype). NumPy has no bfloat16, so its conversions
 * were integer expressions over temporaries, and its float16 casts are slow where
 * they go element by element: 512 Ki elements took 1.5 ms bfloat16 -> float32, 3.1 ms
 * float32 -> bfloat16, 0.6 / 0.8 ms for float16 (this machine, NumPy 2.4), most of a
 * 1 MiB bfloat16 all_reduce's 5.7 ms. These loops (the compiled folds' own) run at
 * memory speed.
 *
 * The results are NumPy's bit for bit: bfloat16 -> float32 is exact; float32 ->
 * bfloat16 rounds to nearest even, and a NaN keeps its sign and top mantissa bits
 * with the quiet bit set (buffers.f32_to_bf16); float16 goes through the compiler's
 * _Float16, which rounds to nearest even with IEEE overflow and subnormals, as
 * NumPy's cast does (F16C where the CPU has it). A float32 NaN becomes a float16
 * NaN of the same sign either way (payloads may differ; no reduction keeps them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The conversions of the compiled folds (transport/_fold.h: half_widen, half_narrow),
 * vectorized where the CPU allows (AVX2, F16C), whole arrays at a time here. */
#define FOLD_SOURCE(r) (srcs[(r)])
#define FOLD_SOURCES (nsrc)
#include "transport/_fold.h"

/* Past this many elements the GIL is given up while converting (below, taking it
 * back costs more than the loop). */
#define NOGIL_ELEMENTS 16384

/* convert(src, dst, kind, widen): src's elements into dst, both C-contiguous buffers
 * of as many elements; kind "bfloat16" or "float16" names the half side, which is src
 * when widen (to float32) and dst otherwise. NotImplementedError for float16 where
 * the compiler has no _Float16 (the caller then uses NumPy). */
static PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "convert(src, dst, kind, widen)");
        return NULL;
    }
    const char *kind = PyUnicode_AsUTF8(args[2]);
    int widen = PyObject_IsTrue(args[3]);
    if (kind == NULL || widen < 0)
        return NULL;
    int bf16 = strcmp(kind, "bfloat16") == 0;
    if (!bf16 && strcmp(kind, "float16") != 0) {
        PyErr_Format(PyExc_ValueError, "convert: kind bfloat16 or float16, not %s", kind);
        return NULL;
    }
    if (!bf16 && !HAVE_FLOAT16) {
        PyErr_SetString(PyExc_NotImplementedError, "convert: no _Float16 in this build");
        return NULL;
    }
    Py_buffer s, d;
    if (PyObject_GetBuffer(args[0], &s, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &d, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    Py_ssize_t half = widen ? s.len : d.len, single = widen ? d.len : s.len;
    if (half % 2 || single != 2 * half) {
        PyBuffer_Release(&s);
        PyBuffer_Release(&d);
        PyErr_SetString(PyExc_ValueError, "convert: the float32 side must hold as many "
                                          "elements as the half side");
        return NULL;
    }
    Py_ssize_t n = half / 2;
    PyThreadState *ts = n >= NOGIL_ELEMENTS ? PyEval_SaveThread() : NULL;
    int type = bf16 ? T_BF16 : T_F16;
    if (widen)
        half_widen(type, (const uint16_t *)s.buf, (float *)d.buf, n);
    else
        half_narrow(type, (const float *)s.buf, (uint16_t *)d.buf, n);
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"convert", (PyCFunction)(void (*)(void))convert, METH_FASTCALL,
     "convert(src, dst, kind, widen): bfloat16/float16 to or from float32 (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "meshcast._halves",
                                    "bfloat16 and float16 to and from float32.", -1, methods};

PyMODINIT_FUNC PyInit__halves(void) { return PyModule_Create(&module); }
