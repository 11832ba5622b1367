/* loghandler._speedups: the compiled hot path, the same rules as the Python code it stands in
 * for. loghandler/_compiled.py alone decides whether it is used, and hands it everything it
 * needs in one configure(**table) call; the Python code stays the reference, and
 * tests/test_speedups.py proves the two equal on generated and hostile input.
 *
 *   1. module state: what configure() hands over, kept per module (multi-phase init)
 *   2. errors on the caller's path: only an Exception is handled here
 *   3. the caller's path: a plain record's message and event (events.fast_head and the
 *      handler's fast path)
 *   4. wire items: a plain record's event as its final JSON (events.py "Wire items")
 *   5. record_put: the record's queue item, and the ledger contract (the lock-free append)
 *   6. the flusher's path: _time and level formatted (_time.format_epoch's twin), item_events
 *      (format_items), items_size
 *   7. handle: IngestHandler.handle for the common record
 *   8. the module
 *
 * Nothing here may crash the host: every C API call's failure is checked. An Exception raised
 * on the way (by the application's __str__, by memory running out) sends the record to the
 * careful Python path, as the Python code's `except Exception` does; anything else
 * (KeyboardInterrupt, SystemExit) propagates at once, and no application code runs twice.
 *
 * Private CPython API: _PyDict_NewPresized only, where the version is known to have it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030E0000
/* Room for every key at once: no resize while an event is built (3.10 to 3.13 have it). */
#define new_dict(n) _PyDict_NewPresized(n)
#else
#define new_dict(n) PyDict_New()
#endif

#if PY_VERSION_HEX < 0x030C0000
#define unicode_ready(s) PyUnicode_READY(s)
#else
#define unicode_ready(s) 0 /* every str is ready from 3.12 on */
#endif

/* ------------------------------------------------------------------ 1. module state */

/* The last JSON written for one head field's string (a logger's name, a function's, a file's
 * path, a thread's name: they repeat from record to record). A strong reference: an address
 * alone could be a new string's. */
#define HEAD_CACHE_BYTES 256
typedef struct {
    PyObject *str;
    Py_ssize_t len;
    char json[HEAD_CACHE_BYTES];
} HeadCache;

typedef struct {
    int configured;
    /* The event model (model.py): the record attributes copied into the event head and their
     * event keys, in the head's order; where the message goes among them. */
    PyObject *src_keys, *dst_keys; /* tuples of interned str */
    Py_ssize_t n_fields, message_at;
    PyObject *key_frags;           /* tuple of bytes: ,"logger": and the like (wire items) */
    HeadCache *head_cache;         /* n_fields entries */
    PyObject *special;             /* frozenset: extras the fast path leaves to the careful one */
    PyObject *formatter;           /* frozenset: attributes formatters set (no extras) */
    PyObject *record, *size, *context; /* the queue items' markers */
    PyObject *levels;              /* dict: levelname -> the event's level */
    Py_ssize_t n_init, event_size, extra_size, fast_item, wire_item;
    /* handle(): what it reads besides the handler and the record */
    PyObject *record_type;         /* logging.LogRecord */
    PyObject *senders;             /* dict: threads inside loghandler's own sending */
    PyObject *modules;             /* sys.modules */
    PyObject *in_use;              /* context.IN_USE: [bool], a context was ever entered */
    PyObject *otel;                /* "opentelemetry.trace" */
    int returns_record;            /* Python 3.12+: handle() returns the record */
    /* Names, interned once. */
    PyObject *s_msg, *s_args, *s_exc_info, *s_stack_info, *s_message, *s_time, *s_level,
        *s_logger, *s_blank, *s_append, *s_filters, *s_fast_path, *s_handle_python,
        *s_put_event;
    /* format_time's cache: the last second's "YYYY-MM-DDTHH:MM:SS" (used under the GIL). */
    long long cached_sec;
    char cached_prefix[20];
} State;

static inline State *
get_state(PyObject *module)
{
    return (State *)PyModule_GetState(module);
}

#define STATE_OBJECTS(X)                                                                     \
    X(src_keys) X(dst_keys) X(key_frags) X(special) X(formatter) X(record) X(size) X(context) \
    X(levels) X(record_type) X(senders) X(modules) X(in_use) X(otel) X(s_msg) X(s_args)      \
    X(s_exc_info) X(s_stack_info) X(s_message) X(s_time) X(s_level) X(s_logger) X(s_blank)   \
    X(s_append) X(s_filters) X(s_fast_path) X(s_handle_python) X(s_put_event)

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    State *st = get_state(module);
    if (st == NULL)
        return 0;
#define VISIT(name) Py_VISIT(st->name);
    STATE_OBJECTS(VISIT)
#undef VISIT
    for (Py_ssize_t i = 0; st->head_cache != NULL && i < st->n_fields; i++)
        Py_VISIT(st->head_cache[i].str);
    return 0;
}

static void
clear_head_cache(State *st)
{
    for (Py_ssize_t i = 0; st->head_cache != NULL && i < st->n_fields; i++)
        Py_CLEAR(st->head_cache[i].str);
    PyMem_Free(st->head_cache);
    st->head_cache = NULL;
}

static int
module_clear(PyObject *module)
{
    State *st = get_state(module);
    if (st == NULL)
        return 0;
    st->configured = 0;
#define CLEAR(name) Py_CLEAR(st->name);
    STATE_OBJECTS(CLEAR)
#undef CLEAR
    clear_head_cache(st);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* ------------------------------------------------------------------ 2. errors */

/* After a call that failed: an Exception is this path's to handle (cleared, and the caller
 * falls back to the careful path); anything else (KeyboardInterrupt, SystemExit) stays set and
 * the caller propagates it at once. 1: nothing pending any more. */
static int
clear_if_exception(void)
{
    if (!PyErr_Occurred())
        return 1;
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ 3. the caller's path */

/* The value as the fast path keeps it: exact str, int, float, bool or None (model.PLAIN). */
static inline int
is_plain(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type ||
           t == &PyBool_Type || v == Py_None;
}

/* The message of a plain record (d: the __dict__ of a record whose type is exactly
 * logging.LogRecord; the caller checks). 1: *out is a new reference; 0: not this path's case
 * (a traceback, a non-str message, arguments that do not format: the careful path's); -1: an
 * error to propagate. The truth tests and the formatting may run the application's code
 * (__bool__, __str__): they run once, here, and the builders below run none. */
static int
record_message(State *st, PyObject *d, PyObject **out)
{
    *out = NULL;
    if (!PyDict_CheckExact(d))
        return 0;
    /* Strong references while the application's code may run: it may change the record. */
    PyObject *msg = PyDict_GetItemWithError(d, st->s_msg);
    PyObject *exc = msg == NULL ? NULL : PyDict_GetItemWithError(d, st->s_exc_info);
    PyObject *stack = exc == NULL ? NULL : PyDict_GetItemWithError(d, st->s_stack_info);
    PyObject *fargs = stack == NULL ? NULL : PyDict_GetItemWithError(d, st->s_args);
    if (fargs == NULL || !PyUnicode_CheckExact(msg))
        return clear_if_exception() ? 0 : -1;
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
    if (message == NULL)
        return clear_if_exception() ? 0 : -1;
    *out = message;
    return 1;
}

/* The fast path's event dict (events.fast_head, then the handler's extras), its message given;
 * NULL when it is not this path's case (an extra that is not plain or needs renaming), with an
 * error set only when something failed. */
static PyObject *
build_event(State *st, PyObject *d, PyObject *message, Py_ssize_t *out_size)
{
    Py_ssize_t size = st->event_size + PyUnicode_GET_LENGTH(message);
    Py_ssize_t n = PyDict_GET_SIZE(d);
    Py_ssize_t extras = n - st->n_init;
    PyObject *event = new_dict(st->n_fields + 3 + (extras > 0 ? extras : 0));
    if (event == NULL)
        return NULL;
    /* The keys in the head's order: _time, level, message, logger, ... */
    for (Py_ssize_t i = 0; i < st->n_fields; i++) {
        if (i == st->message_at && PyDict_SetItem(event, st->s_message, message) < 0)
            goto fail;
        PyObject *v = PyDict_GetItemWithError(d, PyTuple_GET_ITEM(st->src_keys, i));
        if (v == NULL || PyDict_SetItem(event, PyTuple_GET_ITEM(st->dst_keys, i), v) < 0)
            goto fail;
    }
    if (st->message_at >= st->n_fields && PyDict_SetItem(event, st->s_message, message) < 0)
        goto fail;
    if (PyDict_SetItem(event, st->record, Py_True) < 0)
        goto fail;
    if (n > st->n_init) {
        /* makeRecord() adds extras after __init__'s attributes: only the tail can hold them.
         * The walk starts past the first n_init slots; it saw the whole tail when it met
         * n - n_init keys (no slot of the head was deleted), else the careful path decides. */
        Py_ssize_t pos = st->n_init, seen = 0;
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
            int special = PySet_Contains(st->special, key);
            if (special < 0)
                goto fail;
            if (special) {
                int fmt = PySet_Contains(st->formatter, key);
                if (fmt < 0)
                    goto fail;
                if (fmt)
                    continue;
                goto fail; /* an event key to rename, or an attribute out of place */
            }
            if (Py_TYPE(value) == &PyUnicode_Type)
                size += st->extra_size + PyUnicode_GET_LENGTH(value);
            else if (is_plain(value))
                size += st->extra_size;
            else
                goto fail;
            if (PyDict_SetItem(event, key, value) < 0)
                goto fail;
        }
        if (seen != n - st->n_init)
            goto fail;
    }
    *out_size = size;
    return event;
fail:
    Py_DECREF(event);
    return NULL;
}

/* ------------------------------------------------------------------ 4. wire items
 *
 * A fast-path event as the very JSON the flusher would make of it (a bytes item), written on
 * the caller's thread when the shipper allows it (Shipper.wire: no context, no policy that
 * reads events, no field for the scrubber to look at). The flusher then only joins items into
 * a request body. The encoder's bytes for the same event, byte for byte (tests/test_speedups.py,
 * with orjson and with the standard library's encoder); what this cannot write as they do (a
 * float in exponent form, an int past 64 bits, a lone surrogate, a value that is not plain, a
 * key the scrubber has not cleared or a shipper's field names, an event over FAST_ITEM_BYTES)
 * goes the dict way. Bounded: nothing longer than FAST_ITEM_BYTES is copied. */

typedef struct {
    char *data;
    Py_ssize_t len, cap, limit;
    int heap;
    char local[1024];
} Out;

static void
out_init(Out *o, Py_ssize_t limit)
{
    o->data = o->local;
    o->len = 0;
    o->cap = (Py_ssize_t)sizeof(o->local);
    o->limit = limit;
    o->heap = 0;
}

static void
out_free(Out *o)
{
    if (o->heap)
        PyMem_Free(o->data);
}

/* 0: as it is; 'u': \u00XX; else the letter of a short escape (the encoders' escapes). */
static const char esc[256] = {
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'b', 't', 'n', 'u', 'f', 'r', 'u', 'u',
    'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u', 'u',
    0,   0,   '"', 0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,
    0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   '\\', 0,  0,   0,
};

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

/* UTF-8 text escaped as the encoders escape a string's content. */
static int
put_escaped(Out *o, const char *u, Py_ssize_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (n > o->limit - o->len || out_reserve(o, n) < 0)
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

/* A str's UTF-8 (no copy for ASCII); NULL for a lone surrogate or one too long to write (an
 * error may be set: the caller clears it, an Exception). */
static const char *
utf8_of(PyObject *s, Py_ssize_t limit, Py_ssize_t *n)
{
    if (unicode_ready(s) < 0)
        return NULL;
    if (PyUnicode_IS_ASCII(s)) {
        *n = PyUnicode_GET_LENGTH(s);
        return (const char *)PyUnicode_DATA(s);
    }
    if (PyUnicode_GET_LENGTH(s) > limit)
        return NULL; /* checked before its UTF-8 is made */
    return PyUnicode_AsUTF8AndSize(s, n); /* a lone surrogate: the encoders refuse it too */
}

/* A str as the encoders write it: UTF-8, with '"', '\\' and the control characters escaped. */
static int
put_str(Out *o, PyObject *s)
{
    Py_ssize_t n;
    const char *u = utf8_of(s, o->limit, &n);
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
    const char *u = utf8_of(msg, o->limit, &n);
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
            const char *au = utf8_of(arg, o->limit, &an);
            r = au == NULL ? -1 : put_escaped(o, au, an);
        }
        else
            return 1;
        if (r < 0)
            return -1;
    }
    if (used != nargs)
        return 1; /* not all arguments converted: the careful path writes why */
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
    static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,
                                 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19};
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
        int whole = nd - k; /* digits before the point */
        if (whole <= 0)
            buf[len++] = '0';
        for (int i = nd - 1; i >= k; i--)
            buf[len++] = digits[i];
        buf[len++] = '.';
        for (int i = 0; i < -whole; i++)
            buf[len++] = '0';
        int last = 0; /* drop the fraction's trailing zeros, keeping one digit */
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

/* A plain value as the encoders write it; -1 for what they write differently or not at all. */
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
        /* Python's repr and the encoders agree on the shortest digits; not on exponents. */
        char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (s == NULL)
            return -1;
        int r = strchr(s, 'e') != NULL ? -1 : out_put(o, s, (Py_ssize_t)strlen(s));
        PyMem_Free(s);
        return r;
    }
    return -1;
}

/* A head field's string: the cached JSON when it is the last one's (the same object, or an
 * equal one), else written and cached. Used under the GIL only, in one C call. */
static int
put_head(State *st, Out *o, Py_ssize_t field, PyObject *v)
{
    HeadCache *c = &st->head_cache[field];
    if (c->str != NULL && (c->str == v || PyUnicode_Compare(c->str, v) == 0))
        return out_put(o, c->json, c->len);
    Py_ssize_t start = o->len;
    if (put_str(o, v) < 0)
        return -1;
    Py_ssize_t len = o->len - start;
    if (len <= HEAD_CACHE_BYTES) {
        memcpy(c->json, o->data + start, len);
        c->len = len;
        Py_INCREF(v);
        Py_XSETREF(c->str, v);
    }
    return 0;
}

static int format_time(State *st, double created, char out[28]);

/* The wire item of a plain record, its message given or not (NULL: written from msg and args
 * when that runs no application code; *want_message set when the message must be made
 * first): a new bytes object, or NULL (not this path's case; the dict path decides; an error
 * may be set). wire: (fragment, static keys, clean keys | None, learn | None), from
 * Shipper.wire: its fields= as JSON (",\"k\":v..."), their names, the scrubber's set of keys it
 * has nothing to do for, and its learn(key) -> bool, which adds a key to that set unless it is
 * a secret's. */
static PyObject *
build_wire(State *st, PyObject *d, PyObject *message, PyObject *wire, Py_ssize_t *out_size,
           int *want_message)
{
    if (!PyDict_CheckExact(d) || !PyTuple_CheckExact(wire) || PyTuple_GET_SIZE(wire) != 4 ||
        st->n_fields > 16 || st->message_at > st->n_fields)
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
    int formatted; /* a formatter's attribute among them, to leave out */
    int learned = 0;
restart:
    n = PyDict_GET_SIZE(d);
    extras = 0;
    formatted = 0;
    if (n > st->n_init) {
        Py_ssize_t pos = st->n_init, seen = 0;
        PyObject *key, *value;
        while (PyDict_Next(d, &pos, &key, &value)) {
            seen++;
            if (!PyUnicode_CheckExact(key))
                return NULL;
            int special = PySet_Contains(st->special, key);
            if (special != 0) {
                if (special > 0 && PySet_Contains(st->formatter, key) == 1) {
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
        if (seen != n - st->n_init)
            return NULL;
    }
    PyObject *vals[16];
    for (Py_ssize_t i = 0; i < st->n_fields; i++)
        if ((vals[i] = PyDict_GetItemWithError(d, PyTuple_GET_ITEM(st->src_keys, i))) == NULL)
            return NULL;
    PyObject *msg = NULL, *fargs = NULL;
    if (message == NULL) {
        /* The message written straight from msg and args (put_message) when nothing about
         * them can run the application's code: no exception, no stack, an exact str. */
        msg = PyDict_GetItemWithError(d, st->s_msg);
        fargs = PyDict_GetItemWithError(d, st->s_args);
        PyObject *exc = PyDict_GetItemWithError(d, st->s_exc_info);
        PyObject *stack = PyDict_GetItemWithError(d, st->s_stack_info);
        if (msg == NULL || fargs == NULL || !PyUnicode_CheckExact(msg) ||
            (exc != Py_None && exc != Py_False) || stack != Py_None) {
            *want_message = 1;
            return NULL;
        }
    }
    /* The head's _time (a float) and level (a name of the level table) come first, in that
     * order, as model.HEAD has them. */
    if (st->message_at < 2 || !PyFloat_CheckExact(vals[0]) || !PyUnicode_CheckExact(vals[1]))
        return NULL;
    PyObject *level = PyDict_GetItemWithError(st->levels, vals[1]);
    char ts[28];
    if (level == NULL || !PyUnicode_CheckExact(level) ||
        format_time(st, PyFloat_AS_DOUBLE(vals[0]), ts) < 0)
        return NULL;
    Out o;
    out_init(&o, st->fast_item);
    PyObject *result = NULL;
    if (out_put(&o, "{\"_time\":\"", 10) < 0 || out_put(&o, ts, 27) < 0 ||
        out_put(&o, "\",\"level\":", 10) < 0 || put_str(&o, level) < 0)
        goto done;
    for (Py_ssize_t i = 2; i <= st->n_fields; i++) {
        if (i == st->message_at) {
            if (out_put(&o, ",\"message\":", 11) < 0)
                goto done;
            if (message != NULL ? put_str(&o, message) < 0 : put_message(&o, msg, fargs) != 0) {
                /* not put_message's case: with the message made */
                *want_message = message == NULL;
                goto done;
            }
        }
        if (i == st->n_fields)
            break;
        PyObject *frag = PyTuple_GET_ITEM(st->key_frags, i);
        if (out_put(&o, PyBytes_AS_STRING(frag), PyBytes_GET_SIZE(frag)) < 0 ||
            (PyUnicode_CheckExact(vals[i]) ? put_head(st, &o, i, vals[i])
                                           : put_value(&o, vals[i])) < 0)
            goto done;
    }
    if (extras) {
        Py_ssize_t pos = st->n_init;
        PyObject *key, *value;
        while (PyDict_Next(d, &pos, &key, &value)) {
            if (formatted && PySet_Contains(st->formatter, key) == 1)
                continue;
            if (out_put(&o, ",", 1) < 0 || put_str(&o, key) < 0 || out_put(&o, ":", 1) < 0 ||
                put_value(&o, value) < 0)
                goto done;
        }
    }
    if (out_put(&o, PyBytes_AS_STRING(fragment), PyBytes_GET_SIZE(fragment)) < 0 ||
        out_put(&o, "}", 1) < 0 || o.len > st->fast_item)
        goto done;
    result = PyBytes_FromStringAndSize(o.data, o.len);
    *out_size = o.len + st->wire_item;
done:
    out_free(&o);
    return result;
}

/* ------------------------------------------------------------------ 5. record_put */

/* The item with its size, as a pair (for the caller's slow put or context); steals item.
 * None when the pair cannot be made (the careful path); NULL to propagate. */
static PyObject *
pair(PyObject *item, Py_ssize_t size)
{
    PyObject *size_obj = PyLong_FromSsize_t(size);
    PyObject *result = size_obj == NULL ? NULL : PyTuple_Pack(2, item, size_obj);
    Py_DECREF(item);
    Py_XDECREF(size_obj);
    if (result == NULL) {
        if (!clear_if_exception())
            return NULL;
        Py_RETURN_NONE;
    }
    return result;
}

/* The record's queue item: its wire item (bytes) when ``wire`` is a wire and the record is its
 * case, else the fast path's event with its SIZE; then, with a gate, the ledger contract's
 * lock-free append. True: queued. (item, size): for the caller to queue (the gate said no, or
 * there is none). None: the careful path's. NULL: an error to propagate. */
static PyObject *
put_record(State *st, PyObject *d, PyObject *gate, PyObject *wire)
{
    Py_ssize_t size = 0;
    PyObject *message = NULL, *item = NULL;
    int want_message = 0;
    if (wire != Py_None) {
        /* The message written as it is formatted, first; made as a str only when that is not
         * the case (and then the wire item is tried with it, unless something else ruled it
         * out). */
        item = build_wire(st, d, NULL, wire, &size, &want_message);
        if (item == NULL && !clear_if_exception())
            return NULL;
    }
    if (item == NULL) {
        int got = record_message(st, d, &message);
        if (got < 0)
            return NULL;
        if (got == 0)
            Py_RETURN_NONE;
        if (want_message) {
            want_message = 0;
            item = build_wire(st, d, message, wire, &size, &want_message);
            if (item == NULL && !clear_if_exception()) {
                Py_DECREF(message);
                return NULL;
            }
        }
        if (item == NULL) {
            item = build_event(st, d, message, &size);
            PyObject *size_obj = item == NULL ? NULL : PyLong_FromSsize_t(size);
            if (size_obj == NULL || PyDict_SetItem(item, st->size, size_obj) < 0) {
                Py_XDECREF(size_obj);
                Py_XDECREF(item);
                Py_DECREF(message);
                if (!clear_if_exception())
                    return NULL;
                Py_RETURN_NONE;
            }
            Py_DECREF(size_obj);
        }
        Py_DECREF(message);
    }
    /* The ledger contract (_compiled.py): gate is [queue, fast_len], which only the ledger
     * writes; append without the lock only while len(queue) < fast_len, and only items of at
     * most FAST_ITEM_BYTES (Intake.offer's test). */
    if (PyList_CheckExact(gate) && PyList_GET_SIZE(gate) == 2 && size <= st->fast_item) {
        PyObject *queue = PyList_GET_ITEM(gate, 0), *limit_obj = PyList_GET_ITEM(gate, 1);
        Py_INCREF(queue);
        Py_INCREF(limit_obj);
        Py_ssize_t limit = PyLong_CheckExact(limit_obj) ? PyLong_AsSsize_t(limit_obj) : -1;
        Py_ssize_t held = limit > 0 ? PyObject_Size(queue) : -1;
        int appended = 0;
        if (held >= 0 && held < limit) {
            PyObject *r = PyObject_CallMethodOneArg(queue, st->s_append, item);
            appended = r != NULL;
            Py_XDECREF(r);
        }
        Py_DECREF(queue);
        Py_DECREF(limit_obj);
        if (appended) {
            Py_DECREF(item);
            Py_RETURN_TRUE;
        }
        if (!clear_if_exception()) {
            Py_DECREF(item);
            return NULL;
        }
    }
    return pair(item, size);
}

static PyObject *
not_configured(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "loghandler._speedups is not configured (loghandler/_compiled.py does it)");
    return NULL;
}

/* record_put(d, gate, wire=None) -> True | (item, size) | None */
static PyObject *
record_put(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record_put(d, gate, wire=None)");
        return NULL;
    }
    return put_record(st, args[0], args[1], nargs == 3 ? args[2] : Py_None);
}

/* ------------------------------------------------------------------ 6. the flusher's path */

/* Days since 1970-01-01 as a proleptic Gregorian date (days >= 0): the civil-from-days
 * algorithm of eras of 400 years (146,097 days each), as gmtime computes it. */
static void
civil_from_days(long long days, int *year, int *month, int *day)
{
    long long z = days + 719468; /* days since 0000-03-01 */
    long long era = z / 146097;
    long long doe = z - era * 146097;                                   /* [0, 146096] */
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);            /* [0, 365] */
    long long mp = (5 * doy + 2) / 153;                                 /* March = 0 */
    *day = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = (int)(yoe + era * 400 + (*month <= 2));
}

/* RFC 3339 in UTC with microseconds, truncated, as _time.format_epoch writes it
 * ("2024-05-01T12:00:00.123456Z"): its twin. The last second's "YYYY-MM-DDTHH:MM:SS" is kept,
 * as _time.py keeps it. 0: done; -1: not its case (before 1970, past year 9999, not finite):
 * the Python path writes it. */
static int
format_time(State *st, double created, char out[28])
{
    if (!isfinite(created) || created < 0 || created >= 253402300800.0) /* year 10000 */
        return -1;
    double fsec = floor(created);
    long long micros = (long long)floor((created - fsec) * 1e6);
    if (micros > 999999)
        micros = 999999; /* a hair under a second can round up */
    long long sec = (long long)fsec;
    if (sec != st->cached_sec) {
        int f[6];
        civil_from_days(sec / 86400, &f[0], &f[1], &f[2]);
        long long rem = sec % 86400;
        f[3] = (int)(rem / 3600);
        f[4] = (int)(rem / 60 % 60);
        f[5] = (int)(rem % 60);
        char *p = st->cached_prefix;
        p[0] = (char)('0' + f[0] / 1000);
        p[1] = (char)('0' + f[0] / 100 % 10);
        p[2] = (char)('0' + f[0] / 10 % 10);
        p[3] = (char)('0' + f[0] % 10);
        static const char seps[] = "--T::";
        for (int i = 1; i < 6; i++) {
            p[1 + 3 * i] = seps[i - 1];
            p[2 + 3 * i] = (char)('0' + f[i] / 10);
            p[3 + 3 * i] = (char)('0' + f[i] % 10);
        }
        p[19] = 0;
        st->cached_sec = sec;
    }
    memcpy(out, st->cached_prefix, 19);
    out[19] = '.';
    for (int i = 25; i >= 20; i--) {
        out[i] = (char)('0' + micros % 10);
        micros /= 10;
    }
    out[26] = 'Z';
    out[27] = 0;
    return 0;
}

/* The event's raw _time (a float) and levelname made the event's: 1; 0 when it is not this
 * path's case (the event is unchanged), -1 on an error (the event may be half done). */
static int
format_fields(State *st, PyObject *event)
{
    PyObject *created = PyDict_GetItemWithError(event, st->s_time);
    PyObject *level = created == NULL ? NULL : PyDict_GetItemWithError(event, st->s_level);
    /* Exact types only: looking them up runs no code of the application's. */
    if (level == NULL || !PyFloat_CheckExact(created) || !PyUnicode_CheckExact(level))
        return PyErr_Occurred() ? -1 : 0;
    char buf[28];
    if (format_time(st, PyFloat_AS_DOUBLE(created), buf) < 0)
        return 0;
    PyObject *mapped = PyDict_GetItemWithError(st->levels, level);
    if (mapped == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *ts = PyUnicode_FromStringAndSize(buf, 27);
    if (ts == NULL)
        return -1;
    int r = (PyDict_SetItem(event, st->s_level, mapped) < 0 ||
             PyDict_SetItem(event, st->s_time, ts) < 0) ? -1 : 1;
    Py_DECREF(ts);
    return r;
}

/* format_record(event) -> bool: a fast-path event (RECORD marker popped by the caller), its
 * _time and level formatted. False: the Python path formats it (the event is unchanged). */
static PyObject *
format_record(PyObject *module, PyObject *event)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (!PyDict_CheckExact(event))
        Py_RETURN_FALSE;
    int r = format_fields(st, event);
    if (r > 0)
        Py_RETURN_TRUE;
    if (!clear_if_exception())
        return NULL;
    Py_RETURN_FALSE;
}

/* A failing scrubber, as the Python path meets it: what could not be checked for secrets goes
 * out without its values (_time, level and logger kept). -1: an error to propagate. */
static int
blank_values(State *st, PyObject *item)
{
    PyObject *keys = PyDict_Keys(item);
    if (keys == NULL)
        return clear_if_exception() ? 0 : -1;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(keys); k++) {
        PyObject *key = PyList_GET_ITEM(keys, k);
        int keep = PyUnicode_CheckExact(key) &&
                   (PyUnicode_Compare(key, st->s_time) == 0 ||
                    PyUnicode_Compare(key, st->s_level) == 0 ||
                    PyUnicode_Compare(key, st->s_logger) == 0);
        if (!keep && PyDict_SetItem(item, key, st->s_blank) < 0 && !clear_if_exception()) {
            Py_DECREF(keys);
            return -1;
        }
    }
    Py_DECREF(keys);
    return 0;
}

/* format_items(items, static, static_plain, finish, clean, fallback, skip_head) -> list
 *
 * events.item_events' twin, for the events a fast path made (a RECORD marker, no CONTEXT):
 * markers taken out, _time and level formatted, the shipper's fields added where the event
 * lacks them, and ``finish`` run unless ``clean`` (a set, or None) holds every key (the
 * scrubber's plain path: nothing to do). A wire item stays as it is. Every other item, and any
 * that fails on the way, is ``fallback(item)``'s: the Python path, whose answer is taken as it
 * is. */
static PyObject *
format_items(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "format_items: seven arguments");
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
            int has_context = PyDict_Contains(item, st->context);
            int has_record = has_context < 0 ? -1 : PyDict_Contains(item, st->record);
            if (has_record < 0)
                goto error_item;
            ours = has_context == 0 && has_record == 1;
        }
        if (ours) {
            /* Taken out first, as the Python path does; then the formatting, which leaves the
             * event as it was when it is not its case. */
            int r = PyDict_DelItem(item, st->size);
            if (r < 0 && !clear_if_exception()) /* KeyError: no size marker */
                goto error_item;
            r = PyDict_DelItem(item, st->record) < 0 ? -1 : format_fields(st, item);
            if (r <= 0) {
                /* Not formatted: the Python path, with the marker back (it decides by it). */
                if (!clear_if_exception() || PyDict_SetItem(item, st->record, Py_True) < 0)
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
                PyObject *kv = PyTuple_GET_ITEM(stat, k);
                if (!PyTuple_CheckExact(kv) || PyTuple_GET_SIZE(kv) != 2)
                    continue;
                if (PyDict_SetDefault(item, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1)) ==
                    NULL)
                    goto error_item;
            }
            if (!skip) {
                PyObject *r = PyObject_CallFunctionObjArgs(
                    finish, item, static_plain ? Py_True : Py_False, NULL);
                if (r == NULL) {
                    /* The Python path's `except Exception`: anything else propagates. */
                    if (!clear_if_exception() || blank_values(st, item) < 0)
                        goto error_item;
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

/* items_size(items) -> int: the estimated sizes of queue items, summed (the ledger's byte
 * bound): an event's SIZE, a wire item's length and WIRE_ITEM_SIZE. */
static PyObject *
items_size(PyObject *module, PyObject *items)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "items_size: a list of queue items");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (PyBytes_CheckExact(item)) {
            total += PyBytes_GET_SIZE(item) + st->wire_item;
            continue;
        }
        Py_INCREF(item);
        PyObject *size = PyObject_GetItem(item, st->size);
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

/* ------------------------------------------------------------------ 7. handle
 *
 * IngestHandler.handle for the common record: the Python handle's fast path (the handler's
 * _handle_python, which it stands in for), without its bytecode. It reads, from the handler's
 * own __dict__, ``filters`` and ``_fast_path`` (_compiled.fast_path's (gate, wire, put)), and
 * nothing else. Anything else -- a thread inside loghandler's own sending, filters, a record of
 * another class, a handler without a fast path (a subclass's emit, a formatter), a context or
 * an OpenTelemetry span -- is _handle_python's, called as it is. */

static PyObject *
handle_done(State *st, PyObject *record)
{
    if (st->returns_record)
        return Py_NewRef(record);
    Py_RETURN_TRUE;
}

/* The careful path's: self._put_event(record), which accounts for what it drops. */
static PyObject *
put_event(State *st, PyObject *self, PyObject *record)
{
    PyObject *call_args[2] = {self, record};
    return PyObject_VectorcallMethod(st->s_put_event, call_args, 2, NULL);
}

static PyObject *
handle(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "handle(self, record)");
        return NULL;
    }
    PyObject *self = args[0], *record = args[1];
    /* Borrowed reads only, and none that runs code of the application's. */
    if (PyDict_GET_SIZE(st->senders) != 0 || Py_TYPE(record) != (PyTypeObject *)st->record_type ||
        PyList_GET_SIZE(st->in_use) < 1 || PyList_GET_ITEM(st->in_use, 0) != Py_False)
        goto python;
    int otel = PyDict_Contains(st->modules, st->otel);
    if (otel != 0) {
        if (otel < 0 && !clear_if_exception())
            return NULL;
        goto python;
    }
    PyObject *self_dict = PyObject_GenericGetDict(self, NULL);
    if (self_dict == NULL)
        goto python_after_error;
    PyObject *filters = PyDict_GetItemWithError(self_dict, st->s_filters);
    PyObject *fast = filters == NULL ? NULL : PyDict_GetItemWithError(self_dict, st->s_fast_path);
    int ours = fast != NULL && PyList_CheckExact(filters) && PyList_GET_SIZE(filters) == 0 &&
               PyTuple_CheckExact(fast) && PyTuple_GET_SIZE(fast) == 3;
    if (ours)
        Py_INCREF(fast); /* holds gate, wire and put while code runs */
    Py_DECREF(self_dict);
    if (!ours)
        goto python_after_error;
    PyObject *d = PyObject_GenericGetDict(record, NULL);
    if (d == NULL) {
        Py_DECREF(fast);
        goto python_after_error;
    }
    Py_INCREF(self);
    Py_INCREF(record);
    PyObject *got = put_record(st, d, PyTuple_GET_ITEM(fast, 0), PyTuple_GET_ITEM(fast, 1));
    Py_DECREF(d);
    PyObject *r = NULL;
    if (got == Py_True)
        r = Py_NewRef(Py_True);
    else if (got == Py_None)
        r = put_event(st, self, record);
    else if (got != NULL) {
        /* What the gate did not take: the intake's locked slow path. */
        PyObject *put_args[2] = {PyTuple_GET_ITEM(got, 0), PyTuple_GET_ITEM(got, 1)};
        r = PyObject_Vectorcall(PyTuple_GET_ITEM(fast, 2), put_args, 2, NULL);
        if (r == NULL && clear_if_exception())
            r = put_event(st, self, record); /* as the Python handle's `except Exception` */
    }
    Py_XDECREF(got);
    Py_DECREF(fast);
    PyObject *done = r == NULL ? NULL : handle_done(st, record);
    Py_XDECREF(r);
    Py_DECREF(self);
    Py_DECREF(record);
    return done;
python_after_error:
    if (!clear_if_exception())
        return NULL;
python:;
    PyObject *call_args[2] = {self, record};
    return PyObject_VectorcallMethod(st->s_handle_python, call_args, 2, NULL);
}

/* ------------------------------------------------------------------ 8. the module */

static int
intern_into(PyObject **slot, const char *text)
{
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

/* One keyword argument of configure(): a new reference, type-checked when ``type`` is given. */
static PyObject *
table_item(PyObject *table, const char *name, PyTypeObject *type)
{
    PyObject *value = PyDict_GetItemString(table, name); /* borrowed; no error raised */
    if (value == NULL) {
        PyErr_Format(PyExc_TypeError, "configure(): %s is missing", name);
        return NULL;
    }
    if (type != NULL && !PyObject_TypeCheck(value, type)) {
        PyErr_Format(PyExc_TypeError, "configure(): %s must be %s, not %s", name, type->tp_name,
                     Py_TYPE(value)->tp_name);
        return NULL;
    }
    return Py_NewRef(value);
}

static int
table_size(PyObject *table, const char *name, Py_ssize_t *out)
{
    PyObject *value = table_item(table, name, &PyLong_Type);
    if (value == NULL)
        return -1;
    *out = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* configure(**table): everything the module needs, from loghandler/_compiled.py (its _table()
 * names each item and where it comes from). Replaces what an earlier call set. */
static PyObject *
configure(PyObject *module, PyObject *args, PyObject *table)
{
    State *st = get_state(module);
    if (PyTuple_GET_SIZE(args) != 0 || table == NULL) {
        PyErr_SetString(PyExc_TypeError, "configure(**table): keyword arguments only");
        return NULL;
    }
    st->configured = 0;
    struct {
        PyObject **slot;
        const char *name;
        PyTypeObject *type;
    } objects[] = {
        {&st->src_keys, "record_attrs", &PyTuple_Type},
        {&st->dst_keys, "event_keys", &PyTuple_Type},
        {&st->special, "special", &PyFrozenSet_Type},
        {&st->formatter, "formatter", &PyFrozenSet_Type},
        {&st->record, "record_marker", NULL},
        {&st->size, "size_marker", NULL},
        {&st->context, "context_marker", NULL},
        {&st->levels, "levels", &PyDict_Type},
        {&st->record_type, "record_type", &PyType_Type},
        {&st->senders, "senders", &PyDict_Type},
        {&st->modules, "modules", &PyDict_Type},
        {&st->in_use, "context_in_use", &PyList_Type},
        {&st->otel, "otel_module", &PyUnicode_Type},
    };
    for (size_t i = 0; i < sizeof(objects) / sizeof(objects[0]); i++) {
        PyObject *value = table_item(table, objects[i].name, objects[i].type);
        if (value == NULL)
            return NULL;
        Py_XSETREF(*objects[i].slot, value);
    }
    PyObject *returns = table_item(table, "returns_record", NULL);
    if (returns == NULL)
        return NULL;
    st->returns_record = PyObject_IsTrue(returns);
    Py_DECREF(returns);
    if (st->returns_record < 0 || table_size(table, "message_at", &st->message_at) < 0 ||
        table_size(table, "n_init", &st->n_init) < 0 ||
        table_size(table, "event_size", &st->event_size) < 0 ||
        table_size(table, "extra_size", &st->extra_size) < 0 ||
        table_size(table, "fast_item", &st->fast_item) < 0 ||
        table_size(table, "wire_item", &st->wire_item) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(st->src_keys);
    if (n != PyTuple_GET_SIZE(st->dst_keys) || n < 2 || n > 16 || st->message_at < 0 ||
        st->message_at > n || PyList_GET_SIZE(st->in_use) < 1) {
        PyErr_SetString(PyExc_ValueError, "configure(): the head's tables do not match");
        return NULL;
    }
    /* Interned keys (a dict lookup by an interned str compares by identity first), and the
     * wire writer's ,"key": fragment of each event key. */
    PyObject *src = PyTuple_New(n), *dst = PyTuple_New(n), *frags = PyTuple_New(n);
    if (src == NULL || dst == NULL || frags == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(st->src_keys, i), *k = PyTuple_GET_ITEM(st->dst_keys, i);
        if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(k)) {
            PyErr_SetString(PyExc_TypeError, "configure(): the head's names must be str");
            goto fail;
        }
        Py_INCREF(a);
        Py_INCREF(k);
        PyUnicode_InternInPlace(&a);
        PyUnicode_InternInPlace(&k);
        PyTuple_SET_ITEM(src, i, a);
        PyTuple_SET_ITEM(dst, i, k);
        Out o;
        out_init(&o, PY_SSIZE_T_MAX);
        PyObject *frag = NULL;
        if (out_put(&o, ",", 1) == 0 && put_str(&o, k) == 0 && out_put(&o, ":", 1) == 0)
            frag = PyBytes_FromStringAndSize(o.data, o.len);
        out_free(&o);
        if (frag == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "configure(): an event key JSON cannot hold");
            goto fail;
        }
        PyTuple_SET_ITEM(frags, i, frag);
    }
    Py_SETREF(st->src_keys, src);
    Py_SETREF(st->dst_keys, dst);
    Py_XSETREF(st->key_frags, frags);
    clear_head_cache(st);
    st->n_fields = n;
    st->head_cache = PyMem_Calloc((size_t)n, sizeof(HeadCache));
    if (st->head_cache == NULL) {
        st->n_fields = 0;
        return PyErr_NoMemory();
    }
    st->cached_sec = -1;
    st->configured = 1;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(src);
    Py_XDECREF(dst);
    Py_XDECREF(frags);
    return NULL;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**table): the event model and what handle() reads (loghandler/_compiled.py)."},
    {"record_put", (PyCFunction)(void (*)(void))record_put, METH_FASTCALL,
     "record_put(d, gate, wire=None) -> True | (item, size) | None: a plain record's queue "
     "item (a wire item or the fast path's event), appended through the gate when it allows."},
    {"items_size", items_size, METH_O,
     "items_size(items) -> int: the queue items' estimated sizes, summed."},
    {"format_items", (PyCFunction)(void (*)(void))format_items, METH_FASTCALL,
     "format_items(items, static, static_plain, finish, clean, fallback, skip) -> list."},
    {"format_record", format_record, METH_O,
     "format_record(event) -> bool: _time and level of a fast-path event formatted."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef handle_def = {
    "handle", (PyCFunction)(void (*)(void))handle, METH_FASTCALL,
    "IngestHandler.handle(self, record), compiled: the common record's fast path; every other "
    "record is the handler's _handle_python's."};

static int
module_exec(PyObject *module)
{
    State *st = get_state(module);
    st->cached_sec = -1;
    if (intern_into(&st->s_msg, "msg") < 0 || intern_into(&st->s_args, "args") < 0 ||
        intern_into(&st->s_exc_info, "exc_info") < 0 ||
        intern_into(&st->s_stack_info, "stack_info") < 0 ||
        intern_into(&st->s_message, "message") < 0 || intern_into(&st->s_time, "_time") < 0 ||
        intern_into(&st->s_level, "level") < 0 || intern_into(&st->s_logger, "logger") < 0 ||
        intern_into(&st->s_blank, "[not shipped: scrubbing failed]") < 0 ||
        intern_into(&st->s_append, "append") < 0 || intern_into(&st->s_filters, "filters") < 0 ||
        intern_into(&st->s_fast_path, "_fast_path") < 0 ||
        intern_into(&st->s_handle_python, "_handle_python") < 0 ||
        intern_into(&st->s_put_event, "_put_event") < 0)
        return -1;
    /* handle as a method: bound to the handler it is read on, as a Python function is. */
    PyObject *func = PyCFunction_NewEx(&handle_def, module, NULL);
    PyObject *method = func == NULL ? NULL : PyInstanceMethod_New(func);
    Py_XDECREF(func);
    if (method == NULL)
        return -1;
    int r = PyModule_AddObjectRef(module, "handle", method);
    Py_DECREF(method);
    return r;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* Not proven safe without the GIL: _compiled uses the Python path on such builds. */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "loghandler._speedups",
    "The compiled hot path (see loghandler/_speedups.c); the Python code is the reference.",
    sizeof(State),
    methods,
    slots,
    module_traverse,
    module_clear,
    module_free,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&module_def);
}
