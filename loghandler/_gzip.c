/* gzip in one step without the GIL: the flusher's compression of a request body.
 *
 * zlib's own module releases the GIL once per output block (32 KiB, then larger), and its
 * compressor object once more to flush. While the application's threads keep the interpreter
 * busy, each release costs the flusher a switch interval (5 ms) to get the GIL back: a
 * 5,000-event batch took three or four of them. Here the output buffer is deflateBound()'s, so
 * one deflate() call finishes the stream, inside one release. The same zlib with the same
 * parameters: the same bytes as zlib.compressobj(level, DEFLATED, 31) (tests/test_speedups.py).
 *
 * array_gzip(parts, level) writes the JSON array of a batch's encoded events ("[" the parts
 * joined by "," "]") straight into the same deflate stream, inside the same one release: the
 * flusher never builds the uncompressed body, whose copy (a fresh block of a megabyte or more
 * for 5,000 events, page faults included) took about 1 ms a batch with the GIL held.
 * array_length(parts) is that array's length, for the batch's byte bound, without making it.
 * A separate extension from _speedups.c so that a machine without zlib's headers loses only
 * this (sender.py falls back to the zlib module).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>
#include <zlib.h>

/* The deflate set-up both entry points share: the level's and the size's bounds, a gzip
 * stream (window bits 15 + 16) with zlib's defaults otherwise, and deflateBound()'s room for
 * the whole output of ``len`` bytes, so that one run of deflate() finishes the stream inside
 * one release of the GIL. 0, or -1 with an exception set (nothing to end then). */
static int
deflate_start(z_stream *zs, int level, size_t len, uLong *bound)
{
    if (level < -1 || level > 9 || len > (size_t)(UINT_MAX / 2)) {
        PyErr_SetString(PyExc_ValueError, "gzip: level -1..9, and at most 2 GiB of data");
        return -1;
    }
    memset(zs, 0, sizeof *zs);
    if (deflateInit2(zs, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        PyErr_NoMemory();
        return -1;
    }
    *bound = deflateBound(zs, (uLong)len);
    if (*bound > (uLong)PY_SSIZE_T_MAX || *bound > UINT_MAX) {
        deflateEnd(zs);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *
gzip_compress(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer in;
    int level;
    if (!PyArg_ParseTuple(args, "y*i", &in, &level))
        return NULL;
    z_stream zs;
    uLong bound;
    if (deflate_start(&zs, level, (size_t)in.len, &bound) < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
    if (out == NULL) {
        deflateEnd(&zs);
        PyBuffer_Release(&in);
        return NULL;
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

/* The parts of a batch (a list of bytes), held by this call while the GIL is released: the
 * list is the flusher's own, but holding each part keeps them alive whatever happens to it. */
typedef struct {
    PyObject **items;
    Py_ssize_t n;
    size_t total; /* the JSON array's length: brackets, commas and the parts */
} Parts;

static int
parts_take(PyObject *list, Parts *p)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "a list of bytes");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    p->items = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(PyObject *));
    if (p->items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t total = 2 + (size_t)(n > 1 ? n - 1 : 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(item)) {
            for (Py_ssize_t j = 0; j < i; j++)
                Py_DECREF(p->items[j]);
            PyMem_Free(p->items);
            PyErr_SetString(PyExc_TypeError, "a list of bytes");
            return -1;
        }
        Py_INCREF(item);
        p->items[i] = item;
        total += (size_t)PyBytes_GET_SIZE(item);
    }
    p->n = n;
    p->total = total;
    return 0;
}

static void
parts_release(Parts *p)
{
    for (Py_ssize_t i = 0; i < p->n; i++)
        Py_DECREF(p->items[i]);
    PyMem_Free(p->items);
}

static PyObject *
array_length(PyObject *Py_UNUSED(self), PyObject *list)
{
    /* -1 when a part is not bytes (the caller encodes event by event). */
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "a list of bytes");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    size_t total = 2 + (size_t)(n > 1 ? n - 1 : 0);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(item))
            return PyLong_FromLong(-1);
        total += (size_t)PyBytes_GET_SIZE(item);
    }
    return PyLong_FromSize_t(total);
}

/* What deflate is fed at a time: the parts are copied into it, so that deflate runs on runs
 * of this size (a call per event of 300 bytes costs more than the copy). */
#define STAGE 65536

static PyObject *
array_gzip(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *list;
    int level;
    if (!PyArg_ParseTuple(args, "Oi", &list, &level))
        return NULL;
    Parts p;
    if (parts_take(list, &p) < 0)
        return NULL;
    z_stream zs;
    uLong bound;
    if (deflate_start(&zs, level, p.total, &bound) < 0) {
        parts_release(&p);
        return NULL;
    }
    /* Raw memory (allocated and freed without the GIL), copied into a bytes object of the
     * compressed length at the end: a tenth of the body or less. */
    unsigned char *out = PyMem_RawMalloc((size_t)bound);
    unsigned char *stage = out != NULL ? PyMem_RawMalloc(STAGE) : NULL;
    if (stage == NULL) {
        PyMem_RawFree(out);
        deflateEnd(&zs);
        parts_release(&p);
        return PyErr_NoMemory();
    }
    int err = Z_OK;
    Py_BEGIN_ALLOW_THREADS
    zs.next_out = out;
    zs.avail_out = (uInt)bound;
    size_t used = 0;
    stage[used++] = '[';
    for (Py_ssize_t i = 0; i <= p.n && err == Z_OK; i++) {
        const char *src;
        size_t len;
        if (i < p.n) {
            src = PyBytes_AS_STRING(p.items[i]);
            len = (size_t)PyBytes_GET_SIZE(p.items[i]);
        } else {
            src = "]";
            len = 1;
        }
        int comma = i > 0 && i < p.n;
        while (err == Z_OK && (comma || len > 0)) {
            if (used == STAGE) {
                zs.next_in = stage;
                zs.avail_in = (uInt)used;
                err = deflate(&zs, Z_NO_FLUSH);
                if (err == Z_OK && zs.avail_in != 0)
                    err = Z_BUF_ERROR; /* not with deflateBound's room: never lose a byte */
                used = 0;
            }
            if (comma) {
                stage[used++] = ',';
                comma = 0;
                continue;
            }
            size_t room = STAGE - used;
            size_t take = len < room ? len : room;
            memcpy(stage + used, src, take);
            used += take;
            src += take;
            len -= take;
        }
    }
    if (err == Z_OK) {
        zs.next_in = stage;
        zs.avail_in = (uInt)used;
        err = deflate(&zs, Z_FINISH);
    }
    deflateEnd(&zs);
    PyMem_RawFree(stage);
    Py_END_ALLOW_THREADS
    parts_release(&p);
    if (err != Z_STREAM_END) {
        PyMem_RawFree(out);
        PyErr_Format(PyExc_RuntimeError, "gzip: deflate returned %d", err);
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)zs.total_out);
    PyMem_RawFree(out);
    return result;
}

static PyMethodDef methods[] = {
    {"compress", gzip_compress, METH_VARARGS,
     "compress(data, level) -> bytes: a gzip stream of data, in one step without the GIL."},
    {"array_gzip", array_gzip, METH_VARARGS,
     "array_gzip(parts, level) -> bytes: a gzip stream of the JSON array b'[' + b','.join(parts)"
     " + b']', in one step without the GIL, the array never made."},
    {"array_length", array_length, METH_O,
     "array_length(parts) -> int: len(b'[' + b','.join(parts) + b']'), or -1 when a part is "
     "not bytes."},
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
