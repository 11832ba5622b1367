/* The compiled hot path: the same rules as the pure-Python code it stands in for, in C.
 *
 * record_event(d) is the caller's copy of a plain LogRecord's __dict__ into its queued event
 * (loghandler/_handler.py, IngestHandler.emit: the fast path); format_events(items) is the
 * flusher's formatting of the _time and level of such events (events.py, item_events). Each
 * returns None for anything outside its narrow case, and the Python code then takes its own
 * careful path for that event: the Python module stays the reference, and
 * tests/test_speedups.py proves the two equal on hostile input.
 *
 * Nothing here may crash the host: every C API call's failure is checked, and an error clears
 * itself into the fallback (None), never into the application.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* Set once by configure() from events.py's own constants: one source of truth. */
static PyObject *k_special;    /* frozenset: extras the fast path leaves to the careful one */
static PyObject *k_formatter;  /* frozenset: attributes formatters set (no extras) */
static PyObject *k_record;     /* the RECORD marker key */
static PyObject *k_levels;     /* dict: levelname -> the event's level */
static PyObject *k_size;       /* the SIZE marker key */
static PyObject *k_context;    /* the CONTEXT marker key */
static Py_ssize_t fast_item;   /* FAST_ITEM_BYTES: the largest event the lock-free path takes */
static Py_ssize_t n_init;      /* how many attributes LogRecord.__init__ sets */
static Py_ssize_t event_size;  /* FAST_EVENT_SIZE */
static Py_ssize_t extra_size;  /* FAST_EXTRA_SIZE */
static Py_ssize_t wire_item;   /* WIRE_ITEM_SIZE: what a queued bytes item holds beyond its length */

/* The record attributes copied, and the event keys they become (interned at module init). */
static const char *const FIELDS[][2] = {
    {"created", "_time"},   {"levelname", "level"}, {"name", "logger"},
    {"module", "module"},   {"funcName", "function"}, {"lineno", "line"},
    {"pathname", "file"},   {"process", "process"}, {"threadName", "thread"},
};
#define N_FIELDS (sizeof(FIELDS) / sizeof(FIELDS[0]))
static PyObject *src_keys[N_FIELDS];
static PyObject *dst_keys[N_FIELDS];
static PyObject *s_msg, *s_args, *s_exc_info, *s_stack_info, *s_message;

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *special, *formatter, *record, *levels, *size, *context;
    Py_ssize_t ninit, esize, xsize, fitem, witem;
    if (!PyArg_ParseTuple(args, "O!O!OO!OOnnnnn", &PyFrozenSet_Type, &special, &PyFrozenSet_Type,
                          &formatter, &record, &PyDict_Type, &levels, &size, &context, &ninit,
                          &esize, &xsize, &fitem, &witem))
        return NULL;
    wire_item = witem;
    Py_INCREF(context);
    Py_XSETREF(k_context, context);
    Py_INCREF(size);
    Py_XSETREF(k_size, size);
    fast_item = fitem;
    Py_INCREF(special);
    Py_XSETREF(k_special, special);
    Py_INCREF(formatter);
    Py_XSETREF(k_formatter, formatter);
    Py_INCREF(record);
    Py_XSETREF(k_record, record);
    Py_INCREF(levels);
    Py_XSETREF(k_levels, levels);
    n_init = ninit;
    event_size = esize;
    extra_size = xsize;
    Py_RETURN_NONE;
}

/* The value as the fast path keeps it: exact str, int, float, bool or None (PLAIN). */
static inline int
is_plain(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type ||
           t == &PyBool_Type || v == Py_None;
}

static int format_time(double created, char out[28]);

/* The message of a plain record (d: the __dict__ of a record whose type is exactly
 * logging.LogRecord; the caller checks): 1 with *out a new reference; 0 when it is not this
 * path's case (a traceback, a non-str message, arguments that do not format): the careful
 * path's. The truth tests and the formatting may run the application's code (__bool__,
 * __str__): they run once, here, and the builders below run none. */
static int
record_message(PyObject *d, PyObject **out)
{
    if (k_special == NULL || !PyDict_CheckExact(d))
        return 0;
    /* Strong references while the application's code may run: it may change the record. */
    PyObject *msg = PyDict_GetItemWithError(d, s_msg);
    if (msg == NULL || !PyUnicode_CheckExact(msg))
        return 0;
    PyObject *exc = PyDict_GetItemWithError(d, s_exc_info);
    PyObject *stack = PyDict_GetItemWithError(d, s_stack_info);
    PyObject *fargs = PyDict_GetItemWithError(d, s_args);
    if (exc == NULL || stack == NULL || fargs == NULL)
        return 0;
    Py_INCREF(msg);
    Py_INCREF(exc);
    Py_INCREF(stack);
    Py_INCREF(fargs);
    PyObject *message = NULL;
    int t = PyObject_IsTrue(exc);
    if (t == 0)
        t = PyObject_IsTrue(stack);
    if (t == 0) {
        t = PyObject_IsTrue(fargs);
        if (t > 0) {
            /* A failure is the careful path's: it writes the error into the message. */
            message = PyUnicode_Format(msg, fargs);
            if (message != NULL && !PyUnicode_CheckExact(message))
                Py_CLEAR(message);
        }
        else if (t == 0) {
            Py_INCREF(msg);
            message = msg;
        }
    }
    Py_DECREF(msg);
    Py_DECREF(exc);
    Py_DECREF(stack);
    Py_DECREF(fargs);
    *out = message;
    return message != NULL;
}

/* The fast path's event dict (_handler.py, IngestHandler.emit), its message given; NULL when
 * it is not this path's case (an extra that is not plain or needs renaming). */
static PyObject *
build_event(PyObject *d, PyObject *message, Py_ssize_t *out_size)
{
    Py_ssize_t size = event_size + PyUnicode_GET_LENGTH(message);
    /* Room for every key at once (the fields, message, the markers, the extras): no resize. */
    Py_ssize_t extras = PyDict_GET_SIZE(d) - n_init;
    PyObject *event = _PyDict_NewPresized(N_FIELDS + 3 + (extras > 0 ? extras : 0));
    if (event == NULL)
        return NULL;
    /* The keys in the order the Python path builds them: _time, level, message, logger, ... */
    for (size_t i = 0; i < N_FIELDS; i++) {
        PyObject *v = PyDict_GetItemWithError(d, src_keys[i]);
        if (v == NULL || PyDict_SetItem(event, dst_keys[i], v) < 0)
            goto fail;
        if (i == 1 && PyDict_SetItem(event, s_message, message) < 0)
            goto fail;
    }
    if (PyDict_SetItem(event, k_record, Py_True) < 0)
        goto fail;
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n > n_init) {
        /* makeRecord() adds extras after __init__'s attributes: only the tail can hold them.
         * The walk starts past the first n_init slots; it saw the whole tail when it met
         * n - n_init keys (no slot of the head was deleted), else the careful path decides. */
        Py_ssize_t pos = n_init, seen = 0;
        PyObject *key, *value;
        while (PyDict_Next(d, &pos, &key, &value)) {
            seen++;
            /* A key whose hashing and comparing run no code of the application's, which could
             * change the record while its borrowed key and value are in hand: an exact str (or
             * a plain number, as the Python path takes it too). Any other key: careful path. */
            PyTypeObject *kt = Py_TYPE(key);
            if (kt != &PyUnicode_Type && kt != &PyLong_Type && kt != &PyFloat_Type &&
                kt != &PyBool_Type && key != Py_None)
                goto fail;
            int special = PySet_Contains(k_special, key);
            if (special < 0)
                goto fail;
            if (special) {
                int fmt = PySet_Contains(k_formatter, key);
                if (fmt < 0)
                    goto fail;
                if (fmt)
                    continue;
                goto fail;  /* an event key to rename, or an attribute out of place */
            }
            PyTypeObject *vt = Py_TYPE(value);
            if (vt == &PyUnicode_Type)
                size += extra_size + PyUnicode_GET_LENGTH(value);
            else if (is_plain(value))
                size += extra_size;
            else
                goto fail;
            if (PyDict_SetItem(event, key, value) < 0)
                goto fail;
        }
        if (seen != n - n_init)
            goto fail;
    }
    *out_size = size;
    return event;
fail:
    Py_DECREF(event);
    return NULL;
}

/* ------------------------------------------------------------------ wire items
 *
 * A fast-path event as the very JSON the flusher would make of it (events.py "Queue items": a
 * bytes item), written on the caller's thread when the shipper allows it (its ``wire``: no
 * context, no policy that reads events, no field for the scrubber to look at). The flusher
 * then only joins items into a request body: its work per event under the GIL is what held
 * delivery to half the application's call rate. orjson's bytes for the same event, byte for
 * byte (tests/test_speedups.py); what this cannot write as orjson does (a float in exponent
 * form, an int past 64 bits, a lone surrogate, a value that is not plain, a key the scrubber
 * has not cleared or a shipper's field names, an event over FAST_ITEM_BYTES) goes the dict way.
 * Bounded: nothing longer than FAST_ITEM_BYTES is copied, and no application code runs. */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    int heap;
    char local[1024];
} Out;

static char esc[256];  /* 0: as it is; 'u': \u00XX; else the letter of a short escape */
static char key_heads[N_FIELDS][24];  /* ,"logger": and the like, for the head's fields */
static Py_ssize_t key_head_len[N_FIELDS];

static int
out_reserve(Out *o, Py_ssize_t more)
{
    if (more <= o->cap - o->len)
        return 0;
    Py_ssize_t cap = o->cap;
    while (cap - o->len < more) {
        if (cap > PY_SSIZE_T_MAX / 2)
            return -1;
        cap *= 2;
    }
    char *p = o->heap ? PyMem_Realloc(o->data, cap) : PyMem_Malloc(cap);
    if (p == NULL)
        return -1;
    if (!o->heap)
        memcpy(p, o->data, o->len);
    o->data = p;
    o->cap = cap;
    o->heap = 1;
    return 0;
}

static inline int
out_put(Out *o, const char *s, Py_ssize_t n)
{
    if (n > o->cap - o->len && out_reserve(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, s, n);
    o->len += n;
    return 0;
}

/* How many bytes from the start of u need no escape: SWAR, eight bytes a step (a byte under
 * 0x20, '"' or '\\' stops it). */
static inline Py_ssize_t
clean_run(const char *u, Py_ssize_t n)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, u + i, 8);
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
        uint64_t hit = ((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b);
        if (hit & highs)
            break;
    }
    while (i < n && esc[(unsigned char)u[i]] == 0)
        i++;
    return i;
}

/* UTF-8 text escaped as orjson escapes a string's content ('"', '\\', control characters). */
static int
put_escaped(Out *o, const char *u, Py_ssize_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (n > fast_item - o->len || out_reserve(o, n) < 0)
        return -1;
    for (;;) {
        Py_ssize_t run = clean_run(u, n);
        if (out_put(o, u, run) < 0)
            return -1;
        if (run == n)
            return 0;
        unsigned char c = (unsigned char)u[run];
        char e = esc[c];
        char buf[6] = {'\\', e, '0', '0', hex[c >> 4], hex[c & 15]};
        if (out_put(o, buf, e == 'u' ? 6 : 2) < 0)
            return -1;
        u += run + 1;
        n -= run + 1;
    }
}

/* A str's UTF-8 (no copy for ASCII); NULL for a lone surrogate or one too long to write. */
static const char *
utf8_of(PyObject *s, Py_ssize_t *n)
{
    if (PyUnicode_READY(s) < 0)
        return NULL;
    if (PyUnicode_IS_ASCII(s)) {
        *n = PyUnicode_GET_LENGTH(s);
        return (const char *)PyUnicode_DATA(s);
    }
    if (PyUnicode_GET_LENGTH(s) > fast_item)
        return NULL;  /* checked before its UTF-8 is made */
    return PyUnicode_AsUTF8AndSize(s, n);  /* a lone surrogate: orjson refuses it too */
}

/* A str as orjson writes it: UTF-8, with '"', '\\' and the control characters escaped. */
static int
put_str(Out *o, PyObject *s)
{
    Py_ssize_t n;
    const char *u = utf8_of(s, &n);
    if (u == NULL || out_put(o, "\"", 1) < 0 || put_escaped(o, u, n) < 0)
        return -1;
    return out_put(o, "\"", 1);
}

/* An exact int's digits; -1 past 64 bits. */
static int
put_int(Out *o, PyObject *v)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()))
        return -1;
    char buf[24];
    int i = 24;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    do {
        buf[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        buf[--i] = '-';
    return out_put(o, buf + i, 24 - i);
}

/* The message ``msg % args`` written as a JSON string with no str made in between, for the
 * common case that runs no code of the application's: ``args`` an exact tuple of exact str
 * and int, ``msg``'s conversions only %s and %d (an int's) and %%, one per argument; no
 * arguments: ``msg`` as it is (logging formats only when there are some). 0: written; 1: not
 * this case (nothing written that counts: the caller starts over); -1: failed. */
static int
put_message(Out *o, PyObject *msg, PyObject *args)
{
    if (!PyTuple_CheckExact(args))
        return 1;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs == 0)
        return put_str(o, msg) < 0 ? -1 : 0;
    Py_ssize_t n;
    const char *u = utf8_of(msg, &n);
    if (u == NULL)
        return -1;
    Py_ssize_t used = 0, start = 0;
    if (out_put(o, "\"", 1) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (u[i] != '%')
            continue;
        if (i + 1 >= n)
            return 1;
        char c = u[i + 1];
        if (put_escaped(o, u + start, i - start) < 0)
            return -1;
        start = i + 2;
        i++;
        if (c == '%') {
            if (out_put(o, "%", 1) < 0)
                return -1;
            continue;
        }
        if ((c != 's' && c != 'd') || used >= nargs)
            return 1;
        PyObject *arg = PyTuple_GET_ITEM(args, used++);
        int r;
        if (PyLong_CheckExact(arg))
            r = put_int(o, arg);
        else if (c == 's' && PyUnicode_CheckExact(arg)) {
            Py_ssize_t an;
            const char *au = utf8_of(arg, &an);
            r = au == NULL ? -1 : put_escaped(o, au, an);
        }
        else
            return 1;
        if (r < 0)
            return -1;
    }
    if (used != nargs)
        return 1;  /* not all arguments converted: the careful path writes why */
    if (put_escaped(o, u + start, n - start) < 0 || out_put(o, "\"", 1) < 0)
        return -1;
    return 0;
}

/* A finite float as repr() writes it, for the usual case: 1e-4 <= |x| < 1e15 with at most 15
 * significant digits. Such a decimal is the only one of 15 digits or fewer that reads back as
 * x (DBL_DIG), so it is repr's shortest one: found as the first m / 10^k that is exactly x
 * (both exact doubles, one correctly rounded division: what parsing the decimal gives).
 * 0: written; -1: not its case (Python's repr writes it). */
static int
put_short_float(Out *o, double x)
{
    static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
                                 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19};
    double a = fabs(x);
    if (!(a >= 1e-4 && a < 1e15))
        return -1;
    for (int k = 0; k < 20; k++) {
        double scaled = a * p10[k];
        if (scaled >= 1e15)
            return -1;
        double m = floor(scaled + 0.5);
        if (m / p10[k] != a)
            continue;
        char digits[24];
        int nd = 0;
        unsigned long long u = (unsigned long long)m;
        do {
            digits[nd++] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        /* digits[] is reversed: digits[0] is the last one. */
        char buf[48];
        int len = 0;
        if (x < 0)
            buf[len++] = '-';
        int whole = nd - k;  /* digits before the point */
        if (whole <= 0)
            buf[len++] = '0';
        for (int i = nd - 1; i >= k; i--)
            buf[len++] = digits[i];
        buf[len++] = '.';
        for (int i = 0; i < -whole; i++)
            buf[len++] = '0';
        int last = 0;  /* drop the fraction's trailing zeros, keeping one digit */
        while (last < k - 1 && digits[last] == '0')
            last++;
        for (int i = (k < nd ? k : nd) - 1; i >= last; i--)
            buf[len++] = digits[i];
        if (k == 0)
            buf[len++] = '0';
        return out_put(o, buf, len);
    }
    return -1;
}

/* The head's strings repeat from record to record (a logger's name, a function's, a file's
 * path, a thread's name): the last one of each field is kept with its JSON, and a record with
 * the same string (the same object, or an equal one) copies that. Strong references: an
 * address alone could be a new string's. Used under the GIL only, in one C call. */
#define HEAD_CACHE_BYTES 256
typedef struct {
    PyObject *str;
    Py_ssize_t len;
    char json[HEAD_CACHE_BYTES];
} HeadCache;
static HeadCache head_cache[N_FIELDS];

static int put_value(Out *o, PyObject *v);

static int
put_head(Out *o, size_t field, PyObject *v)
{
    HeadCache *c = &head_cache[field];
    if (c->str != NULL && (c->str == v || (PyUnicode_CheckExact(v) &&
                                           PyUnicode_Compare(c->str, v) == 0)))
        return out_put(o, c->json, c->len);
    Py_ssize_t start = o->len;
    if (put_value(o, v) < 0)
        return -1;
    Py_ssize_t len = o->len - start;
    if (PyUnicode_CheckExact(v) && len <= HEAD_CACHE_BYTES) {
        memcpy(c->json, o->data + start, len);
        c->len = len;
        Py_INCREF(v);
        Py_XSETREF(c->str, v);
    }
    return 0;
}

/* A plain value as orjson writes it; -1 for what it writes differently or not at all. */
static int
put_value(Out *o, PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type)
        return put_str(o, v);
    if (v == Py_None)
        return out_put(o, "null", 4);
    if (t == &PyBool_Type)
        return v == Py_True ? out_put(o, "true", 4) : out_put(o, "false", 5);
    if (t == &PyLong_Type)
        return put_int(o, v);
    if (t == &PyFloat_Type) {
        double x = PyFloat_AS_DOUBLE(v);
        if (!isfinite(x))
            return out_put(o, "null", 4);
        if (x == 0)
            return signbit(x) ? out_put(o, "-0.0", 4) : out_put(o, "0.0", 3);
        if (put_short_float(o, x) == 0)
            return 0;
        /* Python's repr and orjson agree on the shortest digits; not on exponent forms. */
        char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (s == NULL)
            return -1;
        int r = strchr(s, 'e') != NULL ? -1 : out_put(o, s, (Py_ssize_t)strlen(s));
        PyMem_Free(s);
        return r;
    }
    return -1;
}

/* The wire item of a plain record, its message given: a new bytes object, or NULL (not this
 * path's case; the dict path decides). wire: (fragment, static keys, clean keys | None,
 * learn | None), from the shipper (sender.py, Sender.wire): its fields= as JSON
 * (",\"k\":v..."), their names, the scrubber's set of keys it has nothing to do for, and its
 * learn(key) -> bool, which adds a key to that set unless it is a secret's. */
static PyObject *
build_wire(PyObject *d, PyObject *message, PyObject *wire, Py_ssize_t *out_size,
           int *want_message)
{
    if (!PyTuple_CheckExact(wire) || PyTuple_GET_SIZE(wire) != 4)
        return NULL;
    PyObject *fragment = PyTuple_GET_ITEM(wire, 0), *statics = PyTuple_GET_ITEM(wire, 1);
    PyObject *clean = PyTuple_GET_ITEM(wire, 2), *learn = PyTuple_GET_ITEM(wire, 3);
    if (!PyBytes_CheckExact(fragment) || !PyAnySet_CheckExact(statics) ||
        (clean != Py_None && !PyAnySet_CheckExact(clean)))
        return NULL;
    /* The extras first (only keys, and value types): a key the scrubber has not cleared yet
     * costs the dict path little. As build_event walks them; only keys the scrubber cleared
     * and the shipper's fields do not name (the flusher would check or merge those). */
    Py_ssize_t n, extras;
    int formatted;  /* a formatter's attribute among them, to leave out */
    int learned = 0;
restart:
    n = PyDict_GET_SIZE(d);
    extras = 0;
    formatted = 0;
    if (n > n_init) {
        Py_ssize_t pos = n_init, seen = 0;
        PyObject *key, *value;
        while (PyDict_Next(d, &pos, &key, &value)) {
            seen++;
            if (!PyUnicode_CheckExact(key))
                return NULL;
            int special = PySet_Contains(k_special, key);
            if (special != 0) {
                if (special > 0 && PySet_Contains(k_formatter, key) == 1) {
                    formatted = 1;
                    continue;
                }
                return NULL;
            }
            if (!is_plain(value) || PySet_Contains(statics, key) != 0)
                return NULL;
            int known = clean == Py_None ? 1 : PySet_Contains(clean, key);
            if (known == 0 && learn != Py_None && learned < 64 &&
                PyUnicode_GET_LENGTH(key) <= 256) {
                /* A key's first use: the scrubber decides now whether it is a secret's, once
                 * (our code; it adds a clean key to the set). Any code may run meanwhile (a
                 * collection's finalizers): the record is walked again after it. */
                Py_INCREF(key);
                PyObject *r = PyObject_CallOneArg(learn, key);
                Py_DECREF(key);
                if (r == NULL)
                    return NULL;
                Py_DECREF(r);
                if (r != Py_True)
                    return NULL;
                learned++;
                goto restart;
            }
            if (known != 1)
                return NULL;
            extras++;
        }
        if (seen != n - n_init)
            return NULL;
    }
    PyObject *vals[N_FIELDS];
    for (size_t i = 0; i < N_FIELDS; i++)
        if ((vals[i] = PyDict_GetItemWithError(d, src_keys[i])) == NULL)
            return NULL;
    PyObject *msg = NULL, *fargs = NULL;
    if (message == NULL) {
        /* The message written straight from msg and args (put_message) when nothing about
         * them can run the application's code: no exception, no stack, an exact str. */
        msg = PyDict_GetItemWithError(d, s_msg);
        fargs = PyDict_GetItemWithError(d, s_args);
        PyObject *exc = PyDict_GetItemWithError(d, s_exc_info);
        PyObject *stack = PyDict_GetItemWithError(d, s_stack_info);
        if (msg == NULL || fargs == NULL || !PyUnicode_CheckExact(msg) ||
            (exc != Py_None && exc != Py_False) || stack != Py_None) {
            *want_message = 1;
            return NULL;
        }
    }
    if (!PyFloat_CheckExact(vals[0]) || !PyUnicode_CheckExact(vals[1]))
        return NULL;
    PyObject *level = PyDict_GetItemWithError(k_levels, vals[1]);
    char ts[28];
    if (level == NULL || !PyUnicode_CheckExact(level) ||
        format_time(PyFloat_AS_DOUBLE(vals[0]), ts) < 0)
        return NULL;
    Out o;
    o.data = o.local;
    o.len = 0;
    o.cap = (Py_ssize_t)sizeof(o.local);
    o.heap = 0;
    PyObject *result = NULL;
    if (out_put(&o, "{\"_time\":\"", 10) < 0 || out_put(&o, ts, 27) < 0 ||
        out_put(&o, "\",\"level\":", 10) < 0 || put_str(&o, level) < 0 ||
        out_put(&o, ",\"message\":", 11) < 0)
        goto done;
    if (message != NULL ? put_str(&o, message) < 0 : put_message(&o, msg, fargs) != 0) {
        *want_message = message == NULL;  /* not put_message's case: with the message made */
        goto done;
    }
    for (size_t i = 2; i < N_FIELDS; i++)
        if (out_put(&o, key_heads[i], key_head_len[i]) < 0 ||
            (PyUnicode_CheckExact(vals[i]) ? put_head(&o, i, vals[i])
                                           : put_value(&o, vals[i])) < 0)
            goto done;
    if (extras) {
        Py_ssize_t pos = n_init;
        PyObject *key, *value;
        while (PyDict_Next(d, &pos, &key, &value)) {
            if (formatted && PySet_Contains(k_formatter, key) == 1)
                continue;
            if (out_put(&o, ",", 1) < 0 || put_str(&o, key) < 0 || out_put(&o, ":", 1) < 0 ||
                put_value(&o, value) < 0)
                goto done;
        }
    }
    if (out_put(&o, PyBytes_AS_STRING(fragment), PyBytes_GET_SIZE(fragment)) < 0 ||
        out_put(&o, "}", 1) < 0 || o.len > fast_item)
        goto done;
    result = PyBytes_FromStringAndSize(o.data, o.len);
    *out_size = o.len + wire_item;
done:
    if (o.heap)
        PyMem_Free(o.data);
    return result;
}

/* The event with its size, as a pair (for the Python caller's slow put or context). */
static PyObject *
pair(PyObject *event, Py_ssize_t size)
{
    PyObject *size_obj = PyLong_FromSsize_t(size);
    if (size_obj == NULL) {
        Py_DECREF(event);
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *result = PyTuple_Pack(2, event, size_obj);
    Py_DECREF(event);
    Py_DECREF(size_obj);
    if (result == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return result;
}

/* record_event(d) -> (event, size) | None
 *
 * d: the __dict__ of a record whose type is exactly logging.LogRecord (the caller checks).
 * None: not this path's case (a traceback, a non-str message, arguments that do not format,
 * an extra that is not plain or needs renaming): the caller goes the careful way. */
static PyObject *
record_event(PyObject *self, PyObject *d)
{
    Py_ssize_t size;
    PyObject *message;
    if (!record_message(d, &message)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *event = build_event(d, message, &size);
    Py_DECREF(message);
    if (event == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return pair(event, size);
}

/* record_put(d, queue, fast_len, wire=None) -> True | (item, size) | None
 *
 * The record's queue item: its wire item (bytes) when ``wire`` is given and the record is
 * its case, else record_event's event with its SIZE. Then the ledger's lock-free append
 * (Ledger.offer's fast path) when the queue is under ``fast_len`` and the item small: True.
 * (item, size): queued by the caller (its slow, locked path, or the context's). None: the
 * careful path. */
static PyObject *
record_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject *s_append;
    if ((nargs != 3 && nargs != 4) || k_size == NULL)
        Py_RETURN_NONE;
    if (s_append == NULL && (s_append = PyUnicode_InternFromString("append")) == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t size;
    PyObject *message = NULL, *item = NULL;
    int wire = nargs == 4 && args[3] != Py_None, want_message = 0;
    if (wire) {
        /* The message written as it is formatted, first; made as a str only when that is not
         * the case (and then the wire item is tried with it, unless something else ruled
         * it out). */
        item = build_wire(args[0], NULL, args[3], &size, &want_message);
        if (item == NULL)
            PyErr_Clear();
    }
    if (item != NULL)
        goto append;
    if (!record_message(args[0], &message)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (want_message) {
        want_message = 0;
        item = build_wire(args[0], message, args[3], &size, &want_message);
        if (item == NULL)
            PyErr_Clear();
    }
    if (item == NULL) {
        item = build_event(args[0], message, &size);
        PyObject *size_obj = item == NULL ? NULL : PyLong_FromSsize_t(size);
        if (size_obj == NULL || PyDict_SetItem(item, k_size, size_obj) < 0) {
            Py_XDECREF(size_obj);
            Py_XDECREF(item);
            Py_DECREF(message);
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        Py_DECREF(size_obj);
    }
    Py_DECREF(message);
append:;
    PyObject *queue = args[1];
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    Py_ssize_t held = limit > 0 ? PyObject_Size(queue) : -1;
    if (limit > 0 && held >= 0 && held < limit && size <= fast_item) {
        PyObject *r = PyObject_CallMethodOneArg(queue, s_append, item);
        if (r != NULL) {
            Py_DECREF(r);
            Py_DECREF(item);
            Py_RETURN_TRUE;
        }
    }
    PyErr_Clear();
    return pair(item, size);
}

/* items_size(items) -> int: the estimated sizes of queue items, summed (Ledger's byte bound):
 * an event's SIZE, a wire item's length and WIRE_ITEM_SIZE. */
static PyObject *
items_size(PyObject *self, PyObject *items)
{
    if (k_size == NULL || !PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "items_size: a list of queue items");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (PyBytes_CheckExact(item)) {
            total += PyBytes_GET_SIZE(item) + wire_item;
            continue;
        }
        Py_INCREF(item);
        PyObject *size = PyObject_GetItem(item, k_size);
        Py_DECREF(item);
        if (size == NULL)
            return NULL;
        Py_ssize_t n = PyLong_AsSsize_t(size);
        Py_DECREF(size);
        if (n == -1 && PyErr_Occurred())
            return NULL;
        total += n;
    }
    return PyLong_FromSsize_t(total);
}

/* RFC 3339 in UTC with microseconds, as events.py writes it ("2024-05-01T12:00:00.123456Z").
 * The "YYYY-MM-DDTHH:MM:SS" of the last second is kept (most events of a batch share it), as
 * the Python path keeps it; only the flusher thread calls this, with the GIL held. 0: done. */
static long long cached_sec = -1;
static char cached_prefix[20];

static int
format_time(double created, char out[28])
{
    if (!isfinite(created) || created < 0 || created >= 253402300800.0) /* year 10000 */
        return -1;
    double fsec = floor(created);
    long long micros = (long long)floor((created - fsec) * 1e6);
    if (micros < 0 || micros > 999999)
        return -1;  /* a hair under a second rounded up: the Python path clamps it */
    long long sec = (long long)fsec;
    if (sec != cached_sec) {
        time_t t = (time_t)sec;
        struct tm tm;
        if (gmtime_r(&t, &tm) == NULL)
            return -1;
        int f[6] = {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                    tm.tm_sec};
        char *p = cached_prefix;
        p[0] = '0' + f[0] / 1000; p[1] = '0' + f[0] / 100 % 10;
        p[2] = '0' + f[0] / 10 % 10; p[3] = '0' + f[0] % 10;
        static const char seps[] = "--T::";
        for (int i = 1; i < 6; i++) {
            p[1 + 3 * i] = seps[i - 1];
            p[2 + 3 * i] = '0' + f[i] / 10;
            p[3 + 3 * i] = '0' + f[i] % 10;
        }
        cached_prefix[19] = 0;
        cached_sec = sec;
    }
    memcpy(out, cached_prefix, 19);
    out[19] = '.';
    for (int i = 25; i >= 20; i--) {
        out[i] = '0' + micros % 10;
        micros /= 10;
    }
    out[26] = 'Z';
    out[27] = 0;
    return 0;
}

static PyObject *s_time, *s_level;

/* The event's raw _time (a float) and levelname made the event's: 1; 0 when it is not this
 * path's case (the event is unchanged), -1 on an error (the event may be half done). */
static int
format_fields(PyObject *event)
{
    PyObject *created = PyDict_GetItemWithError(event, s_time);
    PyObject *level = PyDict_GetItemWithError(event, s_level);
    /* Exact types only: looking them up runs no code of the application's. */
    if (created == NULL || level == NULL || !PyFloat_CheckExact(created) ||
        !PyUnicode_CheckExact(level))
        return PyErr_Occurred() ? -1 : 0;
    char buf[28];
    if (format_time(PyFloat_AS_DOUBLE(created), buf) < 0)
        return 0;
    PyObject *mapped = PyDict_GetItemWithError(k_levels, level);
    if (mapped == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *ts = PyUnicode_FromStringAndSize(buf, 27);
    if (ts == NULL)
        return -1;
    int r = (PyDict_SetItem(event, s_level, mapped) < 0 ||
             PyDict_SetItem(event, s_time, ts) < 0) ? -1 : 1;
    Py_DECREF(ts);
    return r;
}

/* format_record(event) -> bool: an event record_event made (RECORD marker popped by the
 * caller), its _time and level formatted. False: the Python path formats it (the event is
 * unchanged). */
static PyObject *
format_record(PyObject *self, PyObject *event)
{
    if (k_levels == NULL || !PyDict_CheckExact(event))
        Py_RETURN_FALSE;
    int r = format_fields(event);
    if (r > 0)
        Py_RETURN_TRUE;
    PyErr_Clear();
    Py_RETURN_FALSE;
}

/* format_items(items, static, static_plain, finish, clean, fallback, skip_head) -> list
 *
 * events.py's item_events, for the events the handler's fast path made (a RECORD marker, no
 * CONTEXT): markers taken out, _time and level formatted, the shipper's fields added where the
 * event lacks them, and ``finish`` run unless ``clean`` (a set, or None) holds every key (the
 * scrubber's plain path: nothing to do). Every other item, and any that fails on the way, is
 * ``fallback(item)``'s: the Python path, whose answer is taken as it is. */
static PyObject *
format_items(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || k_levels == NULL || k_context == NULL) {
        PyErr_SetString(PyExc_TypeError, "format_items: not configured, or wrong arguments");
        return NULL;
    }
    PyObject *items = args[0], *stat = args[1], *finish = args[3], *clean = args[4];
    PyObject *fallback = args[5];
    Py_ssize_t skip_head = PyLong_AsSsize_t(args[6]);
    if (skip_head < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "format_items: skip must be >= 0");
        return NULL;
    }
    int static_plain = PyObject_IsTrue(args[2]);
    if (static_plain < 0)
        return NULL;
    if (!PyTuple_CheckExact(stat) || (clean != Py_None && !PyAnySet_Check(clean))) {
        PyErr_SetString(PyExc_TypeError, "format_items: static must be a tuple, clean a set");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(items, "format_items: items must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t nstatic = PyTuple_GET_SIZE(stat);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(item);
        PyObject *done = NULL;
        if (PyBytes_CheckExact(item)) {
            /* A wire item: the event's final JSON already (record_put). */
            int ar = PyList_Append(out, item);
            Py_DECREF(item);
            if (ar < 0)
                goto error;
            continue;
        }
        int ours = PyDict_CheckExact(item);
        if (ours) {
            int has_context = PyDict_Contains(item, k_context);
            int has_record = PyDict_Contains(item, k_record);
            ours = has_context == 0 && has_record == 1;
        }
        if (ours) {
            /* Taken out first, as the Python path does; then the formatting, which leaves the
             * event as it was when it is not its case. */
            if (PyDict_DelItem(item, k_size) < 0)
                PyErr_Clear();
            int r = PyDict_DelItem(item, k_record) < 0 ? -1 : format_fields(item);
            if (r <= 0) {
                /* Not formatted: the Python path, with the marker back (it decides by it). */
                PyErr_Clear();
                if (PyDict_SetItem(item, k_record, Py_True) < 0)
                    goto error_item;
                ours = 0;
            }
        }
        if (ours) {
            int skip = finish == Py_None;
            /* (The scrubber's plain path is the flat events' only: static values plain.) */
            if (!skip && clean != Py_None && static_plain) {
                /* Every key known clean: the scrubber's plain path would do nothing. The caller
                 * vouches for the static fields' keys, and for the fast path's fixed head of
                 * ``skip_head`` fields, which every such event holds first, in order. */
                Py_ssize_t pos = skip_head;
                PyObject *key, *value;
                skip = 1;
                while (PyDict_Next(item, &pos, &key, &value)) {
                    int in = PyUnicode_CheckExact(key) ? PySet_Contains(clean, key) : 0;
                    if (in < 0)
                        goto error_item;
                    if (!in) {
                        skip = 0;
                        break;
                    }
                }
            }
            for (Py_ssize_t k = 0; k < nstatic; k++) {
                PyObject *pair = PyTuple_GET_ITEM(stat, k);
                if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
                    continue;
                PyObject *key = PyTuple_GET_ITEM(pair, 0);
                if (PyDict_SetDefault(item, key, PyTuple_GET_ITEM(pair, 1)) == NULL)
                    goto error_item;
            }
            if (!skip) {
                PyObject *r = PyObject_CallFunctionObjArgs(
                    finish, item, static_plain ? Py_True : Py_False, NULL);
                if (r == NULL) {
                    /* As the Python path: what could not be checked for secrets goes out
                     * without its values. */
                    PyErr_Clear();
                    if (PyDict_Check(item)) {
                        PyObject *keys = PyDict_Keys(item);
                        if (keys == NULL)
                            goto error_item;
                        static PyObject *s_logger, *s_blank;
                        if (s_logger == NULL) {
                            s_logger = PyUnicode_InternFromString("logger");
                            s_blank = PyUnicode_InternFromString(
                                "[not shipped: scrubbing failed]");
                        }
                        for (Py_ssize_t k = 0; s_blank != NULL && k < PyList_GET_SIZE(keys); k++) {
                            PyObject *key = PyList_GET_ITEM(keys, k);
                            int keep = 0;
                            if (PyUnicode_CheckExact(key))
                                keep = PyUnicode_Compare(key, s_time) == 0 ||
                                       PyUnicode_Compare(key, s_level) == 0 ||
                                       PyUnicode_Compare(key, s_logger) == 0;
                            if (!keep && PyDict_SetItem(item, key, s_blank) < 0)
                                PyErr_Clear();
                        }
                        Py_DECREF(keys);
                    }
                }
                else
                    Py_DECREF(r);
            }
            done = item;
            Py_INCREF(done);
        }
        else {
            done = PyObject_CallOneArg(fallback, item);
            if (done == NULL)
                goto error_item;
        }
        Py_DECREF(item);
        int ar = PyList_Append(out, done);
        Py_DECREF(done);
        if (ar < 0)
            goto error;
        continue;
error_item:
        Py_DECREF(item);
        goto error;
    }
    Py_DECREF(seq);
    return out;
error:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ handle
 *
 * IngestHandler.handle for the common record: the Python method's fast path (_handler.py),
 * without its bytecode. Anything else -- a thread inside loghandler's own sending, filters, a
 * record of another class, a subclass's emit, a formatter, a context or an OpenTelemetry
 * span, any error on the way -- is the Python handle's, called as it is. */

static PyObject *h_python;      /* the Python handle(self, record) */
static PyObject *h_senders;     /* guard._SENDERS: threads inside loghandler's own sending */
static PyObject *h_globals;     /* _handler's module dict: _context_on */
static PyObject *h_modules;     /* sys.modules */
static PyObject *h_record_type; /* logging.LogRecord */
static int h_returns_record;    /* Python 3.12+: handle() returns the record */
static PyTypeObject *h_ledger_type;               /* ledger.Ledger (its __slots__) */
static Py_ssize_t h_queue_at = -1, h_fast_len_at = -1; /* where its queue and fast_len are */
static PyObject *hs_filters, *hs_put, *hs_ledger, *hs_queue, *hs_fast_len, *hs_put_compiled,
    *hs_put_event, *hs_context_on, *hs_otel, *hs_wire;

static PyObject *
configure_handle(PyObject *self, PyObject *args)
{
    PyObject *python, *senders, *globals, *modules, *record_type, *ledger_type, *queue_slot,
        *fast_len_slot;
    int returns_record;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!pO!OO", &python, &PyDict_Type, &senders,
                          &PyDict_Type, &globals, &PyDict_Type, &modules, &PyType_Type,
                          &record_type, &returns_record, &PyType_Type, &ledger_type,
                          &queue_slot, &fast_len_slot))
        return NULL;
    /* The ledger's two slots, read at their offsets (a member descriptor's): no attribute
     * lookup per record. Anything else than plain object slots: by attribute. */
    if (Py_IS_TYPE(queue_slot, &PyMemberDescr_Type) &&
        Py_IS_TYPE(fast_len_slot, &PyMemberDescr_Type) &&
        ((PyMemberDescrObject *)queue_slot)->d_member->type == T_OBJECT_EX &&
        ((PyMemberDescrObject *)fast_len_slot)->d_member->type == T_OBJECT_EX) {
        h_queue_at = ((PyMemberDescrObject *)queue_slot)->d_member->offset;
        h_fast_len_at = ((PyMemberDescrObject *)fast_len_slot)->d_member->offset;
        Py_INCREF(ledger_type);
        Py_XSETREF(h_ledger_type, (PyTypeObject *)ledger_type);
    }
    if (hs_filters == NULL) {
        hs_filters = PyUnicode_InternFromString("filters");
        hs_put = PyUnicode_InternFromString("_compiled_put");
        hs_ledger = PyUnicode_InternFromString("_ledger");
        hs_queue = PyUnicode_InternFromString("queue");
        hs_fast_len = PyUnicode_InternFromString("fast_len");
        hs_put_compiled = PyUnicode_InternFromString("_put_compiled");
        hs_put_event = PyUnicode_InternFromString("_put_event");
        hs_context_on = PyUnicode_InternFromString("_context_on");
        hs_otel = PyUnicode_InternFromString("opentelemetry.trace");
        hs_wire = PyUnicode_InternFromString("_wire");
        if (hs_filters == NULL || hs_put == NULL || hs_ledger == NULL || hs_queue == NULL ||
            hs_fast_len == NULL || hs_put_compiled == NULL || hs_put_event == NULL ||
            hs_context_on == NULL || hs_otel == NULL || hs_wire == NULL)
            return NULL;
    }
    Py_INCREF(python);
    Py_XSETREF(h_python, python);
    Py_INCREF(senders);
    Py_XSETREF(h_senders, senders);
    Py_INCREF(globals);
    Py_XSETREF(h_globals, globals);
    Py_INCREF(modules);
    Py_XSETREF(h_modules, modules);
    Py_INCREF(record_type);
    Py_XSETREF(h_record_type, record_type);
    h_returns_record = returns_record;
    Py_RETURN_NONE;
}

static PyObject *
handle_done(PyObject *record)
{
    if (h_returns_record) {
        Py_INCREF(record);
        return record;
    }
    Py_RETURN_TRUE;
}

static PyObject *
handle(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || h_python == NULL) {
        PyErr_SetString(PyExc_TypeError, "handle(self, record): not configured");
        return NULL;
    }
    PyObject *self = args[0], *record = args[1];
    /* Borrowed lookups only, and none that runs code of the application's. */
    if (PyDict_GET_SIZE(h_senders) != 0 || Py_TYPE(record) != (PyTypeObject *)h_record_type)
        goto python;
    PyObject **self_dict = _PyObject_GetDictPtr(self);
    PyObject **record_dict = _PyObject_GetDictPtr(record);
    if (self_dict == NULL || *self_dict == NULL || record_dict == NULL || *record_dict == NULL)
        goto python;
    PyObject *filters = PyDict_GetItemWithError(*self_dict, hs_filters);
    if (filters == NULL || !PyList_CheckExact(filters) || PyList_GET_SIZE(filters) != 0)
        goto python;
    PyObject *put = PyDict_GetItemWithError(*self_dict, hs_put);
    if (put == NULL || put == Py_None)
        goto python;
    if (PyDict_GetItemWithError(h_globals, hs_context_on) != Py_False)
        goto python;
    int otel = PyDict_Contains(h_modules, hs_otel);
    if (otel != 0)
        goto python;
    PyObject *ledger = PyDict_GetItemWithError(*self_dict, hs_ledger);
    if (ledger == NULL)
        goto python;
    PyObject *wire = PyDict_GetItemWithError(*self_dict, hs_wire);
    if (wire == NULL) {
        if (PyErr_Occurred())
            goto python;
        wire = Py_None;
    }
    Py_INCREF(self);
    Py_INCREF(record);
    Py_INCREF(ledger);
    Py_INCREF(wire);
    PyObject *got = NULL;
    PyObject *queue, *fast_len;
    if (Py_TYPE(ledger) == h_ledger_type && h_queue_at >= 0) {
        queue = *(PyObject **)((char *)ledger + h_queue_at);
        fast_len = *(PyObject **)((char *)ledger + h_fast_len_at);
        if (queue == NULL || fast_len == NULL)  /* not set yet: as an AttributeError */
            queue = fast_len = NULL;
        Py_XINCREF(queue);
        Py_XINCREF(fast_len);
    }
    else {
        queue = PyObject_GetAttr(ledger, hs_queue);
        fast_len = queue == NULL ? NULL : PyObject_GetAttr(ledger, hs_fast_len);
    }
    Py_DECREF(ledger);
    if (fast_len != NULL) {
        PyObject *dict = *record_dict;
        Py_INCREF(dict);
        PyObject *put_args[4] = {dict, queue, fast_len, wire};
        got = record_put(NULL, put_args, 4);
        Py_DECREF(dict);
    }
    Py_XDECREF(queue);
    Py_XDECREF(fast_len);
    Py_DECREF(wire);
    PyObject *r = NULL;
    if (got == Py_True)
        r = Py_True, Py_INCREF(r);
    else if (got != NULL) {
        /* What record_put did not queue itself, as the Python path: the careful path's
         * records, and its events for the locked slow path. */
        PyObject *call_args[4] = {self, record, got, Py_False};
        r = PyObject_VectorcallMethod(hs_put_compiled, call_args, 4, NULL);
    }
    Py_XDECREF(got);
    if (r == NULL) {
        /* As the Python path's except: the careful way, which accounts for what it drops. */
        PyErr_Clear();
        PyObject *call_args[2] = {self, record};
        r = PyObject_VectorcallMethod(hs_put_event, call_args, 2, NULL);
        if (r == NULL)
            PyErr_Clear();
    }
    Py_XDECREF(r);
    PyObject *done = handle_done(record);
    Py_DECREF(self);
    Py_DECREF(record);
    return done;
python:
    if (PyErr_Occurred())
        PyErr_Clear();
    return PyObject_Vectorcall(h_python, args, 2, NULL);
}

/* method(func): func as a method, bound to the instance it is looked up on (a class's
 * handle). */
static PyObject *
as_method(PyObject *self, PyObject *func)
{
    return PyInstanceMethod_New(func);
}

static PyMethodDef methods[] = {
    {"configure_handle", configure_handle, METH_VARARGS,
     "Hand over what handle() reads: the Python handle, _SENDERS, _handler's globals, "
     "sys.modules, LogRecord, and whether handle() returns the record."},
    {"handle", (PyCFunction)(void (*)(void))handle, METH_FASTCALL,
     "IngestHandler.handle(self, record), compiled; the Python one for anything unusual."},
    {"as_method", as_method, METH_O, "A callable as a method of the class it is set on."},
    {"configure", configure, METH_VARARGS, "Set the event model's constants (events.py)."},
    {"record_event", record_event, METH_O,
     "record_event(d) -> (event, size) | None: the fast path's event of a plain record."},
    {"record_put", (PyCFunction)(void (*)(void))record_put, METH_FASTCALL,
     "record_put(d, queue, fast_len, wire=None) -> True | (item, size) | None: the record's "
     "queue item (a wire item or record_event's), queued."},
    {"items_size", items_size, METH_O,
     "items_size(items) -> int: the queue items' estimated sizes, summed."},
    {"format_items", (PyCFunction)(void (*)(void))format_items, METH_FASTCALL,
     "format_items(items, static, static_plain, finish, clean, fallback, skip) -> list."},
    {"format_record", format_record, METH_O,
     "format_record(event) -> bool: _time and level of a fast-path event formatted."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "loghandler._speedups",
    "The compiled hot path (see loghandler/_speedups.c); the Python code is the reference.",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    for (size_t i = 0; i < N_FIELDS; i++) {
        src_keys[i] = PyUnicode_InternFromString(FIELDS[i][0]);
        dst_keys[i] = PyUnicode_InternFromString(FIELDS[i][1]);
        if (src_keys[i] == NULL || dst_keys[i] == NULL)
            return NULL;
    }
    s_msg = PyUnicode_InternFromString("msg");
    s_args = PyUnicode_InternFromString("args");
    s_exc_info = PyUnicode_InternFromString("exc_info");
    s_stack_info = PyUnicode_InternFromString("stack_info");
    s_message = PyUnicode_InternFromString("message");
    s_time = PyUnicode_InternFromString("_time");
    s_level = PyUnicode_InternFromString("level");
    if (!s_msg || !s_args || !s_exc_info || !s_stack_info || !s_message || !s_time || !s_level)
        return NULL;
    for (int c = 0; c < 0x20; c++)
        esc[c] = 'u';
    esc['\b'] = 'b';
    esc['\t'] = 't';
    esc['\n'] = 'n';
    esc['\f'] = 'f';
    esc['\r'] = 'r';
    esc['"'] = '"';
    esc['\\'] = '\\';
    for (size_t i = 0; i < N_FIELDS; i++) {
        int n = snprintf(key_heads[i], sizeof key_heads[i], ",\"%s\":", FIELDS[i][1]);
        if (n < 0 || n >= (int)sizeof key_heads[i])
            return NULL;
        key_head_len[i] = n;
    }
    return PyModule_Create(&module);
}
