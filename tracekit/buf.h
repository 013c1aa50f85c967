/* tracekit/buf.h: the buffer-protocol helpers every compiled module shares (_core.c, _walk.c).
 *
 * get_buf(o, &b, itemsize, writable, what): a C-contiguous view of o (writable if asked); with
 * itemsize > 0, the length must be a whole number of items and a non-empty buffer's items must
 * have that size (a ValueError naming ``what`` otherwise). rel_buf releases a view once (a Buf
 * zeroed or never got is a no-op), so every function releases all of its Bufs on every path.
 * Include after Python.h. */
#ifndef TRACEKIT_BUF_H
#define TRACEKIT_BUF_H

typedef struct {
    Py_buffer view;
    int ok;
} Buf;

static int get_buf(PyObject *o, Buf *b, Py_ssize_t itemsize, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    b->ok = 0;
    if (PyObject_GetBuffer(o, &b->view, flags) < 0) return -1;
    b->ok = 1;
    if (itemsize && b->view.len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: buffer of %zd bytes is not a whole number of %zd-byte items",
                     what, b->view.len, itemsize);
        return -1;
    }
    if (itemsize && b->view.itemsize != itemsize && b->view.len) {
        PyErr_Format(PyExc_ValueError, "%s: items of %zd bytes, expected %zd", what, b->view.itemsize, itemsize);
        return -1;
    }
    return 0;
}

static void rel_buf(Buf *b) {
    if (b->ok) PyBuffer_Release(&b->view);
    b->ok = 0;
}

#endif
