/*
 * mooncake_core._native: the GIL-free data path.
 *
 * Python decides what to move; these functions move the bytes with the GIL
 * released so that other Python threads (the asyncio control plane, other
 * transfers) keep running while a copy or a socket loop is in progress.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* memcpy(dst[dst_off:dst_off+n], src[src_off:src_off+n]) with bounds checks. */
static PyObject *py_copy(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer dst, src;
    Py_ssize_t dst_off, src_off, n;
    if (!PyArg_ParseTuple(args, "w*ny*nn", &dst, &dst_off, &src, &src_off, &n)) return NULL;
    if (n < 0 || dst_off < 0 || src_off < 0 || dst_off > dst.len - n || src_off > src.len - n) {
        PyBuffer_Release(&dst);
        PyBuffer_Release(&src);
        PyErr_Format(PyExc_ValueError,
                     "copy out of bounds: dst_off=%zd src_off=%zd n=%zd dst_len=%zd src_len=%zd",
                     dst_off, src_off, n, dst.len, src.len);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    memmove((char *)dst.buf + dst_off, (const char *)src.buf + src_off, (size_t)n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"copy", py_copy, METH_VARARGS,
     "copy(dst, dst_off, src, src_off, n): bounds-checked memmove without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mooncake_core._native",
    "GIL-free data path of the Transfer Engine.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
