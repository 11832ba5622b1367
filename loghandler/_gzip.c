/* gzip in one step without the GIL: the flusher's compression of a request body.
 *
 * zlib's own module releases the GIL once per output block (32 KiB, then larger), and its
 * compressor object once more to flush. While the application's threads keep the interpreter
 * busy, each release costs the flusher a switch interval (5 ms) to get the GIL back: a
 * 5,000-event batch took three or four of them. Here the output buffer is deflateBound()'s, so
 * one deflate() call finishes the stream, inside one release. The same zlib with the same
 * parameters: the same bytes as zlib.compressobj(level, DEFLATED, 31) (tests/test_speedups.py).
 * A separate extension from _speedups.c so that a machine without zlib's headers loses only
 * this (sender.py falls back to the zlib module).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <zlib.h>

static PyObject *
gzip_compress(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer in;
    int level;
    if (!PyArg_ParseTuple(args, "y*i", &in, &level))
        return NULL;
    if (level < -1 || level > 9 || in.len > (Py_ssize_t)(UINT_MAX / 2)) {
        PyBuffer_Release(&in);
        PyErr_SetString(PyExc_ValueError, "gzip: level -1..9, and at most 2 GiB of data");
        return NULL;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        PyBuffer_Release(&in);
        return PyErr_NoMemory();
    }
    uLong bound = deflateBound(&zs, (uLong)in.len);
    PyObject *out = bound <= (uLong)PY_SSIZE_T_MAX && bound <= UINT_MAX
                        ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound)
                        : NULL;
    if (out == NULL) {
        deflateEnd(&zs);
        PyBuffer_Release(&in);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    zs.next_in = (Bytef *)in.buf;
    zs.avail_in = (uInt)in.len;
    zs.next_out = (Bytef *)PyBytes_AS_STRING(out);
    zs.avail_out = (uInt)bound;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = deflate(&zs, Z_FINISH);
    deflateEnd(&zs);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    if (err != Z_STREAM_END) {
        Py_DECREF(out);
        PyErr_Format(PyExc_RuntimeError, "gzip: deflate returned %d", err);
        return NULL;
    }
    if (_PyBytes_Resize(&out, (Py_ssize_t)zs.total_out) < 0)
        return NULL;
    return out;
}

static PyMethodDef methods[] = {
    {"compress", gzip_compress, METH_VARARGS,
     "compress(data, level) -> bytes: a gzip stream of data, in one step without the GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "loghandler._gzip",
    .m_doc = "gzip in one step without the GIL (see loghandler/_gzip.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__gzip(void)
{
    return PyModule_Create(&module);
}
