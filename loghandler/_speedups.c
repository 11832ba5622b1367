/* loghandler._speedups: the compiled hot path, the same rules as the Python code it stands in
 * for. loghandler/_engine/compiled.py alone decides whether it is used, and hands it everything
 * it needs in one configure(**table) call; what a front end hands it is the named contract of
 * loghandler/_engine/fastpath.py (checked field by field in configure). The Python code stays
 * the reference, and tests/test_speedups*.py prove the two equal on generated and hostile input.
 *
 * Its sections, by job, in this order (each opens with a "----- name" line):
 *   module state       what configure() hands over, kept per module (multi-phase init), and
 *                      the contract's field indexes
 *   errors             only an Exception is handled on the caller's path
 *   plain events       a plain record's message and event (events.fast_head's twin)
 *   the JSON writer    JSON values as the encoders write them
 *   context and span   what a loghandler.context and the current span add, as JSON
 *   sampling           Sampler.decide's twin, from fastpath.SamplePlan
 *   item plans         fastpath.ItemPlan read, keys checked (scrubber, renames, context)
 *   the event writer   every front end's event, read into one table of members, written as
 *                      its final JSON (events.py "Wire items")
 *   a record's way     the queue item of a record (its table, or its event dict)
 *   an event's way     sampling, the item, hold-until-error, the queue (FrontEnd._queue's twin)
 *   the flusher        _time and level formatted, item_events (format_items), items_size,
 *                      admit_repeats
 *   handle             IngestHandler.handle for the common record
 *   the other fronts   IngestProcessor, IngestSink, IngestLogRecordProcessor's calls
 *   the module         configure, front_method, the method table
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

/* Small steps of the writer, inlined where the compiler allows it (measured: a call each
 * cost the plain record's wire item some 400 instructions). */
#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

#if PY_VERSION_HEX < 0x030C0000
#define unicode_ready(s) PyUnicode_READY(s)
#else
#define unicode_ready(s) 0 /* every str is ready from 3.12 on */
#endif

/* ------------------------------------------------------------------ module state */

/* The last JSON written for one head field's string (a logger's name, a function's, a file's
 * path, a thread's name: they repeat from record to record). A strong reference: an address
 * alone could be a new string's. */
#define HEAD_CACHE_BYTES 256
typedef struct {
    PyObject *str;
    Py_ssize_t len;
    char json[HEAD_CACHE_BYTES];
} HeadCache;

/* A context's fields as JSON members, once per context (context and span): the merged dict a
 * loghandler.context stores is never changed, so its members are written once and copied into
 * every event logged inside it. */
#define CTX_MEMBERS 32
#define CTX_CACHE 4
enum { CTX_HEAD = 1, CTX_SPECIAL = 2, CTX_TRACE = 4, CTX_TIME_LEVEL = 8 };
typedef struct CtxEntry {
    PyObject *fields;            /* the merged dict (a strong reference: the cache's key) */
    PyObject *checked;           /* the ItemPlan every member passed (strong), or NULL */
    PyObject *checked_flat;      /* the same, for a flat event (no head of its own) */
    PyObject *keys[CTX_MEMBERS]; /* strong */
    PyObject *trace;             /* strong: its "trace_id" value, or NULL */
    Py_ssize_t n, at[CTX_MEMBERS + 1];
    unsigned char flags[CTX_MEMBERS];
    int writable;                /* every key a str, every value written as the encoders do */
    char *json;                  /* PyMem: each member as ,"key":value */
} CtxEntry;

/* A span's ids as JSON members, once per OpenTelemetry context (contexts are immutable: a new
 * span makes a new one). */
#define SPAN_CACHE 4
typedef struct SpanEntry {
    PyObject *context;           /* OpenTelemetry's context (strong: the cache's key) */
    int valid;                   /* 1: a span with ids; 0: none */
    double fraction;             /* sampling.span_fraction of its trace id */
    Py_ssize_t trace_len, span_len;
    char trace_json[64], span_json[48]; /* ,"trace_id":"..." and ,"span_id":"..." */
} SpanEntry;

/* The attributes besides the head's that the hot path reads of a LogRecord (State.at). */
enum { AT_MSG, AT_ARGS, AT_EXC_INFO, AT_STACK_INFO, AT_LEVELNO, N_AT };

typedef struct {
    int configured;
    /* The event model (model.py): the record attributes copied into the event head and their
     * event keys, in the head's order; where the message goes among them. */
    PyObject *src_keys, *dst_keys; /* tuples of interned str */
    Py_ssize_t n_fields, message_at;
    PyObject *key_frags;           /* tuple of bytes: ,"logger": and the like, by record
                                    * attribute, then the message's (wire items) */
    HeadCache *head_cache;         /* n_fields entries */
    PyObject *special;             /* frozenset: extras the fast path leaves to the careful one */
    PyObject *formatter;           /* frozenset: attributes formatters set (no extras) */
    PyObject *record, *size, *context; /* the queue items' markers */
    PyObject *levels;              /* dict: levelname -> the event's level */
    Py_ssize_t n_init, event_size, extra_size, fast_item, wire_item;
    /* Where a LogRecord's dict holds the attributes the hot path reads, as PyDict_Next's
     * positions (record_attr): the head's (src_keys' order), then at[AT_MSG..]; -1: not one
     * of __init__'s, read by key. Found by configure() in a real record of this Python. */
    Py_ssize_t head_at[16], at[N_AT];
    /* handle(): what it reads besides the handler and the record */
    PyObject *record_type;         /* logging.LogRecord */
    PyObject *senders;             /* dict: threads inside loghandler's own sending */
    PyObject *modules;             /* sys.modules */
    PyObject *in_use;              /* context.IN_USE: [bool], a context was ever entered */
    PyObject *otel;                /* "opentelemetry.trace" */
    int returns_record;            /* Python 3.12+: handle() returns the record */
    PyObject *context_var;         /* context.VAR: the merged fields of the current context */
    PyObject *span_source;         /* context.span_source */
    PyObject *head_set;            /* frozenset of the event keys of the head */
    PyObject *loads;               /* json.loads, for admit_repeats' values other than str */
    /* The other front ends (the other fronts): structlog's method names' levels and the keys its
     * careful path must see; time.time; loguru's record read for the head (model.HEAD's
     * loguru columns: (key, attribute or None) by record attribute); hold.level_number. */
    PyObject *method_levels, *structlog_skip, *now, *loguru_head, *level_number;
    PyObject *key_json;            /* dict: an extra's key -> its ,"key": (put_key) */
    /* OpenTelemetry's records (otel_members): severity texts renamed, level numbers, the
     * exception attributes, the code attributes renamed. */
    PyObject *otel_texts, *otel_numbers, *otel_exception, *otel_code;
    /* OpenTelemetry's current context, once span_source found it: its ContextVar and
     * context.span_ids (NULL: not yet asked, or not found: asked again); span_source_off: the
     * application runs another runtime context (snapshot in Python each time). */
    PyObject *otel_var, *span_ids;
    int span_source_off;
    /* The callers' fast-path contract (_engine/fastpath.py): its named types, each checked
     * in configure against the fields read here (CONTRACT), and the front ends' Python paths
     * for a call with no fast path (front_method: IngestHandler's handle, IngestProcessor's
     * and IngestSink's __call__). s_fast_path: the attribute a fast path is read from. */
    PyObject *contract[5];
    PyObject *fallback[3];
    /* Names, interned once. */
    PyObject *s_msg, *s_args, *s_exc_info, *s_stack_info, *s_message, *s_time, *s_level,
        *s_logger, *s_blank, *s_append, *s_filters, *s_fast_path, *s_trace_id, *s_span_id,
        *s_levelno, *s_levelname, *s_name, *s_record, *s_timestamp, *s_exception, *s_extra, *s_no, *s_lower,
        *s_observed, *s_severity_text, *s_severity_number, *s_value, *s_body, *s_event_name,
        *s_attributes, *s_copy, *s_032x, *s_016x, *s_buffers;
    /* format_epoch's cache: the last second's "YYYY-MM-DDTHH:MM:SS" (used under the GIL). */
    long long cached_sec;
    char cached_prefix[20];
    /* The last contexts' and spans' JSON (context and span), used under the GIL. */
    struct CtxEntry *ctx_cache;
    int ctx_next;
    struct SpanEntry *span_cache;
    int span_next;
    /* The last ItemPlan read (compose_wire), and what was read of it. */
    PyObject *last_wire;
    struct Compose *last_compose;
} State;

/* The callers' fast-path contract (_engine/fastpath.py): each type's fields as read here, by
 * index; configure() checks every type's _fields against CONTRACT (so a field moved or renamed
 * on one side stops the module from configuring, never misreads). */
enum { T_ITEM, T_SAMPLE, T_HOLD, T_CALLER, T_FAST, N_CONTRACT };
enum { IP_FRAGMENT, IP_STATICS, IP_CLEAN, IP_LEARN, IP_EXCLUDE, IP_HEAD_SKIP, IP_RENAMES,
       IP_HEAD_RENAMES, IP_SPAN_RENAMES, IP_RENAMED, IP_MOVED, IP_RENAME_INDEX, IP_MEMBERS };
enum { SP_LEVELS, SP_LOGGERS, SP_RAND, SP_TRACE_KEY, SP_STATIC, SP_DROP, SP_TRACE_FRACTION,
       SP_KEEP_LEVEL, SP_KEPT_LEVELS, SP_KEPT };
enum { HP_LEVEL, HP_TAKE, HP_ENTRY, HP_KEY, HP_COUNTS, HP_RING };
enum { HC_HELD, HC_TOTAL, HC_SIZE, HC_CLOSED, N_HOLD_COUNTS }; /* hold.py: Hold.counts */
enum { CP_TRACE_CONTEXT, CP_SAMPLE, CP_HOLD };
enum { FP_GATE, FP_PLAN, FP_PUT, FP_CALLER, FP_QUEUE, FP_INVALID, FP_PYTHON_PATH };
static const char *const CONTRACT[N_CONTRACT][14] = {
    {"ItemPlan", "fragment", "statics", "clean", "learn", "exclude", "head_skip", "renames",
     "head_renames", "span_renames", "renamed", "moved", "rename_index", "members"},
    {"SamplePlan", "levels", "loggers", "rand", "trace_key", "static_fraction", "drop",
     "trace_fraction", "keep_level", "kept_levels", "kept", NULL},
    {"HoldPlan", "level", "take", "entry", "key", "counts", "ring", NULL},
    {"CallerPlan", "trace_context", "sample", "hold", NULL},
    {"FastPath", "gate", "plan", "put", "caller", "queue", "invalid", "python_path", NULL},
};
/* The front ends whose call is compiled, by front_method's kind. */
enum { F_HANDLE, F_PROCESSOR, F_SINK, N_FRONTS };
static const char *const FRONTS[N_FRONTS] = {"handle", "processor_call", "sink_call"};

static inline State *
get_state(PyObject *module)
{
    return (State *)PyModule_GetState(module);
}

#define STATE_OBJECTS(X)                                                                     \
    X(src_keys) X(dst_keys) X(key_frags) X(special) X(formatter) X(record) X(size) X(context) \
    X(levels) X(record_type) X(senders) X(modules) X(in_use) X(otel) X(context_var)          \
    X(span_source) X(head_set) X(loads) X(otel_var) X(span_ids) X(s_msg) X(s_args)           \
    X(s_exc_info) X(s_stack_info) X(s_message) X(s_time) X(s_level) X(s_logger) X(s_blank)   \
    X(s_append) X(s_filters) X(s_fast_path) X(s_trace_id) X(s_span_id) X(s_levelno)         \
    X(s_levelname) X(s_name) X(last_wire) X(method_levels) X(structlog_skip) X(now)          \
    X(loguru_head) X(level_number) X(contract[0]) X(contract[1]) X(contract[2])              \
    X(contract[3]) X(contract[4]) X(fallback[0]) X(fallback[1]) X(fallback[2])               \
    X(s_record) X(s_timestamp) X(s_exception) X(s_extra) X(s_no) X(s_lower) X(key_json)      \
    X(otel_texts) X(otel_numbers) X(otel_exception) X(otel_code) X(s_observed)               \
    X(s_severity_text) X(s_severity_number) X(s_value) X(s_body) X(s_event_name)             \
    X(s_attributes) X(s_copy) X(s_032x) X(s_016x) X(s_buffers)

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
    for (int i = 0; st->ctx_cache != NULL && i < CTX_CACHE; i++) {
        CtxEntry *e = &st->ctx_cache[i];
        Py_VISIT(e->fields);
        Py_VISIT(e->checked);
        Py_VISIT(e->checked_flat);
        Py_VISIT(e->trace);
        for (Py_ssize_t k = 0; k < e->n; k++)
            Py_VISIT(e->keys[k]);
    }
    for (int i = 0; st->span_cache != NULL && i < SPAN_CACHE; i++)
        Py_VISIT(st->span_cache[i].context);
    return 0;
}

static void
ctx_entry_clear(CtxEntry *e)
{
    Py_CLEAR(e->fields);
    Py_CLEAR(e->checked);
    Py_CLEAR(e->checked_flat);
    Py_CLEAR(e->trace);
    for (Py_ssize_t k = 0; k < e->n; k++)
        Py_CLEAR(e->keys[k]);
    e->n = 0;
    e->writable = 0;
    PyMem_Free(e->json);
    e->json = NULL;
}

static void
clear_caches(State *st)
{
    for (int i = 0; st->ctx_cache != NULL && i < CTX_CACHE; i++)
        ctx_entry_clear(&st->ctx_cache[i]);
    for (int i = 0; st->span_cache != NULL && i < SPAN_CACHE; i++)
        Py_CLEAR(st->span_cache[i].context);
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
    clear_caches(st);
    PyMem_Free(st->ctx_cache);
    st->ctx_cache = NULL;
    PyMem_Free(st->span_cache);
    st->span_cache = NULL;
    PyMem_Free(st->last_compose);
    st->last_compose = NULL;
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* ------------------------------------------------------------------ errors */

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

/* Whether this thread is inside loghandler's own sending (guard.SENDERS holds its ident, as
 * threading.get_ident() gives it): its records are the Python path's, which tells ours from the
 * application's. Looked up only while some thread sends; every other thread keeps the compiled
 * path meanwhile (testing the dict's size alone sent every application thread's call to the
 * Python path for as long as a request was in flight: 90 % of the calls of a live run).
 * 1 on an error (a MemoryError, cleared: neither call runs code that could raise another):
 * the careful way. */
static int
in_senders(State *st)
{
    if (PyDict_GET_SIZE(st->senders) == 0)
        return 0;
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (ident == NULL) {
        PyErr_Clear();
        return 1;
    }
    int r = PyDict_Contains(st->senders, ident);
    Py_DECREF(ident);
    if (r < 0) {
        PyErr_Clear();
        return 1;
    }
    return r;
}

/* ------------------------------------------------------------------ plain events */

/* The value as the fast path keeps it: exact str, int, float, bool or None (model.PLAIN). */
static inline int
is_plain(PyObject *v)
{
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyUnicode_Type || t == &PyLong_Type || t == &PyFloat_Type ||
           t == &PyBool_Type || v == Py_None;
}

/* A LogRecord's attribute (d: its dict, an exact dict; key: the attribute's interned name; at:
 * where configure() found it in a real record, or -1), borrowed, or NULL (an error set, or
 * not there). A look-up by key costs ~110 instructions, and a record's way made 13-16 of them
 * a call (issue 49); a LogRecord's dict holds __init__'s attributes in the order __init__ sets
 * them, so the attribute is read at its place instead (PyDict_Next from a position: O(1) for
 * split and combined dicts, ~45 instructions). Taken only when the key there is the very key
 * expected (a pointer compare: the names __init__ stores are interned, as configure interns
 * ours): anything that moved it -- an attribute deleted, or deleted and set again, one set
 * before __init__ (a subclass, a record factory), a __dict__ replaced, another Python's order
 * -- finds another key, or none, there, and is read by key as before: what is read is always
 * that key's value. (Not the dict's internals: PyDict_Next is the API that reads by place.) */
static ALWAYS_INLINE PyObject *
record_attr(PyObject *d, PyObject *key, Py_ssize_t at)
{
    PyObject *k, *v;
    if (at >= 0 && PyDict_Next(d, &at, &k, &v) && k == key)
        return v;
    return PyDict_GetItemWithError(d, key);
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
    PyObject *msg = record_attr(d, st->s_msg, st->at[AT_MSG]);
    PyObject *exc = msg == NULL ? NULL : record_attr(d, st->s_exc_info, st->at[AT_EXC_INFO]);
    PyObject *stack = exc == NULL ? NULL
                      : record_attr(d, st->s_stack_info, st->at[AT_STACK_INFO]);
    PyObject *fargs = stack == NULL ? NULL : record_attr(d, st->s_args, st->at[AT_ARGS]);
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
        PyObject *v = record_attr(d, PyTuple_GET_ITEM(st->src_keys, i), st->head_at[i]);
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

/* ------------------------------------------------------------------ the JSON writer
 *
 * The steps of the event writer (below): JSON values written as the encoders write them, with
 * no intermediate str. What they cannot write as the encoders do (a float in exponent form,
 * an int past 64 bits, a lone surrogate, a value that is not plain, an item over
 * FAST_ITEM_BYTES) sends the event the dict way. Bounded: nothing longer than FAST_ITEM_BYTES
 * is copied. */

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

static ALWAYS_INLINE int
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

/* Two exact str equal? (Keys of ours are interned: most compare by identity; others by length
 * first.) */
static ALWAYS_INLINE int
same_str(PyObject *a, PyObject *b)
{
    return a == b || (PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) &&
                      PyUnicode_Compare(a, b) == 0);
}

/* A member's start, ,"key": for an exact str key, as written once (the same keys come event
 * after event: their JSON is kept, for up to 4,096 keys of at most 64 characters). */
static int
put_key(State *st, Out *o, PyObject *key)
{
    PyObject *json = PyDict_GetItemWithError(st->key_json, key);
    if (json != NULL)
        return out_put(o, PyBytes_AS_STRING(json), PyBytes_GET_SIZE(json));
    if (PyErr_Occurred())
        return -1;
    Py_ssize_t start = o->len;
    if (out_put(o, ",", 1) < 0 || put_str(o, key) < 0 || out_put(o, ":", 1) < 0)
        return -1;
    if (PyDict_GET_SIZE(st->key_json) < 4096 && PyUnicode_GET_LENGTH(key) <= 64) {
        json = PyBytes_FromStringAndSize(o->data + start, o->len - start);
        if (json == NULL || PyDict_SetItem(st->key_json, key, json) < 0) {
            Py_XDECREF(json);
            return -1;
        }
        Py_DECREF(json);
    }
    return 0;
}

static int format_epoch(State *st, double created, char out[28]);

/* ------------------------------------------------------------------ context and span
 *
 * What a loghandler.context and the current OpenTelemetry span add to an event (events.py
 * merge_context, on the flusher, for an event dict): the span's trace_id and span_id, then the
 * context's fields, each where the event lacks it. Written into the wire item on the caller's
 * thread instead, from JSON made once per context and once per span: a context's merged dict is
 * never changed (context.py), and an OpenTelemetry context is immutable (a new span makes a new
 * one), so each is a cache's key, held by a strong reference (its address cannot be another's
 * while it is cached). A few entries each: the contexts and spans of the threads logging now. */

/* The entry of a context's merged dict: found, or made (no code of the application's runs:
 * exact str keys, plain values). NULL with an error set only for one to propagate. */
static CtxEntry *
ctx_entry(State *st, PyObject *fields)
{
    for (int i = 0; i < CTX_CACHE; i++)
        if (st->ctx_cache[i].fields == fields)
            return &st->ctx_cache[i];
    CtxEntry *e = &st->ctx_cache[st->ctx_next];
    st->ctx_next = (st->ctx_next + 1) % CTX_CACHE;
    /* What the slot held goes last (its dict may be the last reference to plain values). */
    PyObject *old = e->fields;
    e->fields = NULL;
    ctx_entry_clear(e);
    e->fields = Py_NewRef(fields);
    Py_ssize_t n = PyDict_GET_SIZE(fields);
    Out o;
    out_init(&o, st->fast_item);
    if (n <= CTX_MEMBERS) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *value;
        int ok = 1;
        while (ok && PyDict_Next(fields, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) {
                ok = 0;
                break;
            }
            e->keys[i] = Py_NewRef(key);
            e->n = i + 1;
            int head = PySet_Contains(st->head_set, key);
            int special = PySet_Contains(st->special, key);
            int trace = same_str(key, st->s_trace_id);
            int span = same_str(key, st->s_span_id);
            int time_level = same_str(key, st->s_time) || same_str(key, st->s_level);
            if (head < 0 || special < 0 || PyErr_Occurred()) {
                ok = 0;
                break;
            }
            e->flags[i] = (unsigned char)((head ? CTX_HEAD : 0) | (special ? CTX_SPECIAL : 0) |
                                          (trace || span ? CTX_TRACE : 0) |
                                          (time_level ? CTX_TIME_LEVEL : 0));
            if (trace)
                Py_XSETREF(e->trace, Py_NewRef(value));
            e->at[i] = o.len;
            if (out_put(&o, ",", 1) < 0 || put_str(&o, key) < 0 || out_put(&o, ":", 1) < 0 ||
                put_value(&o, value) < 0)
                ok = 0;
            i++;
        }
        if (ok) {
            e->at[i] = o.len;
            e->json = PyMem_Malloc(o.len > 0 ? (size_t)o.len : 1);
            if (e->json != NULL) {
                memcpy(e->json, o.data, o.len);
                e->writable = 1;
            }
        }
    }
    out_free(&o);
    Py_XDECREF(old);
    if (!clear_if_exception())
        return NULL;
    return e;
}

/* The current span, from OpenTelemetry's context (its default runtime context keeps it in a
 * ContextVar: context.span_source): 1: *out is the span (out->valid 0: none); 0: not this
 * path's to say (OpenTelemetry not ready, another runtime context, an error): the Python path
 * asks context.snapshot; -1: an error to propagate. */
static int
span_lookup(State *st, SpanEntry *out)
{
    if (st->span_source_off)
        return 0;
    if (st->otel_var == NULL) {
        PyObject *r = PyObject_CallNoArgs(st->span_source);
        if (r == NULL)
            return clear_if_exception() ? 0 : -1;
        if (r == Py_False)
            st->span_source_off = 1;
        else if (PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == 2 &&
                 PyContextVar_CheckExact(PyTuple_GET_ITEM(r, 0))) {
            st->otel_var = Py_NewRef(PyTuple_GET_ITEM(r, 0));
            st->span_ids = Py_NewRef(PyTuple_GET_ITEM(r, 1));
        }
        Py_DECREF(r);
        if (st->otel_var == NULL)
            return 0;
    }
    PyObject *context;
    if (PyContextVar_Get(st->otel_var, NULL, &context) < 0)
        return clear_if_exception() ? 0 : -1;
    if (context == NULL)
        return 0;
    for (int i = 0; i < SPAN_CACHE; i++) {
        if (st->span_cache[i].context == context) {
            *out = st->span_cache[i];
            out->context = NULL; /* a copy: the cache holds the reference */
            Py_DECREF(context);
            return 1;
        }
    }
    /* Not seen yet: its ids, read once (context.span_ids: OpenTelemetry's code). */
    PyObject *ids = PyObject_CallOneArg(st->span_ids, context);
    if (ids == NULL) {
        Py_DECREF(context);
        return clear_if_exception() ? 0 : -1;
    }
    SpanEntry made = {0};
    made.context = context; /* stolen below, by the cache */
    int ok = 1;
    if (ids != Py_None) {
        PyObject *hex[2] = {NULL, NULL};
        ok = PyTuple_CheckExact(ids) && PyTuple_GET_SIZE(ids) == 2 &&
             PyLong_CheckExact(PyTuple_GET_ITEM(ids, 0)) &&
             PyLong_CheckExact(PyTuple_GET_ITEM(ids, 1));
        static const char *names[2] = {",\"trace_id\":\"", ",\"span_id\":\""};
        static const char *forms[2] = {"032x", "016x"};
        for (int k = 0; ok && k < 2; k++) {
            /* format(id, "032x"), as merge_context writes it */
            PyObject *spec = PyUnicode_FromString(forms[k]);
            hex[k] = spec == NULL ? NULL : PyObject_Format(PyTuple_GET_ITEM(ids, k), spec);
            Py_XDECREF(spec);
            Py_ssize_t len = hex[k] == NULL ? 0 : PyUnicode_GET_LENGTH(hex[k]);
            char *dst = k == 0 ? made.trace_json : made.span_json;
            Py_ssize_t room = k == 0 ? (Py_ssize_t)sizeof(made.trace_json)
                                     : (Py_ssize_t)sizeof(made.span_json);
            Py_ssize_t head = (Py_ssize_t)strlen(names[k]);
            if (hex[k] == NULL || !PyUnicode_IS_ASCII(hex[k]) || head + len + 1 > room) {
                ok = 0;
                break;
            }
            memcpy(dst, names[k], head);
            memcpy(dst + head, PyUnicode_DATA(hex[k]), len);
            dst[head + len] = '"';
            if (k == 0)
                made.trace_len = head + len + 1;
            else
                made.span_len = head + len + 1;
        }
        Py_XDECREF(hex[0]);
        Py_XDECREF(hex[1]);
        if (ok) {
            unsigned long long low = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(ids, 0));
            ok = !(low == (unsigned long long)-1 && PyErr_Occurred());
            made.fraction = (double)low / 18446744073709551616.0; /* 2**64 */
            made.valid = 1;
        }
    }
    Py_DECREF(ids);
    if (!ok) {
        Py_DECREF(context);
        return clear_if_exception() ? 0 : -1;
    }
    SpanEntry *slot = &st->span_cache[st->span_next];
    st->span_next = (st->span_next + 1) % SPAN_CACHE;
    PyObject *old = slot->context;
    *slot = made;
    *out = made;
    out->context = NULL;
    Py_XDECREF(old); /* last: it may free a span */
    return 1;
}

/* ------------------------------------------------------------------ sampling
 *
 * A front end's CallerPlan (fastpath.py): (trace_context, sample, hold); sample: a SamplePlan,
 * sampling.Sampler's tables; hold: a HoldPlan, (level, take). Sampling is decided before the
 * event is built, as Sampler.decide decides: the level and logger give the rate; below 1, the
 * trace id the event would ship with (its own, the span's, the context's, fields='s), else the
 * random source. */

/* sampling.trace_fraction(value): a str whose last 16 characters are hex digits, computed
 * here; any other str is the Python function's to read; a value that is no str has none.
 * 1: *out set; 0: none; -1: failed. */
static int
trace_fraction(PyObject *sample, PyObject *value, double *out)
{
    if (!PyUnicode_CheckExact(value))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    if (n < 16)
        return 0;
    if (unicode_ready(value) < 0)
        return -1;
    int kind = PyUnicode_KIND(value);
    const void *data = PyUnicode_DATA(value);
    unsigned long long x = 0;
    int plain = 1;
    for (Py_ssize_t i = n - 16; i < n && plain; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        int v = c >= '0' && c <= '9' ? (int)(c - '0') : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
              : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
        if (v < 0)
            plain = 0;
        x = x << 4 | (unsigned long long)v;
    }
    if (plain) {
        *out = (double)x / 18446744073709551616.0;
        return 1;
    }
    PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(sample, SP_TRACE_FRACTION), value);
    if (r == NULL)
        return -1;
    int got = PyFloat_CheckExact(r);
    if (got)
        *out = PyFloat_AS_DOUBLE(r);
    Py_DECREF(r);
    return got;
}

/* The rate of events of this level and logger (Sampler.rate). */
static double
sample_rate(PyObject *sample, PyObject *level, PyObject *logger)
{
    double rate = 1.0;
    PyObject *levels = PyTuple_GET_ITEM(sample, SP_LEVELS), *loggers = PyTuple_GET_ITEM(sample, SP_LOGGERS);
    if (PyDict_GET_SIZE(levels) > 0 && PyUnicode_CheckExact(level)) {
        PyObject *r = PyDict_GetItemWithError(levels, level);
        if (r != NULL && PyFloat_CheckExact(r))
            rate = PyFloat_AS_DOUBLE(r);
    }
    if (PyTuple_GET_SIZE(loggers) > 0 && PyUnicode_CheckExact(logger)) {
        Py_ssize_t ln = PyUnicode_GET_LENGTH(logger);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(loggers); i++) {
            PyObject *pr = PyTuple_GET_ITEM(loggers, i);
            PyObject *prefix = PyTuple_GET_ITEM(pr, 0), *r = PyTuple_GET_ITEM(pr, 1);
            Py_ssize_t pn = PyUnicode_GET_LENGTH(prefix);
            int match = ln == pn ? PyUnicode_Compare(logger, prefix) == 0
                                 : ln > pn && PyUnicode_READ_CHAR(logger, pn) == '.' &&
                                       PyUnicode_Tailmatch(logger, prefix, 0, pn, -1) == 1;
            if (match) {
                double v = PyFloat_AS_DOUBLE(r);
                if (v < rate)
                    rate = v;
                break;
            }
        }
    }
    return rate;
}

/* Does sampling keep the event? The trace id it would ship with: its own (own: borrowed or
 * NULL), else the span's, else the context's (ctx_trace), else fields='s. 1: keep; 0: drop;
 * -1: failed (the caller leaves the decision to the Python path). */
static int
sample_keep(PyObject *sample, PyObject *level, PyObject *logger, PyObject *own,
            const SpanEntry *span, PyObject *ctx_trace)
{
    double rate = sample_rate(sample, level, logger);
    if (PyErr_Occurred())
        return -1;
    if (rate >= 1.0)
        return 1;
    if (PyTuple_GET_ITEM(sample, SP_KEEP_LEVEL) != Py_None) {
        /* sample_keep_level: a level name's verdict, cached by Sampler.kept */
        PyObject *kept = PyDict_GetItemWithError(PyTuple_GET_ITEM(sample, SP_KEPT_LEVELS), level);
        int keep;
        if (kept != NULL)
            keep = kept == Py_True;
        else if (PyErr_Occurred())
            return -1;
        else {
            PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(sample, SP_KEPT), level);
            if (r == NULL)
                return -1;
            keep = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (keep < 0)
                return -1;
        }
        if (keep)
            return 1;
    }
    double u = 0;
    int have = 0;
    if (PyObject_IsTrue(PyTuple_GET_ITEM(sample, SP_TRACE_KEY)) == 1) {
        if (own != NULL)
            have = trace_fraction(sample, own, &u);
        else if (span != NULL && span->valid) {
            u = span->fraction;
            have = 1;
        }
        else if (ctx_trace != NULL)
            have = trace_fraction(sample, ctx_trace, &u);
        else if (PyFloat_CheckExact(PyTuple_GET_ITEM(sample, SP_STATIC))) {
            u = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(sample, SP_STATIC));
            have = 1;
        }
        if (have < 0)
            return -1;
    }
    if (!have) {
        PyObject *r = PyObject_CallNoArgs(PyTuple_GET_ITEM(sample, SP_RAND));
        if (r == NULL)
            return -1;
        u = PyFloat_AsDouble(r);
        Py_DECREF(r);
        if (u == -1.0 && PyErr_Occurred())
            return -1;
    }
    return u < rate;
}

/* The CallerPlan checked once per call: 1 usable; 0 not (the Python path). */
static int
policy_ok(State *st, PyObject *policy)
{
    if (Py_TYPE(policy) != (PyTypeObject *)st->contract[T_CALLER])
        return 0;
    PyObject *sample = PyTuple_GET_ITEM(policy, CP_SAMPLE);
    PyObject *hold = PyTuple_GET_ITEM(policy, CP_HOLD);
    if (sample != Py_None &&
        (Py_TYPE(sample) != (PyTypeObject *)st->contract[T_SAMPLE] ||
         !PyDict_CheckExact(PyTuple_GET_ITEM(sample, SP_LEVELS)) ||
         !PyTuple_CheckExact(PyTuple_GET_ITEM(sample, SP_LOGGERS)) ||
         !PyDict_CheckExact(PyTuple_GET_ITEM(sample, SP_KEPT_LEVELS))))
        return 0;
    if (sample != Py_None) {
        PyObject *loggers = PyTuple_GET_ITEM(sample, SP_LOGGERS);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(loggers); i++) {
            PyObject *pr = PyTuple_GET_ITEM(loggers, i);
            if (!PyTuple_CheckExact(pr) || PyTuple_GET_SIZE(pr) != 2 ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(pr, 0)) ||
                !PyFloat_CheckExact(PyTuple_GET_ITEM(pr, 1)))
                return 0;
        }
    }
    if (hold != Py_None) {
        PyObject *counts = Py_TYPE(hold) == (PyTypeObject *)st->contract[T_HOLD]
                           ? PyTuple_GET_ITEM(hold, HP_COUNTS) : NULL;
        if (counts == NULL || !PyLong_CheckExact(PyTuple_GET_ITEM(hold, HP_LEVEL)) ||
            !PyContextVar_CheckExact(PyTuple_GET_ITEM(hold, HP_ENTRY)) ||
            !PyType_Check(PyTuple_GET_ITEM(hold, HP_RING)) || !PyList_CheckExact(counts) ||
            PyList_GET_SIZE(counts) != N_HOLD_COUNTS)
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ item plans */

/* What a pre-encoded item is made with: the shipper's ItemPlan (Shipper.item_plan: fields= as
 * JSON, their names, the scrubber's clean keys and learn, the excluded fields, a bit per head
 * field excluded, field_names' renames) and the caller's context. */
typedef struct Compose {
    PyObject *wire;                /* the ItemPlan (borrowed) */
    PyObject *fragment, *statics;  /* borrowed */
    PyObject *clean, *learn;       /* borrowed; NULL: no scrubber */
    PyObject *exclude;             /* borrowed; NULL: nothing excluded */
    unsigned long head_skip;
    /* field_names: each new name's ,"name": in order (borrowed); the rename of each head
     * field, by its place in the event, and of the span's two ids (-1: none); every name
     * renamed or renamed to (NULL: no renames). */
    PyObject *renames, *moved; /* moved: each rename of a fields= field, (old, member), or None */
    PyObject *rename_index;    /* old name -> its rename's index */
    PyObject *members;         /* fields= as ((key, member), ...), key by key: a flat event's,
                                * or a record's when one of its fields is named too */
    Py_ssize_t n_renames;
    signed char head_rename[17], span_rename[2];
    PyObject *renamed;
    PyObject *fields;              /* borrowed: the context's merged dict, not empty; or NULL */
    const SpanEntry *span;         /* the current span, or NULL: none */
} Compose;

static int read_wire(State *st, PyObject *wire, Compose *c);

/* 1: wire is an ItemPlan, read into c; 0: not one. The last one read is kept (a strong
 * reference: its items stay alive), as one shipper's events come one after another. */
static int
compose_wire(State *st, PyObject *wire, Compose *c)
{
    if (wire == st->last_wire && st->last_compose != NULL) {
        *c = *st->last_compose;
        return 1;
    }
    int ok = read_wire(st, wire, c);
    if (ok && st->last_compose != NULL) {
        PyObject *old = st->last_wire;
        st->last_wire = Py_NewRef(wire);
        *st->last_compose = *c;
        Py_XDECREF(old);
    }
    return ok;
}

/* A tuple of ints in [-1, bound): into out (n of them). 1, or 0 when it is not one. */
static int
read_indexes(PyObject *t, Py_ssize_t n, Py_ssize_t bound, signed char *out)
{
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(t, i);
        long x = PyLong_CheckExact(v) ? PyLong_AsLong(v) : -2;
        if (x < -1 || x >= bound) {
            PyErr_Clear(); /* (an int too large: no index of ours) */
            return 0;
        }
        out[i] = (signed char)x;
    }
    return 1;
}

static int
read_wire(State *st, PyObject *wire, Compose *c)
{
    memset(c, 0, sizeof(*c));
    if (Py_TYPE(wire) != (PyTypeObject *)st->contract[T_ITEM] || st->n_fields + 1 > 17)
        return 0;
    c->wire = wire;
    c->fragment = PyTuple_GET_ITEM(wire, IP_FRAGMENT);
    c->statics = PyTuple_GET_ITEM(wire, IP_STATICS);
    c->clean = PyTuple_GET_ITEM(wire, IP_CLEAN);
    c->learn = PyTuple_GET_ITEM(wire, IP_LEARN);
    c->exclude = PyTuple_GET_ITEM(wire, IP_EXCLUDE);
    PyObject *skip = PyTuple_GET_ITEM(wire, IP_HEAD_SKIP);
    if (!PyBytes_CheckExact(c->fragment) || !PyAnySet_CheckExact(c->statics) ||
        (c->clean != Py_None && !PyAnySet_CheckExact(c->clean)) ||
        !PyAnySet_CheckExact(c->exclude) || !PyLong_CheckExact(skip))
        return 0;
    c->head_skip = PyLong_AsUnsignedLongMask(skip);
    if (c->head_skip == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* an int: only an overflow, which is no wire of ours */
        return 0;
    }
    if (c->clean == Py_None)
        c->clean = c->learn = NULL;
    else if (c->learn == Py_None)
        c->learn = NULL;
    if (PySet_GET_SIZE(c->exclude) == 0)
        c->exclude = NULL;
    c->renames = PyTuple_GET_ITEM(wire, IP_RENAMES);
    c->renamed = PyTuple_GET_ITEM(wire, IP_RENAMED);
    if (!PyTuple_CheckExact(c->renames) || PyTuple_GET_SIZE(c->renames) > 16 ||
        !PyAnySet_CheckExact(c->renamed))
        return 0;
    c->n_renames = PyTuple_GET_SIZE(c->renames);
    c->moved = PyTuple_GET_ITEM(wire, IP_MOVED);
    if (!PyTuple_CheckExact(c->moved) || PyTuple_GET_SIZE(c->moved) != c->n_renames)
        return 0;
    for (Py_ssize_t r = 0; r < c->n_renames; r++) {
        PyObject *m = PyTuple_GET_ITEM(c->moved, r);
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(c->renames, r)) ||
            (m != Py_None && !(PyTuple_CheckExact(m) && PyTuple_GET_SIZE(m) == 2 &&
                               PyBytes_CheckExact(PyTuple_GET_ITEM(m, 1)))))
            return 0;
    }
    c->rename_index = PyTuple_GET_ITEM(wire, IP_RENAME_INDEX);
    c->members = PyTuple_GET_ITEM(wire, IP_MEMBERS);
    if (!PyDict_CheckExact(c->rename_index) || !PyTuple_CheckExact(c->members))
        return 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(c->members); k++) {
        PyObject *m = PyTuple_GET_ITEM(c->members, k);
        if (!PyTuple_CheckExact(m) || PyTuple_GET_SIZE(m) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(m, 0)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(m, 1)))
            return 0;
    }
    if (!read_indexes(PyTuple_GET_ITEM(wire, IP_HEAD_RENAMES), st->n_fields + 1, c->n_renames, c->head_rename) ||
        !read_indexes(PyTuple_GET_ITEM(wire, IP_SPAN_RENAMES), 2, c->n_renames, c->span_rename))
        return 0;
    if (PySet_GET_SIZE(c->renamed) == 0)
        c->renamed = NULL;
    return 1;
}

static ALWAYS_INLINE int
renamed(const Compose *c, PyObject *key)
{
    return c->renamed == NULL ? 0 : PySet_Contains(c->renamed, key);
}

static ALWAYS_INLINE int
excluded(const Compose *c, PyObject *key)
{
    return c->exclude == NULL ? 0 : PySet_Contains(c->exclude, key);
}

/* A key the event is written with, for the scrubber: 1 known clean; 0 not (a secret's, or
 * unknown past the bound): the dict path; 2: taught now (Python ran: the caller starts over);
 * -1 failed. */
#define LEARNED 2
static int
key_clean(const Compose *c, PyObject *key, int *learned)
{
    if (c->clean == NULL)
        return 1;
    int known = PySet_Contains(c->clean, key);
    if (known != 0)
        return known;
    if (c->learn == NULL || *learned >= 64 || PyUnicode_GET_LENGTH(key) > 256)
        return 0;
    /* A key's first use: the scrubber decides now whether it is a secret's, once (our code; it
     * adds a clean key to the set). Any code may run meanwhile (a collection's finalizers): the
     * caller walks everything again after it. */
    Py_INCREF(key);
    PyObject *r = PyObject_CallOneArg(c->learn, key);
    Py_DECREF(key);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    if (r != Py_True)
        return 0;
    (*learned)++;
    return LEARNED;
}

/* The context's and the span's members, checked for this event and this wire: 1 fine; 0 not
 * this path's case; LEARNED: start over; -1 failed. (trace_in, span_in: the event has its own
 * trace_id, span_id.) */
static int
check_context(State *st, Compose *c, CtxEntry **ctx, int trace_in, int span_in, int *learned,
              int flat)
{
    *ctx = NULL;
    if (c->span != NULL) {
        int a = PySet_Contains(c->statics, st->s_trace_id);
        int b = a != 0 ? a : PySet_Contains(c->statics, st->s_span_id);
        if (b != 0)
            return b < 0 ? -1 : 0; /* fields= names an id: merged on the flusher */
        PyObject *ids[2] = {st->s_trace_id, st->s_span_id};
        int in[2] = {trace_in, span_in};
        for (int k = 0; k < 2; k++) {
            if (in[k])
                continue;
            if (c->span_rename[k] < 0) {
                int rn = renamed(c, ids[k]); /* another field renamed to it */
                if (rn != 0)
                    return rn < 0 ? -1 : 0;
            }
            int ex = excluded(c, ids[k]);
            if (ex != 0) {
                if (ex < 0)
                    return -1;
                continue;
            }
            int r = key_clean(c, ids[k], learned);
            if (r != 1)
                return r;
        }
    }
    if (c->fields == NULL)
        return 1;
    CtxEntry *e = ctx_entry(st, c->fields);
    if (e == NULL)
        return -1;
    if (!e->writable)
        return 0;
    if ((flat ? e->checked_flat : e->checked) != c->wire) {
        int all = 1;
        for (Py_ssize_t k = 0; k < e->n; k++) {
            /* The head's field wins: never written (a flat event has its own _time and level
             * only). */
            if (e->flags[k] & (flat ? CTX_TIME_LEVEL : CTX_HEAD))
                continue;
            PyObject *key = e->keys[k];
            int in = PySet_Contains(c->statics, key);
            if (in == 0)
                in = renamed(c, key);
            if (in != 0)
                return in < 0 ? -1 : 0; /* fields= names it too, or field_names: the flusher's */
            int ex = excluded(c, key);
            if (ex != 0) {
                if (ex < 0)
                    return -1;
                all = 0;
                continue;
            }
            int r = key_clean(c, key, learned);
            if (r != 1)
                return r;
        }
        if (all) {
            PyObject **slot = flat ? &e->checked_flat : &e->checked;
            PyObject *old = *slot;
            *slot = Py_NewRef(c->wire);
            Py_XDECREF(old);
            /* (an ItemPlan's last reference holds no code to run) */
            e = ctx_entry(st, c->fields);
            if (e == NULL)
                return -1;
        }
    }
    *ctx = e;
    return 1;
}

/* ------------------------------------------------------------------ the event writer
 *
 * Every front end reads its source (a LogRecord's dict, loguru's record, structlog's event
 * dict, an OpenTelemetry record) into one table, Members; one writer, write_item, turns any
 * table into the wire item: the very JSON item_events, the Finisher and the encoder make of
 * the event's dict (tests/test_speedups*.py), or NULL for the dict path.
 *
 * The table: the event's members in order, each a key and a value written by kind (M_VALUE a
 * plain value; M_JSON bytes, the JSON already; M_TIME a float of epoch seconds, in RFC 3339),
 * checked per event (the value plain, the key cleared by the scrubber, renamed or excluded as
 * the Finisher would). A record's event (a LogRecord's, loguru's) has a head too, model.HEAD,
 * written first with the record-only shortcuts: the message formatted as it is written from
 * msg and args, the head's strings through their cache, each key's JSON made once, its
 * exclusions and renames fixed by the ItemPlan. Everything is held by strong references (what
 * it was read from may change while Python runs: the scrubber learning a key). */
enum { M_VALUE, M_JSON, M_TIME };
#define MEMBERS 64
typedef struct {
    PyObject *key, *value; /* strong */
    int kind, rename, skip; /* rename: its index (-1: none); skip: excluded */
} Member;

typedef struct {
    Member m[MEMBERS];
    Py_ssize_t n;
    /* A record's head (NULL vals: none): the record attributes' values (src_keys' order),
     * the event's level name, the message (args: its arguments, formatted as it is written;
     * NULL: msg is the message). Strong references, held by the reader. */
    PyObject *const *vals;
    PyObject *level, *msg, *args;
} Members;

static void
members_clear(Members *ms)
{
    for (Py_ssize_t i = 0; i < ms->n; i++) {
        Py_DECREF(ms->m[i].key);
        Py_DECREF(ms->m[i].value);
    }
    ms->n = 0;
}

/* Appends a member (new references taken). 0, or -1 when there are too many (not this path's
 * case). */
static ALWAYS_INLINE int
members_add(Members *ms, PyObject *key, PyObject *value, int kind)
{
    if (ms->n >= MEMBERS)
        return -1;
    Member *m = &ms->m[ms->n++];
    m->key = Py_NewRef(key);
    m->value = Py_NewRef(value);
    m->kind = kind;
    m->rename = -1;
    m->skip = 0;
    return 0;
}

/* Is key among the members? (A record's head keys are not: the callers skip those.) */
static int
members_have(const Members *ms, PyObject *key)
{
    for (Py_ssize_t i = 0; i < ms->n; i++)
        if (same_str(ms->m[i].key, key))
            return 1;
    return 0;
}

/* The renamed fields (field_names), written aside (tail) and appended in the renames' order
 * at the end, as the Finisher's rename moves them there. */
typedef struct {
    Out tail;
    Py_ssize_t at[16][2];
} Renamed;

/* The start of a member: its ,"key": (frag; NULL: key's, put_key), or its rename r's new
 * name, written aside; *dst where its value goes. -1 on failure. */
static ALWAYS_INLINE int
member_start(State *st, Out *o, Renamed *rn, const Compose *c, int r, PyObject *frag,
             PyObject *key, Out **dst)
{
    if (r >= 0) {
        PyObject *name = PyTuple_GET_ITEM(c->renames, r);
        rn->at[r][0] = rn->tail.len;
        *dst = &rn->tail;
        return out_put(&rn->tail, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name));
    }
    *dst = o;
    if (frag != NULL)
        return out_put(o, PyBytes_AS_STRING(frag), PyBytes_GET_SIZE(frag));
    return put_key(st, o, key);
}

static ALWAYS_INLINE void
member_end(Renamed *rn, int r)
{
    if (r >= 0)
        rn->at[r][1] = rn->tail.len;
}

/* A float of epoch seconds as its RFC 3339 JSON string. */
static int
put_time(State *st, Out *o, PyObject *v)
{
    char ts[28];
    if (format_epoch(st, PyFloat_AS_DOUBLE(v), ts) < 0 || out_put(o, "\"", 1) < 0 ||
        out_put(o, ts, 27) < 0)
        return -1;
    return out_put(o, "\"", 1);
}

/* A record's head, in the event's order: the record attributes with the message at its place
 * (event position p of a field: its bit in head_skip, its rename). 0; 1: a message
 * put_message does not write (made first: the caller starts over); -1: not written. */
static int
write_head(State *st, Out *o, Renamed *rn, const Compose *c, const Members *ms)
{
    Out *dst;
    for (Py_ssize_t i = 0; i <= st->n_fields; i++) {
        if (i == st->message_at && !(c->head_skip & (1UL << i))) {
            int r = c->head_rename[i];
            if (member_start(st, o, rn, c, r, PyTuple_GET_ITEM(st->key_frags, st->n_fields), NULL,
                             &dst) < 0)
                return -1;
            if (ms->args != NULL ? put_message(dst, ms->msg, ms->args) != 0
                                 : put_str(dst, ms->msg) < 0)
                return ms->args != NULL ? 1 : -1;
            member_end(rn, r);
        }
        if (i == st->n_fields)
            break;
        /* The i-th record attribute's place in the event: i, or i + 1 after the message. */
        Py_ssize_t p = i < st->message_at ? i : i + 1;
        if (c->head_skip & (1UL << p))
            continue;
        PyObject *v = ms->vals[i];
        int r = c->head_rename[p];
        if (member_start(st, o, rn, c, r, PyTuple_GET_ITEM(st->key_frags, i), NULL, &dst) < 0 ||
            (i == 0   ? put_time(st, dst, v)
             : i == 1 ? put_str(dst, ms->level)
             : PyUnicode_CheckExact(v) ? put_head(st, dst, i, v)
                                       : put_value(dst, v)) < 0)
            return -1;
        member_end(rn, r);
    }
    return 0;
}

/* The span's and the context's members into the item, where the event lacks them (no code of
 * the application's runs). */
static int
put_context(State *st, Out *o, Renamed *rn, const Compose *c, const CtxEntry *ctx,
            const Members *ms, int trace_in, int span_in)
{
    if (c->span != NULL) {
        /* ,"trace_id":"<hex>": the member's key is its first 12 bytes (11 for the span's) */
        const char *json[2] = {c->span->trace_json, c->span->span_json};
        Py_ssize_t len[2] = {c->span->trace_len, c->span->span_len}, head[2] = {12, 11};
        PyObject *ids[2] = {st->s_trace_id, st->s_span_id};
        int in[2] = {trace_in, span_in};
        for (int k = 0; k < 2; k++) {
            if (in[k])
                continue;
            int ex = excluded(c, ids[k]);
            if (ex < 0)
                return -1;
            if (ex)
                continue;
            Out *dst = o;
            int r = c->span_rename[k];
            if (r >= 0) {
                PyObject *name = PyTuple_GET_ITEM(c->renames, r);
                rn->at[r][0] = rn->tail.len;
                dst = &rn->tail;
                if (out_put(dst, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name)) < 0)
                    return -1;
            }
            else if (out_put(o, json[k], head[k]) < 0)
                return -1;
            if (out_put(dst, json[k] + head[k], len[k] - head[k]) < 0)
                return -1;
            member_end(rn, r);
        }
    }
    if (ctx == NULL)
        return 0;
    int flat = ms->vals == NULL;
    int checked = (flat ? ctx->checked_flat : ctx->checked) == c->wire;
    for (Py_ssize_t k = 0; k < ctx->n; k++) {
        unsigned char f = ctx->flags[k];
        if (f & (flat ? CTX_TIME_LEVEL : CTX_HEAD))
            continue; /* the head's field wins */
        if ((f & CTX_TRACE) && c->span != NULL)
            continue; /* the span's ids win */
        PyObject *key = ctx->keys[k];
        if (members_have(ms, key))
            continue; /* the event's own field wins */
        if (!checked) {
            int ex = excluded(c, key);
            if (ex != 0) {
                if (ex < 0)
                    return -1;
                continue;
            }
        }
        if (out_put(o, ctx->json + ctx->at[k], ctx->at[k + 1] - ctx->at[k]) < 0)
            return -1;
    }
    return 0;
}

/* The wire item of an event read into ms: a new bytes object, or NULL (not this path's case:
 * the dict path decides; an error may be set; *want_message set when a record's message must
 * be made first). Its head, its members in order (the renamed ones aside), the span's ids and
 * the context's fields it lacks, fields= where it lacks them, then the renamed fields in the
 * renames' order; the first comma becomes the opening brace. */
static PyObject *
write_item(State *st, Members *ms, Compose *c, Py_ssize_t *out_size, int *want_message)
{
    /* First what may run Python (the scrubber learning a key): the members' keys, the span's
     * and the context's; only keys the scrubber cleared and field_names renames as the
     * Finisher would. After Python ran, everything is looked at again. */
    int learned = 0, trace_in = 0, span_in = 0, clash, head = ms->vals != NULL;
    CtxEntry *ctx = NULL;
    if (head && (st->n_fields > 16 || st->message_at < 2 || st->message_at > st->n_fields ||
                 !PyFloat_CheckExact(ms->vals[0]) || ms->level == NULL ||
                 !PyUnicode_CheckExact(ms->level)))
        return NULL;
restart:
    clash = 0; /* a member fields= names too: fields= member by member, where it lacks them */
    for (Py_ssize_t i = 0; i < ms->n; i++) {
        Member *m = &ms->m[i];
        PyObject *key = m->key, *value = m->value;
        if (!PyUnicode_CheckExact(key) || (m->kind == M_VALUE && !is_plain(value)) ||
            (m->kind == M_JSON && !PyBytes_CheckExact(value)) ||
            (m->kind == M_TIME && !PyFloat_CheckExact(value)))
            return NULL;
        if (c->renamed != NULL) {
            PyObject *r = PyDict_GetItemWithError(c->rename_index, key);
            if (r == NULL && (PyErr_Occurred() || renamed(c, key) != 0))
                return NULL; /* (renamed to: another field's new name) */
            long x = r == NULL ? -1 : PyLong_AsLong(r);
            if (x < -1 || x >= c->n_renames) {
                PyErr_Clear();
                return NULL;
            }
            m->rename = (int)x;
        }
        int ex = excluded(c, key);
        if (ex < 0)
            return NULL;
        m->skip = ex;
        if (!ex) {
            int r = key_clean(c, key, &learned);
            if (r == LEARNED)
                goto restart;
            if (r != 1)
                return NULL;
        }
        if (head && !clash && PySet_GET_SIZE(c->statics) > 0 &&
            (clash = PySet_Contains(c->statics, key)) < 0)
            return NULL;
    }
    if (c->span != NULL) {
        trace_in = members_have(ms, st->s_trace_id);
        span_in = members_have(ms, st->s_span_id);
    }
    if (c->span != NULL || c->fields != NULL) {
        int r = check_context(st, c, &ctx, trace_in, span_in, &learned, !head);
        if (r == LEARNED)
            goto restart;
        if (r != 1)
            return NULL;
    }
    /* From here on no Python runs. */
    Out o;
    Renamed rn;
    out_init(&o, st->fast_item);
    out_init(&rn.tail, st->fast_item);
    for (Py_ssize_t r = 0; r < c->n_renames; r++)
        rn.at[r][0] = -1;
    PyObject *result = NULL;
    if (head) {
        int r = write_head(st, &o, &rn, c, ms);
        if (r != 0) {
            *want_message = r > 0;
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < ms->n; i++) {
        const Member *m = &ms->m[i];
        if (m->skip)
            continue;
        Out *dst;
        if (member_start(st, &o, &rn, c, m->rename, NULL, m->key, &dst) < 0 ||
            (m->kind == M_TIME   ? put_time(st, dst, m->value)
             : m->kind == M_JSON ? out_put(dst, PyBytes_AS_STRING(m->value),
                                           PyBytes_GET_SIZE(m->value))
                                 : put_value(dst, m->value)) < 0)
            goto done;
        member_end(&rn, m->rename);
    }
    if (put_context(st, &o, &rn, c, ctx, ms, trace_in, span_in) < 0)
        goto done;
    if (head && !clash) {
        /* a record's event lacks none of fields= but the head's: written once, whole */
        if (out_put(&o, PyBytes_AS_STRING(c->fragment), PyBytes_GET_SIZE(c->fragment)) < 0)
            goto done;
    }
    else {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(c->members); k++) {
            PyObject *m = PyTuple_GET_ITEM(c->members, k), *name = PyTuple_GET_ITEM(m, 0);
            PyObject *bytes = PyTuple_GET_ITEM(m, 1);
            int in = members_have(ms, name);
            if (!in && head && (in = PySet_Contains(st->head_set, name)) < 0)
                goto done; /* (the head's fields win) */
            if (!in && out_put(&o, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes)) < 0)
                goto done;
        }
    }
    /* The renamed fields: the event's own, else a field of fields= renamed (unless the event
     * holds its old name: then its own was renamed). */
    for (Py_ssize_t r = 0; r < c->n_renames; r++) {
        PyObject *m = PyTuple_GET_ITEM(c->moved, r);
        if (rn.at[r][0] >= 0) {
            if (out_put(&o, rn.tail.data + rn.at[r][0], rn.at[r][1] - rn.at[r][0]) < 0)
                goto done;
        }
        else if (m != Py_None && !members_have(ms, PyTuple_GET_ITEM(m, 0))) {
            PyObject *json = PyTuple_GET_ITEM(m, 1);
            if (out_put(&o, PyBytes_AS_STRING(json), PyBytes_GET_SIZE(json)) < 0)
                goto done;
        }
    }
    if (out_put(&o, "}", 1) < 0 || o.len > st->fast_item)
        goto done;
    if (o.len == 1)
        result = PyBytes_FromStringAndSize("{}", 2);
    else {
        o.data[0] = '{';
        result = PyBytes_FromStringAndSize(o.data, o.len);
    }
    *out_size = (result == NULL ? 0 : PyBytes_GET_SIZE(result)) + st->wire_item;
done:
    out_free(&o);
    out_free(&rn.tail);
    return result;
}

/* ------------------------------------------------------------------ a record's way */

/* What a record's way read of the record's dict for sampling (the level name, its event level,
 * the logger), handed to the wire writer, which reads the rest of the head and does not look
 * these up again (three look-ups a call, issue 49): one read of each attribute per record.
 * Strong references: code runs between the reads and the writes (sampling's generator, the
 * scrubber learning a key). levelname NULL: nothing read (level and name unset then). Cleared
 * (head_clear) where the application's code may have changed the record (getMessage's
 * formatting): the writer then reads the record as it is after, as the Python path does.
 * (Only these three, not the whole head: a record of the plain row, without sampling, pays
 * nothing for it; keeping every attribute read paid 65-110 instructions a call in
 * bookkeeping, measured.) */
enum { HEAD_LEVELNAME = 1, HEAD_NAME = 2 }; /* their places in src_keys (configure checks) */
typedef struct {
    PyObject *levelname, *level, *name; /* level, name: NULL when the record has none */
} RecordHead;

static ALWAYS_INLINE void
head_clear(RecordHead *h)
{
    if (h->levelname != NULL) {
        Py_CLEAR(h->levelname);
        Py_CLEAR(h->level);
        Py_CLEAR(h->name);
    }
}

/* A LogRecord's wire item (d: the dict of a record whose type is exactly logging.LogRecord),
 * its message given, or NULL: written from msg and args when that runs no application code
 * (*want_message set when the message must be made first). Its table: the head (model.HEAD),
 * and its extras, found after __init__'s first n_init items (makeRecord() adds them there: a
 * special key is the careful path's, a formatter's attribute no extra). h: what the record's way
 * read already (RecordHead), not read again. A new bytes object, or NULL (the dict path's; an
 * error may be set). */
static PyObject *
record_wire(State *st, PyObject *d, RecordHead *h, PyObject *message, Compose *c,
            Py_ssize_t *size, int *want_message)
{
    if (!PyDict_CheckExact(d) || st->n_fields > 16)
        return NULL;
    PyObject *vals[16], *msg = message, *fargs = NULL, *item = NULL;
    PyObject *const *keys = &PyTuple_GET_ITEM(st->src_keys, 0);
    const Py_ssize_t *at = st->head_at;
    Py_ssize_t i = 0;
    if (h->levelname != NULL) {
        /* The level name and the logger as sampling read them (one test a record, out of the
         * loop: the rows without sampling pay nothing). */
        if ((vals[0] = record_attr(d, keys[0], at[0])) == NULL)
            return NULL;
        vals[HEAD_LEVELNAME] = h->levelname;
        if ((vals[HEAD_NAME] = h->name) == NULL &&
            (vals[HEAD_NAME] = record_attr(d, keys[HEAD_NAME], at[HEAD_NAME])) == NULL)
            return NULL;
        i = HEAD_NAME + 1;
    }
    for (; i < st->n_fields; i++)
        if ((vals[i] = record_attr(d, keys[i], at[i])) == NULL)
            return NULL;
    if (message == NULL) {
        /* No exception, no stack, an exact str: else the message is made first. */
        msg = record_attr(d, st->s_msg, st->at[AT_MSG]);
        fargs = record_attr(d, st->s_args, st->at[AT_ARGS]);
        PyObject *exc = record_attr(d, st->s_exc_info, st->at[AT_EXC_INFO]);
        PyObject *stack = record_attr(d, st->s_stack_info, st->at[AT_STACK_INFO]);
        if (msg == NULL || fargs == NULL || !PyUnicode_CheckExact(msg) ||
            (exc != Py_None && exc != Py_False) || stack != Py_None) {
            *want_message = 1;
            return NULL;
        }
    }
    /* Strong references: the writer may run Python (the scrubber learning a key). */
    for (i = 0; i < st->n_fields; i++)
        Py_INCREF(vals[i]);
    Py_INCREF(msg);
    Py_XINCREF(fargs);
    Members ms;
    ms.n = 0;
    ms.vals = vals;
    ms.level = h->levelname != NULL ? h->level
               : PyUnicode_CheckExact(vals[HEAD_LEVELNAME])
               ? PyDict_GetItemWithError(st->levels, vals[HEAD_LEVELNAME]) : NULL;
    ms.msg = msg;
    ms.args = fargs;
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n > st->n_init) {
        Py_ssize_t pos = st->n_init, seen = 0;
        PyObject *key, *value;
        while (PyDict_Next(d, &pos, &key, &value)) {
            seen++;
            if (!PyUnicode_CheckExact(key))
                goto done;
            int special = PySet_Contains(st->special, key);
            if (special != 0) {
                if (special > 0 && PySet_Contains(st->formatter, key) == 1)
                    continue;
                goto done;
            }
            if (members_add(&ms, key, value, M_VALUE) < 0)
                goto done;
        }
        if (seen != n - st->n_init)
            goto done;
    }
    item = write_item(st, &ms, c, size, want_message);
done:
    members_clear(&ms);
    for (Py_ssize_t i = 0; i < st->n_fields; i++)
        Py_DECREF(vals[i]);
    Py_DECREF(msg);
    Py_XDECREF(fargs);
    return item;
}

/* The record's queue item: its wire item (bytes) when c is given and the record is its case,
 * else the fast path's event dict with its SIZE. h: the record's head, as its way read it.
 * 1: *item (new) and *size set; 0: the careful path's; -1: an error to propagate. */
static int
record_item(State *st, PyObject *d, RecordHead *h, Compose *c, PyObject **item,
            Py_ssize_t *size)
{
    PyObject *message = NULL;
    int want_message = 0;
    *item = NULL;
    if (c != NULL) {
        /* The message written as it is formatted, first; made as a str only when that is not
         * the case (and then the wire item is tried with it, unless something else ruled it
         * out). */
        *item = record_wire(st, d, h, NULL, c, size, &want_message);
        if (*item != NULL)
            return 1;
        if (!clear_if_exception())
            return -1;
    }
    int got = record_message(st, d, &message);
    if (got <= 0)
        return got;
    if (want_message) {
        /* getMessage's formatting ran the application's code: the head is read again. */
        head_clear(h);
        want_message = 0;
        *item = record_wire(st, d, h, message, c, size, &want_message);
        if (*item == NULL && !clear_if_exception()) {
            Py_DECREF(message);
            return -1;
        }
    }
    if (*item == NULL) {
        *item = build_event(st, d, message, size);
        PyObject *size_obj = *item == NULL ? NULL : PyLong_FromSsize_t(*size);
        if (size_obj == NULL || PyDict_SetItem(*item, st->size, size_obj) < 0) {
            Py_XDECREF(size_obj);
            Py_CLEAR(*item);
            Py_DECREF(message);
            return clear_if_exception() ? 0 : -1;
        }
        Py_DECREF(size_obj);
    }
    Py_DECREF(message);
    return 1;
}

/* The ledger contract (fastpath.py): gate is [queue, fast_len], which only the ledger
 * writes; append without the lock only while len(queue) < fast_len, and only items of at most
 * FAST_ITEM_BYTES (Intake.offer's test); anything else is put(item, size), locked. 0: done;
 * -1: an error to propagate (an Exception from put is the caller's: *failed set). */
static int
offer(State *st, PyObject *gate, PyObject *put, PyObject *item, Py_ssize_t size, int *failed)
{
    *failed = 0;
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
        if (appended)
            return 0;
        if (!clear_if_exception())
            return -1;
    }
    PyObject *size_obj = PyLong_FromSsize_t(size);
    PyObject *r = NULL;
    if (size_obj != NULL) {
        PyObject *args[2] = {item, size_obj};
        r = PyObject_Vectorcall(put, args, 2, NULL);
        Py_DECREF(size_obj);
    }
    if (r == NULL) {
        if (!clear_if_exception())
            return -1;
        *failed = 1;
        return 0;
    }
    Py_DECREF(r);
    return 0;
}

/* One of the front end's own steps, bound, from its FastPath (its Python path's steps,
 * which catch what they raise). 0, or -1 with the error set. */
static int
call_front(PyObject *step, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *r = PyObject_Vectorcall(step, args, (size_t)nargs, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ------------------------------------------------------------------ an event's way
 *
 * What every front end's compiled call does after reading its event, as its Python path does
 * (FrontEnd._queue): the caller's context, sampling, the item, hold-until-error, the queue.
 * fast: the front end's FastPath (fastpath.py). */
typedef struct {
    PyObject *self, *gate, *put, *sample, *hold;  /* borrowed (the caller holds fast) */
    PyObject *queue, *invalid, *python_path;      /* the FastPath's, borrowed */
    Compose c;
    int wired;       /* c is a wire: items may be wire items */
    int contextual;  /* a context was ever entered, or OpenTelemetry is imported */
    int native;      /* the context and sampling are this path's to read */
    int sampled;     /* sampling kept it (so the Python path must not decide again) */
    PyObject *fields;  /* strong: the context's merged dict, not empty; or NULL */
    SpanEntry span;    /* the current span's (c.span points here when there is one) */
} Way;

/* An Exception from one of our own steps (take, drop, put), as the Python path's
 * `except Exception` meets it: the event counted invalid (FastPath.invalid). 0, or -1 to
 * propagate. */
static int
step_failed(Way *w)
{
    if (!clear_if_exception())
        return -1;
    if (call_front(w->invalid, NULL, 0) < 0)
        return clear_if_exception() ? 0 : -1;
    return 0;
}

/* 1: started; 0: fast is no fast path of ours (nothing done); -1: an error to propagate.
 * trace: the front end looks up the current span (OpenTelemetry's records carry their own). */
static int
way_begin(State *st, Way *w, PyObject *self, PyObject *fast, int trace)
{
    w->fields = NULL;
    w->sampled = 0;
    w->span.valid = 0;
    if (Py_TYPE(fast) != (PyTypeObject *)st->contract[T_FAST])
        return 0;
    PyObject *wire = PyTuple_GET_ITEM(fast, FP_PLAN), *policy = PyTuple_GET_ITEM(fast, FP_CALLER);
    if (!policy_ok(st, policy))
        return 0;
    w->self = self;
    w->gate = PyTuple_GET_ITEM(fast, FP_GATE);
    w->put = PyTuple_GET_ITEM(fast, FP_PUT);
    w->queue = PyTuple_GET_ITEM(fast, FP_QUEUE);
    w->invalid = PyTuple_GET_ITEM(fast, FP_INVALID);
    w->python_path = PyTuple_GET_ITEM(fast, FP_PYTHON_PATH);
    w->sample = PyTuple_GET_ITEM(policy, CP_SAMPLE);
    w->hold = PyTuple_GET_ITEM(policy, CP_HOLD);
    w->wired = wire != Py_None && compose_wire(st, wire, &w->c);
    if (!w->wired)
        memset(&w->c, 0, sizeof(w->c));
    w->native = 1;
    /* The caller's context, as FrontEnd._queue reads it: a context was ever entered, or
     * OpenTelemetry is imported. */
    int in_use = PyList_GET_ITEM(st->in_use, 0) == Py_True;
    int otel = trace ? PyDict_Contains(st->modules, st->otel) : 0;
    if (otel < 0)
        return clear_if_exception() ? 0 : -1;
    w->contextual = in_use || otel;
    if (in_use) {
        if (PyContextVar_Get(st->context_var, NULL, &w->fields) < 0) {
            if (!clear_if_exception())
                return -1;
            w->native = 0;
        }
        if (w->fields != NULL &&
            (!PyDict_CheckExact(w->fields) || PyDict_GET_SIZE(w->fields) == 0))
            Py_CLEAR(w->fields);
    }
    w->c.fields = w->fields;
    if (otel && PyTuple_GET_ITEM(policy, CP_TRACE_CONTEXT) == Py_True) {
        int r = span_lookup(st, &w->span);
        if (r < 0) {
            Py_CLEAR(w->fields);
            return -1;
        }
        w->native = w->native && r;
        if (r && w->span.valid)
            w->c.span = &w->span;
    }
    return 1;
}

static void
way_end(Way *w)
{
    Py_CLEAR(w->fields);
}

/* Sampling (sampling.py), before the item is made: level, the event's level name (NULL: not
 * this path's to read: the Python path decides); logger; own, its own trace id (NULL: none).
 * 1: go on; 0: sampled out (dropped and counted: done); -1: an error to propagate. */
static int
way_sample(State *st, Way *w, PyObject *level, PyObject *logger, PyObject *own)
{
    if (w->sample == Py_None || !w->native)
        return 1;
    if (level == NULL || logger == NULL) {
        w->native = 0;
        return 1;
    }
    /* Strong references across the calls into Python (rand, the keep level's verdict). */
    PyObject *ctx_trace = NULL;
    Py_INCREF(level);
    Py_INCREF(logger);
    Py_XINCREF(own);
    if (own == NULL && w->fields != NULL) {
        CtxEntry *e = ctx_entry(st, w->fields);
        ctx_trace = e == NULL ? NULL : Py_XNewRef(e->trace);
    }
    int keep = PyErr_Occurred() ? -1 : sample_keep(w->sample, level, logger, own, w->c.span,
                                                   ctx_trace);
    Py_DECREF(level);
    Py_DECREF(logger);
    Py_XDECREF(own);
    Py_XDECREF(ctx_trace);
    if (keep < 0) {
        if (!clear_if_exception())
            return -1;
        w->native = 0; /* the Python path decides */
        return 1;
    }
    if (keep) {
        w->sampled = 1;
        return 1;
    }
    PyObject *r = PyObject_CallNoArgs(PyTuple_GET_ITEM(w->sample, SP_DROP)); /* drop() */
    if (r == NULL)
        return step_failed(w) < 0 ? -1 : 0;
    Py_DECREF(r);
    return 0;
}

/* An int of Hold.counts (an exact int, as hold.py keeps them), or -1. */
static Py_ssize_t
hold_count(PyObject *counts, int i)
{
    PyObject *v = PyList_GET_ITEM(counts, i);
    if (!PyLong_CheckExact(v))
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(v);
    if (n == -1)
        PyErr_Clear();
    return n;
}

/* Hold.take's common case, so that holding costs no call into Python: the event is at or below
 * the held level (the caller tested), inside a context entry whose buffer for this shipper
 * exists, with room in it and under the total: appended to the buffer, the count updated. 1: held;
 * 2: not held (no context entry holds: the queue's); 0: the rest is Hold.take's (an error's
 * release, a first buffer, a bound reached, closed); -1: an error to propagate. Nothing here
 * runs Python code: the buffer is a deque (checked), Hold hashes by identity. */
static int
hold_fast(State *st, PyObject *hold, PyObject *item, Py_ssize_t size, long level_number)
{
    PyObject *counts = PyTuple_GET_ITEM(hold, HP_COUNTS);
    if (level_number >= 40 || PyList_GET_ITEM(counts, HC_CLOSED) != Py_False)
        return 0;
    PyObject *held = NULL;
    if (PyContextVar_Get(PyTuple_GET_ITEM(hold, HP_ENTRY), NULL, &held) < 0)
        return -1;
    if (held == NULL || held == Py_None) {
        Py_XDECREF(held);
        return 2;
    }
    PyObject *buffers = PyObject_GetAttr(held, st->s_buffers);
    Py_DECREF(held);
    if (buffers == NULL)
        return clear_if_exception() ? 0 : -1;
    PyObject *buffer = PyDict_CheckExact(buffers)
                       ? PyDict_GetItemWithError(buffers, PyTuple_GET_ITEM(hold, HP_KEY)) : NULL;
    Py_XINCREF(buffer);
    Py_DECREF(buffers);
    if (buffer == NULL)
        return PyErr_Occurred() && !clear_if_exception() ? -1 : 0;
    int r = 0;
    Py_ssize_t now = hold_count(counts, HC_HELD), total = hold_count(counts, HC_TOTAL),
               room = hold_count(counts, HC_SIZE);
    if (Py_TYPE(buffer) == (PyTypeObject *)PyTuple_GET_ITEM(hold, HP_RING) && now >= 0 &&
        now < total && PyObject_Size(buffer) < room) {
        PyObject *count = PyLong_FromSsize_t(now + 1);
        PyObject *size_obj = count != NULL ? PyLong_FromSsize_t(size) : NULL;
        PyObject *pair = size_obj != NULL ? PyTuple_New(2) : NULL;
        if (pair != NULL) {
            PyTuple_SET_ITEM(pair, 0, Py_NewRef(item));
            PyTuple_SET_ITEM(pair, 1, size_obj);
        }
        else
            Py_XDECREF(size_obj);
        PyObject *done = pair != NULL
                         ? PyObject_CallMethodOneArg(buffer, st->s_append, pair) : NULL;
        Py_XDECREF(pair);
        if (done != NULL) {
            Py_DECREF(done);
            PyList_SetItem(counts, HC_HELD, count); /* steals count */
            r = 1;
        }
        else {
            Py_XDECREF(count);
            r = -1;
        }
    }
    Py_DECREF(buffer);
    return r;
}

/* A wire item's last steps: hold-until-error's level test, then take; else the queue.
 * levelno: the event's level number (NULL: none needed, no hold). 0 or -1. */
static int
way_finish(State *st, Way *w, PyObject *item, Py_ssize_t size, PyObject *levelno,
           PyObject *const *careful_args, Py_ssize_t careful_nargs)
{
    if (w->hold != Py_None && w->contextual && levelno != NULL) {
        /* Hold-until-error's level test first (Hold.take): an event above the held level and
         * below an error's is never held, and releases nothing. */
        long held_level = PyLong_AsLong(PyTuple_GET_ITEM(w->hold, HP_LEVEL));
        long level_number = PyLong_AsLong(levelno);
        if (level_number == -1 && PyErr_Occurred() && !clear_if_exception())
            return -1;
        int fast = held_level < level_number && level_number < 40
                   ? 2 : hold_fast(st, w->hold, item, size, level_number);
        if (fast < 0)
            return step_failed(w);
        if (fast == 1)
            return 0;
        if (fast == 0) {
            PyObject *size_obj = PyLong_FromSsize_t(size);
            PyObject *r = NULL;
            if (size_obj != NULL) {
                PyObject *args[3] = {item, size_obj, levelno};
                r = PyObject_Vectorcall(PyTuple_GET_ITEM(w->hold, HP_TAKE), args, 3, NULL);
                Py_DECREF(size_obj);
            }
            if (r == NULL)
                return step_failed(w);
            int taken = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (taken != 0)
                return taken < 0 ? step_failed(w) : 0;
        }
    }
    int failed;
    if (offer(st, w->gate, w->put, item, size, &failed) < 0)
        return -1;
    if (failed) {
        /* put raised (it does not: it counts what it drops): the careful path, as the Python
         * path's `except Exception` does. */
        if (call_front(w->python_path, careful_args, careful_nargs) < 0 &&
            !clear_if_exception())
            return -1;
    }
    return 0;
}

/* An event dict to queue with a context or a policy in play: FrontEnd._queue attaches the
 * caller's context (snapshot) and decides the rest, as on the Python path (told whether
 * sampling kept it already). 0 or -1. */
static int
way_queue(State *st, Way *w, PyObject *item, Py_ssize_t size, PyObject *level, int trace)
{
    PyObject *size_obj = PyLong_FromSsize_t(size);
    if (size_obj == NULL)
        return step_failed(w);
    PyObject *args[5] = {item, size_obj, level, trace ? Py_True : Py_False,
                         w->sampled ? Py_True : Py_False};
    int r = call_front(w->queue, args, 5);
    Py_DECREF(size_obj);
    return r < 0 ? step_failed(w) : 0;
}

/* The record's whole way on the compiled path (IngestHandler's emit, then FrontEnd._queue when
 * a context or a policy is in play): sampling, the item (a wire item with the span's and the
 * context's members, or the event dict), hold-until-error, the queue. 1: done (queued, held,
 * or dropped and counted; the careful path called when it is its record); 0: nothing done,
 * not this path's (the caller hands the record to the careful path); -1: an error to
 * propagate. */
static int
record_way(State *st, PyObject *self, PyObject *record, PyObject *d, PyObject *fast)
{
    if (!PyDict_CheckExact(d))
        return 0;
    Way w;
    int r = way_begin(st, &w, self, fast, 1);
    if (r <= 0)
        return r;
    PyObject *item = NULL, *levelno = NULL;
    Py_ssize_t size = 0;
    int result = -1;
    RecordHead h = {NULL, NULL, NULL};
    if (w.sample != Py_None && w.native) {
        PyObject *levelname = record_attr(d, st->s_levelname, st->head_at[HEAD_LEVELNAME]);
        PyObject *level = levelname != NULL && PyUnicode_CheckExact(levelname)
                          ? PyDict_GetItemWithError(st->levels, levelname) : NULL;
        PyObject *logger = level == NULL ? NULL
                           : record_attr(d, st->s_name, st->head_at[HEAD_NAME]);
        PyObject *own = logger == NULL ? NULL : PyDict_GetItemWithError(d, st->s_trace_id);
        if (PyErr_Occurred()) {
            if (!clear_if_exception())
                goto out;
        }
        else if (levelname != NULL) {
            /* The wire writer takes these (RecordHead). */
            h.levelname = Py_NewRef(levelname);
            h.level = Py_XNewRef(level);
            h.name = Py_XNewRef(logger);
        }
        r = way_sample(st, &w, level, logger, own); /* (no level: the Python path's) */
        if (r <= 0) {
            result = r < 0 ? -1 : 1;
            goto out;
        }
    }
    int got = record_item(st, d, &h, w.wired && w.native ? &w.c : NULL, &item, &size);
    if (got < 0)
        goto out;
    /* An event dict with a context or a policy in play is FrontEnd._queue's. */
    int queue_dict = got == 1 && !PyBytes_CheckExact(item) &&
                     (w.contextual || w.sample != Py_None);
    if (queue_dict || (got == 1 && w.hold != Py_None && w.contextual)) {
        /* The level number, for FrontEnd._queue or hold's test (a strong reference). */
        levelno = record_attr(d, st->s_levelno, st->at[AT_LEVELNO]);
        if (levelno == NULL || !PyLong_CheckExact(levelno)) {
            if (!clear_if_exception())
                goto out;
            levelno = NULL;
        }
        Py_XINCREF(levelno);
    }
    PyObject *careful[2] = {record, w.sampled ? Py_True : Py_False};
    if (got == 0 || (queue_dict && levelno == NULL)) {
        /* The careful path's record (told whether sampling kept it already). */
        if (call_front(w.python_path, careful, 2) < 0 && !clear_if_exception())
            goto out;
        result = 1;
        goto out;
    }
    if (queue_dict) {
        result = way_queue(st, &w, item, size, levelno, 1) < 0 ? -1 : 1;
        goto out;
    }
    result = way_finish(st, &w, item, size, levelno, careful, 2) < 0 ? -1 : 1;
out:
    Py_XDECREF(item);
    Py_XDECREF(levelno);
    head_clear(&h);
    way_end(&w);
    return result;
}

static PyObject *
not_configured(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "loghandler._speedups is not configured (loghandler/_engine/compiled.py does it)");
    return NULL;
}

/* record_put(self, d, fast) -> bool: the record's way (record_way) for the handler's Python
 * handle (a record its filters passed); False: nothing done, the careful path's. */
static PyObject *
record_put(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record_put(handler, record, fast)");
        return NULL;
    }
    PyObject *d = PyObject_GenericGetDict(args[1], NULL);
    if (d == NULL)
        return clear_if_exception() ? Py_NewRef(Py_False) : NULL;
    int r = record_way(st, args[0], args[1], d, args[2]);
    Py_DECREF(d);
    if (r < 0)
        return NULL;
    return Py_NewRef(r ? Py_True : Py_False);
}

/* ------------------------------------------------------------------ the flusher */

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
format_epoch(State *st, double created, char out[28])
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
    if (format_epoch(st, PyFloat_AS_DOUBLE(created), buf) < 0)
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

/* The reference's reading of an item that is not the flat object the writer makes: the item
 * decoded whole, the names picked. */
static PyObject *
view_whole(State *st, PyObject *item, PyObject *names)
{
    PyObject *event = PyObject_CallOneArg(st->loads, item);
    if (event == NULL)
        return NULL;
    PyObject *out = PyDict_New();
    if (out != NULL && PyDict_CheckExact(event)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
            PyObject *v = PyDict_GetItemWithError(event, PyTuple_GET_ITEM(names, i));
            if ((v == NULL && PyErr_Occurred()) ||
                (v != NULL && PyDict_SetItem(out, PyTuple_GET_ITEM(names, i), v) < 0)) {
                Py_CLEAR(out);
                break;
            }
        }
    }
    Py_DECREF(event);
    return out;
}

/* The end of the JSON string that starts at s[i] (a '"'): the index past its closing quote,
 * or -1; *escaped set when it holds an escape. */
static Py_ssize_t
string_end(const char *s, Py_ssize_t i, Py_ssize_t n, int *escaped)
{
    Py_ssize_t start = i + 1;
    for (i = start; i < n;) {
        const char *q = memchr(s + i, '"', (size_t)(n - i));
        if (q == NULL)
            return -1;
        Py_ssize_t j = q - s, b = j;
        while (b > start && s[b - 1] == '\\')
            b--;
        if ((j - b) % 2 == 0) { /* not escaped itself */
            *escaped = memchr(s + start, '\\', (size_t)(j - start)) != NULL;
            return j + 1;
        }
        i = j + 1;
    }
    return -1;
}

/* A JSON string's value (s[v] is its opening quote, s[v_end - 1] its closing one) or another
 * value's, decoded; prev/prev_raw: the last one decoded at this place, reused when its bytes
 * are the same (a logger's name, a level: they repeat from event to event). New reference. */
static PyObject *
decode_value(State *st, const char *s, Py_ssize_t v, Py_ssize_t v_end, int escaped,
             PyObject **prev, PyObject **prev_raw)
{
    const char *raw = s + v;
    Py_ssize_t len = v_end - v;
    if (prev != NULL && *prev_raw != NULL && PyBytes_GET_SIZE(*prev_raw) == len &&
        memcmp(PyBytes_AS_STRING(*prev_raw), raw, len) == 0)
        return Py_NewRef(*prev);
    PyObject *value;
    if (s[v] == '"' && !escaped)
        value = PyUnicode_DecodeUTF8(raw + 1, len - 2, NULL);
    else {
        PyObject *bytes = PyBytes_FromStringAndSize(raw, len);
        value = bytes == NULL ? NULL : PyObject_CallOneArg(st->loads, bytes);
        Py_XDECREF(bytes);
    }
    if (value != NULL && prev != NULL && len <= 256) {
        PyObject *keep = PyBytes_FromStringAndSize(raw, len);
        if (keep == NULL) {
            Py_DECREF(value);
            return NULL;
        }
        Py_XSETREF(*prev_raw, keep);
        Py_XSETREF(*prev, Py_NewRef(value));
    }
    return value;
}

/* A repeat key's parts as Selector._admit reads them (logger, level, message; message being the
 * "message" field, else "event"): for a flat wire item, their places in its JSON (at[k][0] -1:
 * absent), else their values (obj[k], new references, None for absent). */
typedef struct {
    const char *s;
    Py_ssize_t at[3][2];
    int esc[3];
    PyObject *obj[3];
} RepeatParts;

static void
repeat_parts_clear(RepeatParts *rp)
{
    for (int k = 0; k < 3; k++)
        Py_CLEAR(rp->obj[k]);
}

/* An event's repeat parts (names: "message", "event", then the logger's and the level's
 * names): 1: read; 0: the message is no str (admitted); -1: failed. */
static int
repeat_parts(State *st, PyObject *event, PyObject *names, const char **wanted,
             Py_ssize_t *wanted_len, RepeatParts *rp)
{
    memset(rp, 0, sizeof(*rp));
    PyObject *view = NULL, *from = event;
    if (PyBytes_CheckExact(event)) {
        const char *s = PyBytes_AS_STRING(event);
        Py_ssize_t n = PyBytes_GET_SIZE(event), i = 1;
        Py_ssize_t at[4][2] = {{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}};
        int esc[4] = {0, 0, 0, 0};
        if (n < 2 || s[0] != '{' || s[n - 1] != '}')
            goto whole;
        while (n > 2) {
            int escaped;
            if (i >= n || s[i] != '"')
                goto whole;
            Py_ssize_t key_end = string_end(s, i, n, &escaped);
            if (key_end < 0 || escaped || key_end >= n || s[key_end] != ':')
                goto whole;
            Py_ssize_t key_len = key_end - i - 2, v = key_end + 1, v_end;
            int value_escaped = 0;
            if (v < n && s[v] == '"')
                v_end = string_end(s, v, n, &value_escaped);
            else {
                v_end = v;
                while (v_end < n && s[v_end] != ',' && s[v_end] != '}')
                    v_end++;
            }
            if (v_end < 0 || v_end >= n || (s[v_end] != ',' && s[v_end] != '}'))
                goto whole;
            for (int k = 0; k < 4; k++) {
                if (wanted_len[k] == key_len && memcmp(wanted[k], s + i + 1, key_len) == 0) {
                    at[k][0] = v;
                    at[k][1] = v_end;
                    esc[k] = value_escaped;
                }
            }
            if (s[v_end] == '}') {
                if (v_end != n - 1)
                    goto whole;
                break;
            }
            /* The writer writes each key once, message, level and logger among the first: once
             * the three are found, the rest of the item cannot change the key. */
            if (at[0][0] >= 0 && at[2][0] >= 0 && at[3][0] >= 0)
                break;
            i = v_end + 1;
        }
        /* message = event.get("message", event.get("event")) */
        int m = at[0][0] >= 0 ? 0 : 1;
        if (at[m][0] < 0 || s[at[m][0]] != '"')
            return 0; /* absent, or no str (a str decodes from a JSON string only) */
        int src[3] = {2, 3, m};
        rp->s = s;
        for (int k = 0; k < 3; k++) {
            rp->at[k][0] = at[src[k]][0];
            rp->at[k][1] = at[src[k]][1];
            rp->esc[k] = esc[src[k]];
        }
        return 1;
whole:
        /* Not the flat object the writer makes: the reference's reading (events.wire_view's). */
        if ((view = view_whole(st, event, names)) == NULL)
            return -1;
        from = view;
    }
    else if (!PyDict_Check(event)) {
        PyErr_SetString(PyExc_TypeError, "admit_repeats: an event is a dict or bytes");
        return -1;
    }
    /* event.get("message", event.get("event")), then the key, as _admit reads it */
    int r = -1;
    PyObject *message = PyDict_GetItemWithError(from, PyTuple_GET_ITEM(names, 0)), *logger = NULL,
             *level = NULL;
    if (message == NULL && !PyErr_Occurred())
        message = PyDict_GetItemWithError(from, PyTuple_GET_ITEM(names, 1));
    if (!PyErr_Occurred() && message != NULL && PyUnicode_CheckExact(message)) {
        logger = PyDict_GetItemWithError(from, PyTuple_GET_ITEM(names, 2));
        level = logger == NULL && PyErr_Occurred() ? NULL
                : PyDict_GetItemWithError(from, PyTuple_GET_ITEM(names, 3));
        if (!PyErr_Occurred()) {
            rp->obj[0] = Py_NewRef(logger ? logger : Py_None);
            rp->obj[1] = Py_NewRef(level ? level : Py_None);
            rp->obj[2] = Py_NewRef(message);
            for (int k = 0; k < 3; k++)
                rp->at[k][0] = -1;
            r = 1;
        }
    }
    else if (!PyErr_Occurred())
        r = 0;
    Py_XDECREF(view);
    return r;
}

/* The repeat keys' hash: 64 bits of the parts' bytes, seeded once per process from Python's
 * (randomized) str hash. Not a cryptographic hash: two keys with equal hashes (about one pair in
 * 2**64) count as one message. */
static uint64_t repeat_seed;

static inline uint64_t
mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static uint64_t
bytes_hash64(uint64_t h, const char *p, Py_ssize_t n)
{
    h = mix64(h ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL));
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    return mix64((h ^ w) * 0x94d049bb133111ebULL);
}

/* A part's hash into h: a str by its UTF-8 bytes (the bytes a wire item's JSON string holds
 * unescaped), any other value by Python's hash (None for an absent part): equal values, equal
 * hashes, as the Python loop's tuple keys compare. */
static int
part_hash(PyObject *v, uint64_t *h)
{
    if (PyUnicode_Check(v)) {
        Py_ssize_t len;
        const char *u = PyUnicode_AsUTF8AndSize(v, &len);
        if (u != NULL) {
            *h = bytes_hash64(*h, u, len);
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            return -1;
        PyErr_Clear(); /* lone surrogates, no UTF-8: by Python's hash, as other values */
    }
    Py_hash_t x = PyObject_Hash(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *h = mix64((*h ^ (uint64_t)x) * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL);
    return 0;
}

/* The hash of a repeat key, from its parts; a wire item's strings without escapes are hashed
 * as they lie in its bytes, never decoded (with every message new, decoding it and hashing the
 * str was some 600 instructions an event). */
static int
repeat_hash(State *st, RepeatParts *rp, PyObject **cache, uint64_t *out)
{
    uint64_t h = repeat_seed;
    for (int k = 0; k < 3; k++) {
        h = h * 0x9e3779b97f4a7c15ULL + (uint64_t)k;
        if (rp->obj[k] != NULL || rp->at[k][0] < 0) {
            if (part_hash(rp->obj[k] != NULL ? rp->obj[k] : Py_None, &h) < 0)
                return -1;
            continue;
        }
        Py_ssize_t v = rp->at[k][0], v_end = rp->at[k][1];
        if (rp->s[v] == '"' && !rp->esc[k]) {
            h = bytes_hash64(h, rp->s + v + 1, v_end - v - 2);
            continue;
        }
        PyObject *value = decode_value(st, rp->s, v, v_end, rp->esc[k],
                                       k < 2 ? &cache[2 * k] : NULL,
                                       k < 2 ? &cache[2 * k + 1] : NULL);
        if (value == NULL)
            return -1;
        int r = part_hash(value, &h);
        Py_DECREF(value);
        if (r < 0)
            return -1;
    }
    *out = h;
    return 0;
}

/* The repeat key (logger, level, message) itself, for a window's summary: new reference. */
static PyObject *
repeat_tuple(State *st, RepeatParts *rp, PyObject **cache)
{
    PyObject *key = PyTuple_New(3);
    if (key == NULL)
        return NULL;
    for (int k = 0; k < 3; k++) {
        PyObject *part;
        if (rp->obj[k] != NULL || rp->at[k][0] < 0)
            part = Py_NewRef(rp->obj[k] != NULL ? rp->obj[k] : Py_None);
        else
            part = decode_value(st, rp->s, rp->at[k][0], rp->at[k][1], rp->esc[k],
                                k < 2 ? &cache[2 * k] : NULL, k < 2 ? &cache[2 * k + 1] : NULL);
        if (part == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, k, part);
    }
    return key;
}

/* A repeat key (logger, level, message) of str or None only, untracked by the garbage collector
 * at once (a pass would untrack it anyway: it holds no container, so no cycle). */
static void
repeat_key_untracked(PyObject *key)
{
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(key); k++) {
        PyObject *part = PyTuple_GET_ITEM(key, k);
        if (part != Py_None && !PyUnicode_CheckExact(part))
            return;
    }
    PyObject_GC_UnTrack(key);
}

/* An entry of seen or order as Selector makes it: [start, count, last, key in seen, key]. */
static int
repeat_entry_ok(PyObject *entry)
{
    if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) == 5 &&
        PyFloat_CheckExact(PyList_GET_ITEM(entry, 0)) && PyLong_CheckExact(PyList_GET_ITEM(entry, 1)))
        return 1;
    PyErr_SetString(PyExc_TypeError, "admit_repeats: an entry of the windows is not ours");
    return 0;
}

/* (key, entry) appended to ended when the entry's window suppressed events. */
static int
repeat_ended(PyObject *ended, PyObject *entry, long limit)
{
    long count = PyLong_AsLong(PyList_GET_ITEM(entry, 1));
    if (count == -1 && PyErr_Occurred())
        return -1;
    if (count <= limit)
        return 0;
    PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(entry, 4), entry);
    int bad = pair == NULL || PyList_Append(ended, pair) < 0;
    Py_XDECREF(pair);
    return bad ? -1 : 0;
}

/* The compiled loop's first sightings (Selector._once's twin, the same rule): a bytearray holding
 * a header (the young generation's index and count) and two generations of ``cap`` slots each,
 * (hash, time), open addressing with linear probing (hash 0: an empty slot), deletion by
 * backward shift (no tombstones). A first sighting costs a probe and a store, no object. */
typedef struct {
    uint64_t young, count;
} SightHead;

typedef struct {
    uint64_t hash;
    double time;
} Sight;

/* The slot of hash in a generation, or of the empty slot where it would go. */
static inline Py_ssize_t
sight_find(const Sight *t, size_t mask, uint64_t hash)
{
    size_t i = (size_t)hash & mask;
    while (t[i].hash != 0 && t[i].hash != hash)
        i = (i + 1) & mask;
    return (Py_ssize_t)i;
}

static void
sight_delete(Sight *t, size_t mask, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (t[j].hash == 0)
            break;
        size_t home = (size_t)t[j].hash & mask;
        /* t[j] stays when its home is cyclically in (i, j] */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        t[i] = t[j];
        i = j;
    }
    t[i].hash = 0;
}

/* admit_repeats(events, seen, order, head, now, window, limit, max_keys, names, sightings)
 *     -> (kept, suppressed, ended, head)
 *
 * Selector._admit over a batch (shaping.py, the reference; tests/test_speedups.py holds the two
 * equal): each event's key (logger, level, message) counted in its window in ``seen``; past
 * ``limit`` it is suppressed (the entry keeps the last one), a window that ended or an entry
 * evicted for room with suppressions is in ``ended`` as (key, entry), for its summary. A key
 * with no window open is a first sighting, noted in ``sightings`` (a bytearray: SightHead, then
 * two generations of Sight, Selector._once's twin); the second within the window opens one.
 * ``seen`` and the sightings are keyed here by the key's 64-bit hash (repeat_hash), read from a
 * wire item's JSON without decoding it; names: ("message", "event", "logger", "level"). */
static PyObject *
admit_repeats(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 10 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) ||
        !PyList_CheckExact(args[2]) || !PyLong_CheckExact(args[3]) ||
        !PyFloat_CheckExact(args[4]) || !PyFloat_CheckExact(args[5]) ||
        !PyLong_CheckExact(args[6]) || !PyLong_CheckExact(args[7]) ||
        !PyTuple_CheckExact(args[8]) || PyTuple_GET_SIZE(args[8]) != 4 ||
        !PyByteArray_CheckExact(args[9])) {
        PyErr_SetString(PyExc_TypeError, "admit_repeats(events: list, seen: dict, order: list, "
                                         "head: int, now: float, window: float, limit: int, "
                                         "max_keys: int, names, sightings: bytearray)");
        return NULL;
    }
    PyObject *events = args[0], *seen = args[1], *order = args[2], *names = args[8];
    Py_ssize_t head = PyLong_AsSsize_t(args[3]);
    double now = PyFloat_AS_DOUBLE(args[4]), window = PyFloat_AS_DOUBLE(args[5]);
    long limit = PyLong_AsLong(args[6]);
    Py_ssize_t max_keys = PyLong_AsSsize_t(args[7]);
    if ((limit == -1 || max_keys == -1 || head == -1) && PyErr_Occurred())
        return NULL;
    /* The sightings: a header, then two generations of cap slots (a power of two, at most
     * three quarters full: a generation holds fewer than max_keys). */
    Py_ssize_t room = PyByteArray_GET_SIZE(args[9]) - (Py_ssize_t)sizeof(SightHead);
    size_t cap = room > 0 ? (size_t)room / (2 * sizeof(Sight)) : 0;
    SightHead *sh = (SightHead *)(void *)PyByteArray_AS_STRING(args[9]);
    if (cap == 0 || (cap & (cap - 1)) != 0 || (Py_ssize_t)cap * 3 < max_keys * 4 ||
        room != (Py_ssize_t)(2 * cap * sizeof(Sight)) || sh->young > 1 ||
        sh->count >= (uint64_t)max_keys) {
        PyErr_SetString(PyExc_ValueError, "admit_repeats: the sightings are not ours");
        return NULL;
    }
    Sight *gens = (Sight *)(void *)(sh + 1);
    size_t mask = cap - 1;
    if (head < 0)
        head = 0;
    if (repeat_seed == 0) {
        PyObject *text = PyUnicode_FromString("loghandler repeats");
        Py_hash_t x = text == NULL ? -1 : PyObject_Hash(text);
        Py_XDECREF(text);
        if (x == -1 && PyErr_Occurred())
            return NULL;
        repeat_seed = mix64((uint64_t)x) | 1;
    }
    const char *wanted[4];
    Py_ssize_t wanted_len[4];
    for (int k = 0; k < 4; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        if (!PyUnicode_CheckExact(name) ||
            (wanted[k] = PyUnicode_AsUTF8AndSize(name, &wanted_len[k])) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "admit_repeats: names must be str");
            return NULL;
        }
    }
    PyObject *kept = PyList_New(0), *ended = PyList_New(0), *two = PyLong_FromLong(2);
    PyObject *cache[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t suppressed = 0;
    if (kept == NULL || ended == NULL || two == NULL)
        goto error;
    /* The list is not ours: a strong reference to each event while it is looked at. */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, i)), *key = NULL, *entry = NULL;
        RepeatParts rp;
        uint64_t hash;
        int r = repeat_parts(st, event, names, wanted, wanted_len, &rp);
        if (r <= 0) {
            if (r == 0 && PyList_Append(kept, event) == 0)
                r = 1;
            Py_DECREF(event);
            if (r < 0)
                goto error;
            continue;
        }
        if (repeat_hash(st, &rp, cache, &hash) < 0)
            goto error_event;
        if (hash == 0)
            hash = 1; /* 0 marks an empty slot */
        int admit = 1;
        if (PyDict_GET_SIZE(seen) > 0) { /* no window open: none to look up */
            if ((key = PyLong_FromUnsignedLongLong((unsigned long long)hash)) == NULL)
                goto error_event;
            /* Selector._admit */
            entry = PyDict_GetItemWithError(seen, key);
            if (entry == NULL && PyErr_Occurred())
                goto error_event;
            Py_XINCREF(entry);
            if (entry != NULL && !repeat_entry_ok(entry))
                goto error_event;
            if (entry != NULL && now - PyFloat_AS_DOUBLE(PyList_GET_ITEM(entry, 0)) < window) {
                long count = PyLong_AsLong(PyList_GET_ITEM(entry, 1));
                if (count == -1 && PyErr_Occurred())
                    goto error_event;
                PyObject *next = PyLong_FromLong(count + 1);
                if (next == NULL)
                    goto error_event;
                PyList_SetItem(entry, 1, next); /* steals next */
                if (count + 1 > limit) {
                    Py_INCREF(event);
                    PyList_SetItem(entry, 2, event);
                    admit = 0;
                }
                goto done;
            }
            if (entry != NULL) {
                /* Its place in order is passed over (Selector._oldest). */
                if (PyDict_DelItem(seen, key) < 0 || repeat_ended(ended, entry, limit) < 0)
                    goto error_event;
                Py_CLEAR(entry);
            }
        }
        /* No window open: a first sighting is noted, a second within the window opens one. */
        Sight *young = gens + cap * sh->young, *at = young;
        Py_ssize_t slot = sight_find(young, mask, hash);
        if (at[slot].hash == 0) {
            at = gens + cap * (1 - sh->young);
            Py_ssize_t other = sight_find(at, mask, hash);
            if (at[other].hash == 0 || now - at[other].time >= window)
                at = NULL; /* noted in young, at slot */
            else
                slot = other;
        }
        else if (now - at[slot].time >= window) {
            at[slot].time = now; /* seen again after its window: a first sighting again */
            goto done;
        }
        if (at == NULL) {
            young[slot].hash = hash;
            young[slot].time = now;
            if (++sh->count >= (uint64_t)max_keys) {
                /* A new generation: the old one is forgotten (emptied, it is young). */
                sh->young = 1 - sh->young;
                sh->count = 0;
                memset(gens + cap * sh->young, 0, cap * sizeof(Sight));
            }
            goto done;
        }
        PyObject *first = PyFloat_FromDouble(at[slot].time);
        if (first == NULL)
            goto error_event;
        sight_delete(at, mask, (size_t)slot);
        if (at == young)
            sh->count--;
        if (key == NULL && (key = PyLong_FromUnsignedLongLong((unsigned long long)hash)) == NULL) {
            Py_DECREF(first);
            goto error_event;
        }
        if (PyDict_GET_SIZE(seen) >= max_keys) {
            /* The oldest open window: the first place in order from head whose key still
             * holds that entry (Selector._oldest, _take_oldest). */
            PyObject *gone = NULL;
            while (gone == NULL && head < PyList_GET_SIZE(order)) {
                PyObject *place = PyList_GET_ITEM(order, head);
                if (!repeat_entry_ok(place)) {
                    Py_DECREF(first);
                    goto error_event;
                }
                PyObject *now_at = PyDict_GetItemWithError(seen, PyList_GET_ITEM(place, 3));
                if (now_at == NULL && PyErr_Occurred()) {
                    Py_DECREF(first);
                    goto error_event;
                }
                if (now_at == place)
                    gone = Py_NewRef(place);
                else
                    head++;
            }
            if (gone != NULL) {
                head++;
                int bad = PyDict_DelItem(seen, PyList_GET_ITEM(gone, 3)) < 0 ||
                          repeat_ended(ended, gone, limit) < 0;
                Py_DECREF(gone);
                if (bad) {
                    Py_DECREF(first);
                    goto error_event;
                }
            }
        }
        PyObject *made = PyList_New(5), *tuple = repeat_tuple(st, &rp, cache);
        if (made == NULL || tuple == NULL) {
            Py_XDECREF(made);
            Py_XDECREF(tuple);
            Py_DECREF(first);
            goto error_event;
        }
        PyList_SET_ITEM(made, 0, first); /* the window starts at the first sighting */
        PyList_SET_ITEM(made, 1, Py_NewRef(two));
        PyList_SET_ITEM(made, 2, Py_NewRef(Py_None));
        PyList_SET_ITEM(made, 3, Py_NewRef(key));
        PyList_SET_ITEM(made, 4, tuple);
        /* Neither the entry nor its key can be part of a cycle: the entry holds a float, two
         * ints, the last event (which cannot hold the selector's own list) and its key, the
         * key str or None only (repeat_key_untracked). Untracked, the garbage collector no
         * longer walks one or two objects per window at each pass. */
        PyObject_GC_UnTrack(made);
        repeat_key_untracked(tuple);
        if (2 > limit) {
            PyList_SET_ITEM(made, 2, Py_NewRef(event));
            Py_DECREF(Py_None);
            admit = 0;
        }
        /* In order first: a place whose key is not set is only passed over. */
        int bad = PyList_Append(order, made) < 0 || PyDict_SetItem(seen, key, made) < 0;
        Py_DECREF(made);
        if (bad)
            goto error_event;
done:
        Py_XDECREF(entry);
        Py_XDECREF(key);
        repeat_parts_clear(&rp);
        if (admit ? PyList_Append(kept, event) < 0 : (suppressed++, 0)) {
            Py_DECREF(event);
            goto error;
        }
        Py_DECREF(event);
        continue;
error_event:
        Py_XDECREF(entry);
        Py_XDECREF(key);
        repeat_parts_clear(&rp);
        Py_DECREF(event);
        goto error;
    }
    for (int k = 0; k < 4; k++)
        Py_XDECREF(cache[k]);
    Py_DECREF(two);
    PyObject *result = Py_BuildValue("(NnNn)", kept, suppressed, ended, head);
    return result;
error:
    for (int k = 0; k < 4; k++)
        Py_XDECREF(cache[k]);
    Py_XDECREF(two);
    Py_XDECREF(kept);
    Py_XDECREF(ended);
    return NULL;
}

/* ------------------------------------------------------------------ handle
 *
 * IngestHandler.handle for the common record: the Python handle (its twin, which
 * front_method was given) and the record's way (record_way), without their bytecode. It reads,
 * from the handler's own __dict__, ``filters`` and the fast path (fastpath.ATTRIBUTE: a
 * FastPath), and nothing else. Anything else -- a thread inside loghandler's own sending,
 * filters, a record of another class, a handler without a fast path (a subclass's emit, a
 * formatter) -- is the twin's, called as it is. */

static PyObject *
handle_done(State *st, PyObject *record)
{
    if (st->returns_record)
        return Py_NewRef(record);
    Py_RETURN_TRUE;
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
    if (in_senders(st) || Py_TYPE(record) != (PyTypeObject *)st->record_type)
        goto python;
    PyObject *self_dict = PyObject_GenericGetDict(self, NULL);
    if (self_dict == NULL)
        goto python_after_error;
    PyObject *filters = PyDict_GetItemWithError(self_dict, st->s_filters);
    PyObject *fast = filters == NULL ? NULL : PyDict_GetItemWithError(self_dict, st->s_fast_path);
    int ours = fast != NULL && PyList_CheckExact(filters) && PyList_GET_SIZE(filters) == 0 &&
               Py_TYPE(fast) == (PyTypeObject *)st->contract[T_FAST];
    if (ours)
        Py_INCREF(fast); /* holds the FastPath's parts while code runs */
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
    int r = record_way(st, self, record, d, fast);
    Py_DECREF(d);
    if (r == 0) {
        /* Nothing done: the careful path's (FastPath.python_path(record, False)). */
        PyObject *call_args[2] = {record, Py_False};
        PyObject *got = PyObject_Vectorcall(PyTuple_GET_ITEM(fast, FP_PYTHON_PATH), call_args,
                                            2, NULL);
        r = got == NULL ? -1 : 1;
        Py_XDECREF(got);
    }
    Py_DECREF(fast);
    PyObject *done = r < 0 ? NULL : handle_done(st, record);
    Py_DECREF(self);
    Py_DECREF(record);
    return done;
python_after_error:
    if (!clear_if_exception())
        return NULL;
python:;
    if (st->fallback[F_HANDLE] == NULL)
        return not_configured();
    PyObject *call_args[2] = {self, record};
    return PyObject_Vectorcall(st->fallback[F_HANDLE], call_args, 2, NULL);
}

/* ------------------------------------------------------------------ the other fronts
 *
 * IngestProcessor.__call__ (structlog), IngestSink.__call__ (loguru) and the queueing of an
 * OpenTelemetry record's event (IngestLogRecordProcessor), compiled: each reads its event the
 * way its Python path does, then takes the way of an event above (sampling, a wire item,
 * hold, the queue). What they do not take is their Python path's, called as it is (the
 * FastPath's python_path, or the twin front_method was given when there is no fast path; told
 * whether sampling kept the event already). Their fast path is read as the handler's. */

/* The front end's fast path (fastpath.ATTRIBUTE): a new reference, or NULL (none, or not
 * readable: the Python path). */
static PyObject *
front_fast(State *st, PyObject *self)
{
    PyObject *fast = PyObject_GetAttr(self, st->s_fast_path);
    if (fast == NULL) {
        PyErr_Clear(); /* (an AttributeError: no fast path) */
        return NULL;
    }
    if (fast == Py_None) {
        Py_DECREF(fast);
        return NULL;
    }
    return fast;
}

/* The front end's Python path (front_method's fallback of its kind), called as
 * fallback(self, *args, sampled). A new reference, or NULL. */
static PyObject *
python_put(State *st, int kind, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
           int sampled)
{
    if (st->fallback[kind] == NULL)
        return not_configured();
    PyObject *all[5] = {self, NULL, NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < nargs && i < 3; i++)
        all[i + 1] = args[i];
    all[nargs + 1] = sampled ? Py_True : Py_False;
    return PyObject_Vectorcall(st->fallback[kind], all, (size_t)(nargs + 2), NULL);
}

/* The end of a front end's compiled call: the item queued (or the Python path's when there is
 * none), its way's state released. 0 or -1. */
static int
front_finish(State *st, Way *w, PyObject *item, Py_ssize_t size, PyObject *levelno,
             PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *all[4] = {NULL, NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < nargs && i < 3; i++)
        all[i] = args[i];
    all[nargs] = w->sampled ? Py_True : Py_False;
    if (item == NULL) {
        if (!clear_if_exception())
            return -1;
        if (call_front(w->python_path, all, nargs + 1) < 0)
            return clear_if_exception() ? 0 : -1;
        return 0;
    }
    return way_finish(st, w, item, size, levelno, all, nargs + 1);
}

/* The level number of a level name, for hold's test (hold.level_number). New reference. */
static PyObject *
level_number(State *st, Way *w, PyObject *level)
{
    if (w->hold == Py_None || !w->contextual)
        return NULL;
    return PyObject_CallOneArg(st->level_number, level);
}

/* IngestProcessor.__call__(self, logger, method_name, event_dict) -> event_dict */
static PyObject *
processor_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "IngestProcessor(logger, method_name, event_dict)");
        return NULL;
    }
    PyObject *self = args[0], *method = args[2], *event = args[3];
    PyObject *fast = NULL, *add_time = NULL, *levelno = NULL, *item = NULL;
    Way w;
    int begun = 0, failed = 1;
    if (in_senders(st) || !PyDict_CheckExact(event) ||
        (fast = front_fast(st, self)) == NULL)
        goto python;
    Py_INCREF(self);
    Py_INCREF(event);
    int r = way_begin(st, &w, self, fast, 1);
    if (r < 0)
        goto out;
    if (r == 0)
        goto python_out;
    begun = 1;
    /* The event's level and _time, as event_dict_to_event makes them where it lacks them. */
    PyObject *level = PyDict_GetItemWithError(event, st->s_level), *add_level = NULL;
    if (level == NULL) {
        if (PyErr_Occurred() || !PyUnicode_CheckExact(method))
            goto python_out;
        add_level = PyDict_GetItemWithError(st->method_levels, method);
        if (add_level == NULL && PyErr_Occurred())
            goto python_out;
        level = add_level = add_level == NULL ? method : add_level;
    }
    Py_INCREF(level);
    int has_time = PyDict_Contains(event, st->s_time);
    if (has_time < 0)
        goto level_out;
    if (!has_time) {
        PyObject *stamp = PyDict_GetItemWithError(event, st->s_timestamp);
        if (stamp != NULL && PyUnicode_CheckExact(stamp) && PyUnicode_IS_ASCII(stamp) &&
            PyUnicode_GET_LENGTH(stamp) == 27) {
            const char *s = (const char *)PyUnicode_DATA(stamp);
            if (s[26] == 'Z' && s[10] == 'T' && s[19] == '.')
                add_time = Py_NewRef(stamp); /* the form already (time_from) */
        }
        else if (stamp == NULL && !PyErr_Occurred()) {
            /* no timestamp: now */
            PyObject *now = PyObject_CallNoArgs(st->now);
            char ts[28];
            if (now != NULL && PyFloat_CheckExact(now) &&
                format_epoch(st, PyFloat_AS_DOUBLE(now), ts) == 0)
                add_time = PyUnicode_FromStringAndSize(ts, 27);
            Py_XDECREF(now);
        }
        if (add_time == NULL)
            goto level_out; /* another form of time: time_from's */
    }
    PyObject *logger = PyDict_GetItemWithError(event, st->s_logger);
    PyObject *own = logger == NULL && PyErr_Occurred() ? NULL
                    : PyDict_GetItemWithError(event, st->s_trace_id);
    if (PyErr_Occurred())
        goto level_out;
    r = way_sample(st, &w, level, logger == NULL ? Py_None : logger, own);
    if (r <= 0) {
        Py_DECREF(level);
        failed = r < 0;
        goto out;
    }
    Py_ssize_t size = 0;
    if (w.wired && w.native) {
        /* event_dict_to_event's event: the dict's items, then _time and level where absent
         * (exc_info and ProcessorFormatter's bookkeeping: the careful path's) */
        Members ms;
        ms.n = 0;
        ms.vals = NULL;
        int want_message = 0; /* (no message of a record's here) */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        int ok = 1;
        while (ok && PyDict_Next(event, &pos, &key, &value))
            ok = PyUnicode_CheckExact(key) && PySet_Contains(st->structlog_skip, key) == 0 &&
                 members_add(&ms, key, value, M_VALUE) == 0;
        if (ok && add_time != NULL)
            ok = members_add(&ms, st->s_time, add_time, M_VALUE) == 0;
        if (ok && add_level != NULL)
            ok = members_add(&ms, st->s_level, add_level, M_VALUE) == 0;
        if (ok)
            item = write_item(st, &ms, &w.c, &size, &want_message);
        members_clear(&ms);
    }
    if (item != NULL && w.hold != Py_None && w.contextual &&
        (levelno = level_number(st, &w, level)) == NULL && !clear_if_exception()) {
        Py_DECREF(level);
        goto out;
    }
    Py_DECREF(level);
    failed = front_finish(st, &w, item, size, levelno, args + 1, 3) < 0;
    goto out;
level_out:
    Py_DECREF(level);
python_out:
    if (!clear_if_exception())
        goto out;
    {
        PyObject *got = python_put(st, F_PROCESSOR, self, args + 1, 3, 0);
        failed = got == NULL;
        Py_XDECREF(got);
    }
out:
    if (begun)
        way_end(&w);
    Py_XDECREF(item);
    Py_XDECREF(levelno);
    Py_XDECREF(add_time);
    Py_DECREF(fast);
    Py_DECREF(self);
    if (failed) {
        Py_DECREF(event);
        return NULL;
    }
    return event; /* the processor returns the event dict unchanged */
python:
    if (PyErr_Occurred() && !clear_if_exception())
        return NULL;
    Py_XDECREF(fast);
    {
        PyObject *got = python_put(st, F_PROCESSOR, self, args + 1, 3, 0);
        if (got == NULL)
            return NULL;
        Py_DECREF(got);
    }
    return Py_NewRef(event);
}

/* IngestSink.__call__(self, message): loguru's record (message.record), read as loguru_head
 * reads it (model.HEAD's loguru columns). */
static PyObject *
sink_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "IngestSink(message)");
        return NULL;
    }
    PyObject *self = args[0], *message = args[1];
    PyObject *fast = NULL, *record = NULL, *levelno = NULL, *item = NULL, *extra = NULL;
    PyObject *vals[16] = {NULL};
    Way w;
    int begun = 0, failed = 1;
    if (in_senders(st) || (fast = front_fast(st, self)) == NULL)
        goto python;
    Py_INCREF(self);
    Py_INCREF(message);
    record = PyObject_GetAttr(message, st->s_record);
    if (record == NULL || !PyDict_CheckExact(record))
        goto python_out;
    PyObject *exc = PyDict_GetItemWithError(record, st->s_exception);
    PyObject *text = PyDict_GetItemWithError(record, st->s_message);
    extra = PyDict_GetItemWithError(record, st->s_extra);
    if (exc != Py_None || text == NULL || !PyUnicode_CheckExact(text) || extra == NULL ||
        !PyDict_CheckExact(extra) || st->n_fields > 16)
        goto python_out;
    Py_INCREF(text);
    Py_INCREF(extra);
    /* The head's values (strong references): _time is the record's time's timestamp(); the
     * level its name, mapped as item_events maps it. */
    for (Py_ssize_t i = 0; i < st->n_fields; i++) {
        PyObject *kv = PyTuple_GET_ITEM(st->loguru_head, i);
        PyObject *v = PyDict_GetItemWithError(record, PyTuple_GET_ITEM(kv, 0));
        PyObject *attr = PyTuple_GET_ITEM(kv, 1);
        if (v == NULL)
            goto values_out;
        if (i == 0)
            v = PyObject_CallMethodNoArgs(v, st->s_timestamp);
        else if (attr != Py_None)
            v = PyObject_GetAttr(v, attr);
        else
            Py_INCREF(v);
        vals[i] = v;
        if (v == NULL || (i == 0 && !PyFloat_CheckExact(v)))
            goto values_out;
    }
    if (!PyUnicode_CheckExact(vals[1]))
        goto values_out;
    PyObject *mapped = PyDict_GetItemWithError(st->levels, vals[1]);
    if (mapped != NULL)
        Py_INCREF(mapped);
    else if (!PyErr_Occurred())
        mapped = PyObject_CallMethodNoArgs(vals[1], st->s_lower);
    if (mapped == NULL)
        goto values_out;
    Py_SETREF(vals[1], mapped);
    PyObject *level_obj = PyDict_GetItemWithError(record, st->s_level);
    levelno = level_obj == NULL ? NULL : PyObject_GetAttr(level_obj, st->s_no);
    if (levelno == NULL || !PyLong_CheckExact(levelno))
        goto values_out;
    int r = way_begin(st, &w, self, fast, 1);
    if (r <= 0) {
        if (r < 0)
            goto values_failed;
        goto values_out;
    }
    begun = 1;
    PyObject *own = PyDict_GetItemWithError(extra, st->s_trace_id);
    if (own == NULL && PyErr_Occurred())
        goto values_out;
    r = way_sample(st, &w, vals[1], vals[2], own);
    if (r <= 0) {
        failed = r < 0;
        goto values_done;
    }
    Py_ssize_t size = 0;
    int want_message = 0;
    if (w.wired && w.native) {
        /* loguru_head's event: the head read above, then the extras (a head key among them:
         * the careful path's) */
        Members ms = {.n = 0, .vals = vals, .level = vals[1], .msg = text, .args = NULL};
        int ok = 1;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (ok && PyDict_Next(extra, &pos, &key, &value))
            ok = PyUnicode_CheckExact(key) && PySet_Contains(st->head_set, key) == 0 &&
                 members_add(&ms, key, value, M_VALUE) == 0;
        if (ok)
            item = write_item(st, &ms, &w.c, &size, &want_message);
        members_clear(&ms);
    }
    failed = front_finish(st, &w, item, size, levelno, args + 1, 1) < 0;
    goto values_done;
values_out:
    if (!clear_if_exception())
        goto values_failed;
    {
        PyObject *got = python_put(st, F_SINK, self, args + 1, 1, begun && w.sampled);
        failed = got == NULL;
        Py_XDECREF(got);
    }
    goto values_done;
values_failed:
    failed = 1;
values_done:
    Py_XDECREF(text);
    for (Py_ssize_t i = 0; i < st->n_fields; i++)
        Py_XDECREF(vals[i]);
    Py_XDECREF(extra);
    goto out;
python_out:
    if (!clear_if_exception())
        goto out;
    {
        PyObject *got = python_put(st, F_SINK, self, args + 1, 1, 0);
        failed = got == NULL;
        Py_XDECREF(got);
    }
out:
    if (begun)
        way_end(&w);
    Py_XDECREF(item);
    Py_XDECREF(levelno);
    Py_XDECREF(record);
    Py_DECREF(fast);
    Py_DECREF(self);
    Py_DECREF(message);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
python:
    if (PyErr_Occurred() && !clear_if_exception())
        return NULL;
    Py_XDECREF(fast);
    {
        PyObject *got = python_put(st, F_SINK, self, args + 1, 1, 0);
        if (got == NULL)
            return NULL;
        Py_DECREF(got);
    }
    Py_RETURN_NONE;
}

/* getattr(obj, name, None) as a new reference (an AttributeError is None; another error is
 * NULL, set). */
static PyObject *
attr_or_none(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        v = Py_NewRef(Py_None);
    }
    return v;
}

/* Is an exact int zero? */
static int
int_is_zero(PyObject *v)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return !overflow && x == 0;
}

/* An OpenTelemetry record's event as otel_event makes it (loghandler/_front/otel.py: the
 * reference), read into members: 1 done; 0: not this path's (a body or an attribute that is
 * no plain value, an exception, a clash: otel_event's careful steps); -1: failed. *level and
 * *levelno set (new references). */
static int
otel_members(State *st, PyObject *record, PyObject *scope, PyObject *fields, PyObject *known,
             Members *ms, PyObject **level, PyObject **levelno)
{
    PyObject *v = NULL, *w = NULL;
    int result = -1;
    *level = *levelno = NULL;
    /* _time: the record's timestamp, else its observed one, in ns; else now */
    v = PyObject_GetAttr(record, st->s_timestamp);
    if (v == NULL)
        goto no_or_error; /* (what otel_event reads directly, missing: its careful path's) */
    if (v != Py_None && !PyLong_CheckExact(v))
        goto no; /* (its truth is otel_event's to ask) */
    if (v == Py_None || int_is_zero(v)) {
        Py_SETREF(v, PyObject_GetAttr(record, st->s_observed));
        if (v == NULL)
            goto out;
    }
    double when;
    if (PyLong_CheckExact(v)) {
        when = PyLong_AsDouble(v);
        if (when == -1.0 && PyErr_Occurred())
            goto out;
        when /= 1e9;
    }
    else {
        Py_SETREF(v, PyObject_CallNoArgs(st->now));
        if (v == NULL || !PyFloat_CheckExact(v))
            goto no;
        when = PyFloat_AS_DOUBLE(v);
    }
    Py_SETREF(v, PyFloat_FromDouble(when));
    if (v == NULL || members_add(ms, st->s_time, v, M_TIME) < 0)
        goto out;
    /* level: _level() (the severity text lowercased, as IngestHandler names it; else the
     * severity number's range; else info) */
    Py_SETREF(v, attr_or_none(record, st->s_severity_text));
    if (v == NULL)
        goto out;
    if (PyUnicode_Check(v) && !PyUnicode_CheckExact(v))
        goto no;
    if (PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) > 0) {
        w = PyObject_CallMethodNoArgs(v, st->s_lower);
        if (w == NULL)
            goto out;
        PyObject *mapped = PyDict_GetItemWithError(st->otel_texts, w);
        *level = Py_NewRef(mapped != NULL ? mapped : w);
        Py_CLEAR(w);
    }
    else {
        Py_SETREF(v, attr_or_none(record, st->s_severity_number));
        w = v == NULL ? NULL : attr_or_none(v, st->s_value);
        if (w == NULL)
            goto out;
        long number = 0;
        if (PyLong_CheckExact(w)) {
            int overflow;
            number = PyLong_AsLongAndOverflow(w, &overflow);
            if (overflow > 0)
                number = 25; /* past every range: info */
        }
        static const char *names[6] = {"trace", "debug", "info", "warning", "error", "critical"};
        const char *name = "info";
        for (int k = 0; number > 0 && k < 6; k++)
            if (number <= 4 * (k + 1)) {
                name = names[k];
                break;
            }
        Py_CLEAR(w);
        *level = PyUnicode_InternFromString(name);
    }
    if (*level == NULL || members_add(ms, st->s_level, *level, M_VALUE) < 0)
        goto out;
    PyObject *number = PyDict_GetItemWithError(st->otel_numbers, *level);
    *levelno = number != NULL ? Py_NewRef(number) : PyLong_FromLong(20);
    if (*levelno == NULL)
        goto out;
    /* body: a str is the message (anything else is otel_event's) */
    Py_SETREF(v, PyObject_GetAttr(record, st->s_body));
    if (v == NULL)
        goto out;
    if (v != Py_None) {
        if (!PyUnicode_CheckExact(v))
            goto no;
        if (members_add(ms, st->s_message, v, M_VALUE) < 0)
            goto no;
    }
    /* the scope's name is the logger */
    if (scope != Py_None) {
        Py_SETREF(v, PyObject_GetAttr(scope, st->s_name));
        if (v == NULL)
            goto out;
        if (PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) > 0 &&
            members_add(ms, st->s_logger, v, M_VALUE) < 0)
            goto no;
    }
    Py_SETREF(v, attr_or_none(record, st->s_event_name));
    if (v == NULL)
        goto out;
    if (v != Py_None) {
        if (!PyUnicode_CheckExact(v))
            goto no;
        if (PyUnicode_GET_LENGTH(v) > 0 && members_add(ms, st->s_event_name, v, M_VALUE) < 0)
            goto no;
    }
    /* attributes: as they are, code.* renamed. A BoundedAttributes is read through its public
     * copy(), a plain dict (iterating the mapping takes its lock per key). */
    Py_SETREF(v, PyObject_GetAttr(record, st->s_attributes));
    if (v == NULL)
        goto out;
    if (v != Py_None) {
        w = PyDict_CheckExact(v) ? Py_NewRef(v) : PyObject_CallMethodNoArgs(v, st->s_copy);
        if (w == NULL)
            goto out;
        if (!PyDict_CheckExact(w))
            goto no;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(w, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key) || !is_plain(value))
                goto no;
            int exc = PySet_Contains(st->otel_exception, key);
            if (exc != 0)
                goto no_or_error;
            PyObject *renamed_key = PyDict_GetItemWithError(st->otel_code, key);
            if (renamed_key == NULL && PyErr_Occurred())
                goto out;
            if (renamed_key != NULL)
                key = renamed_key;
            if (members_have(ms, key) || members_add(ms, key, value, M_VALUE) < 0)
                goto no;
        }
        Py_CLEAR(w);
    }
    Py_SETREF(v, attr_or_none(record, st->s_exception));
    if (v == NULL)
        goto out;
    if (v != Py_None)
        goto no;
    /* the record's own span */
    Py_SETREF(v, PyObject_GetAttr(record, st->s_trace_id));
    if (v == NULL)
        goto out;
    if (PyLong_CheckExact(v) && !int_is_zero(v) && !members_have(ms, st->s_trace_id)) {
        PyObject *ids[2] = {st->s_trace_id, st->s_span_id}, *forms[2] = {st->s_032x, st->s_016x};
        for (int k = 0; k < 2; k++) {
            if (k == 1) {
                Py_SETREF(v, PyObject_GetAttr(record, st->s_span_id));
                if (v == NULL)
                    goto out;
                if (!PyLong_CheckExact(v) || int_is_zero(v) || members_have(ms, st->s_span_id))
                    break;
            }
            w = PyObject_Format(v, forms[k]);
            if (w == NULL || members_add(ms, ids[k], w, M_VALUE) < 0)
                goto out;
            Py_CLEAR(w);
        }
    }
    /* the resource's fields, where the event lacks them (known: the JSON of those that are no
     * plain values) */
    if (fields != Py_None) {
        if (!PyDict_CheckExact(fields) || !PyTuple_CheckExact(known))
            goto no;
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(fields, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key))
                goto no;
            if (members_have(ms, key))
                continue;
            int kind = M_VALUE;
            if (!is_plain(value)) {
                PyObject *json = NULL;
                for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(known); i++) {
                    PyObject *pair = PyTuple_GET_ITEM(known, i);
                    if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2 &&
                        PyTuple_GET_ITEM(pair, 0) == value)
                        json = PyTuple_GET_ITEM(pair, 1);
                }
                if (json == NULL || !PyBytes_CheckExact(json))
                    goto no;
                value = json;
                kind = M_JSON;
            }
            if (members_add(ms, key, value, kind) < 0)
                goto no;
        }
    }
    result = 1;
    goto out;
no_or_error:
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_AttributeError))
        goto out;
    PyErr_Clear();
no:
    result = 0;
out:
    Py_XDECREF(v);
    Py_XDECREF(w);
    if (result != 1) {
        Py_CLEAR(*level);
        Py_CLEAR(*levelno);
        if (result == 0 || clear_if_exception())
            result = 0;
    }
    return result;
}

/* otel_put(front, log_record, record, scope, fields, known, fast) -> bool: an OpenTelemetry
 * record on its way (its own span ids in it: no span is looked up), read as otel_event reads
 * it (fields, known: its resource's fields and the JSON of those that are no plain values):
 * True when done (queued, held, dropped and counted, or handed to the front end's _put);
 * False: nothing done, the Python path's. */
static PyObject *
otel_put(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (!st->configured)
        return not_configured();
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "otel_put(front, log_record, record, scope, fields, known, fast)");
        return NULL;
    }
    PyObject *self = args[0], *level = NULL, *levelno = NULL, *item = NULL, *result = NULL;
    Members ms;
    ms.n = 0;
    ms.vals = NULL;
    Way w;
    int begun = 0;
    int r = otel_members(st, args[2], args[3], args[4], args[5], &ms, &level, &levelno);
    if (r <= 0) {
        result = r < 0 ? NULL : Py_NewRef(Py_False);
        goto out;
    }
    r = way_begin(st, &w, self, args[6], 0);
    if (r <= 0) {
        result = r < 0 ? NULL : Py_NewRef(Py_False);
        goto out;
    }
    begun = 1;
    PyObject *logger = Py_None, *own = NULL;
    for (Py_ssize_t i = 0; i < ms.n; i++) {
        if (same_str(ms.m[i].key, st->s_logger))
            logger = ms.m[i].value;
        else if (same_str(ms.m[i].key, st->s_trace_id))
            own = ms.m[i].value;
    }
    r = way_sample(st, &w, level, logger, own);
    if (r <= 0) {
        result = r < 0 ? NULL : Py_NewRef(Py_True);
        goto out;
    }
    Py_ssize_t size = 0;
    int want_message = 0; /* (no message of a record's here) */
    if (w.wired && w.native)
        item = write_item(st, &ms, &w.c, &size, &want_message);
    PyObject *careful[1] = {args[1]};
    r = front_finish(st, &w, item, size, levelno, careful, 1);
    result = r < 0 ? NULL : Py_NewRef(Py_True);
out:
    members_clear(&ms);
    if (begun)
        way_end(&w);
    Py_XDECREF(item);
    Py_XDECREF(level);
    Py_XDECREF(levelno);
    return result;
}

/* ------------------------------------------------------------------ the module */

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

/* The contract's types (table["contract"], in T_ order), each a tuple subclass whose _fields
 * are CONTRACT's, and the attribute a fast path is read from. 0, or -1 with the error set. */
static int
read_contract(State *st, PyObject *table)
{
    PyObject *types = table_item(table, "contract", &PyTuple_Type);
    if (types == NULL)
        return -1;
    int ok = PyTuple_GET_SIZE(types) == N_CONTRACT;
    for (int t = 0; ok && t < N_CONTRACT; t++) {
        PyObject *type = PyTuple_GET_ITEM(types, t);
        PyObject *fields = PyType_Check(type) &&
                           PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
                           ? PyObject_GetAttrString(type, "_fields") : NULL;
        int k = 0;
        ok = fields != NULL && PyTuple_Check(fields) &&
             strcmp(((PyTypeObject *)type)->tp_name, CONTRACT[t][0]) == 0;
        for (; ok && k < PyTuple_GET_SIZE(fields); k++) {
            const char *want = k + 1 < 14 ? CONTRACT[t][k + 1] : NULL;
            PyObject *f = PyTuple_GET_ITEM(fields, k);
            ok = want != NULL && PyUnicode_Check(f) && PyUnicode_CompareWithASCIIString(f, want) == 0;
        }
        ok = ok && (k + 1 >= 14 || CONTRACT[t][k + 1] == NULL);
        Py_XDECREF(fields);
        PyErr_Clear();
        if (ok)
            Py_XSETREF(st->contract[t], Py_NewRef(type));
    }
    Py_DECREF(types);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "configure(): the contract's types do not match _engine/fastpath.py");
        return -1;
    }
    PyObject *attr = table_item(table, "fast_path_attribute", &PyUnicode_Type);
    if (attr == NULL)
        return -1;
    PyUnicode_InternInPlace(&attr);
    Py_XSETREF(st->s_fast_path, attr);
    return 0;
}

/* front_method(kind, python) -> the compiled call of that front end ("handle",
 * "processor_call", "sink_call") as a method, told its Python twin (called with the front end
 * and its arguments when the call has no fast path). */
static PyObject *
front_method(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = get_state(module);
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "front_method(kind, python)");
        return NULL;
    }
    for (int k = 0; k < N_FRONTS; k++) {
        if (PyUnicode_CompareWithASCIIString(args[0], FRONTS[k]) == 0) {
            Py_XSETREF(st->fallback[k], Py_NewRef(args[1]));
            return PyObject_GetAttrString(module, FRONTS[k]);
        }
    }
    PyErr_SetString(PyExc_ValueError, "front_method: kind is handle, processor_call or sink_call");
    return NULL;
}

/* Where a real LogRecord of this Python holds the attributes the hot path reads (record_attr):
 * each one's PyDict_Next position in the record's dict, -1 for one __init__ does not set.
 * 0, or -1 with an error set (the record could not be made). */
static int
find_places(State *st)
{
    for (Py_ssize_t i = 0; i < 16; i++)
        st->head_at[i] = -1;
    for (int j = 0; j < N_AT; j++)
        st->at[j] = -1;
    PyObject *record = PyObject_CallFunction(st->record_type, "sisis()O", "", 0, "", 0, "",
                                             Py_None);
    if (record == NULL)
        return -1;
    PyObject *d = PyObject_GenericGetDict(record, NULL);
    if (d == NULL || !PyDict_CheckExact(d)) {
        Py_XDECREF(d);
        Py_DECREF(record);
        return d == NULL ? -1 : 0;
    }
    PyObject *const others[N_AT] = {st->s_msg, st->s_args, st->s_exc_info, st->s_stack_info,
                                    st->s_levelno};
    PyObject *const *keys = &PyTuple_GET_ITEM(st->src_keys, 0);
    Py_ssize_t pos = 0, at = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value)) {
        for (Py_ssize_t i = 0; i < st->n_fields; i++)
            if (key == keys[i])
                st->head_at[i] = at;
        for (int j = 0; j < N_AT; j++)
            if (key == others[j])
                st->at[j] = at;
        at = pos;
    }
    Py_DECREF(d);
    Py_DECREF(record);
    return 0;
}

/* configure(**table): everything the module needs, from loghandler/_engine/compiled.py (its table()
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
        {&st->context_var, "context_var", &PyContextVar_Type},
        {&st->span_source, "span_source", NULL},
        {&st->loads, "loads", NULL},
        {&st->method_levels, "method_levels", &PyDict_Type},
        {&st->structlog_skip, "structlog_skip", &PyFrozenSet_Type},
        {&st->now, "now", NULL},
        {&st->loguru_head, "loguru_head", &PyTuple_Type},
        {&st->level_number, "level_number", NULL},
        {&st->otel_texts, "otel_texts", &PyDict_Type},
        {&st->otel_numbers, "otel_numbers", &PyDict_Type},
        {&st->otel_exception, "otel_exception", &PyFrozenSet_Type},
        {&st->otel_code, "otel_code", &PyDict_Type},
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
    if (read_contract(st, table) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(st->src_keys);
    int loguru_ok = PyTuple_GET_SIZE(st->loguru_head) == n;
    for (Py_ssize_t i = 0; loguru_ok && i < n; i++) {
        PyObject *kv = PyTuple_GET_ITEM(st->loguru_head, i);
        loguru_ok = PyTuple_CheckExact(kv) && PyTuple_GET_SIZE(kv) == 2 &&
                    PyUnicode_CheckExact(PyTuple_GET_ITEM(kv, 0)) &&
                    (PyTuple_GET_ITEM(kv, 1) == Py_None ||
                     PyUnicode_CheckExact(PyTuple_GET_ITEM(kv, 1)));
    }
    if (n != PyTuple_GET_SIZE(st->dst_keys) || n < 2 || n > 16 || st->message_at < 0 ||
        st->message_at > n || PyList_GET_SIZE(st->in_use) < 1 || !loguru_ok) {
        PyErr_SetString(PyExc_ValueError, "configure(): the head's tables do not match");
        return NULL;
    }
    /* Interned keys (a dict lookup by an interned str compares by identity first), and the
     * wire writer's ,"key": fragment of each event key (the message's last). */
    PyObject *src = PyTuple_New(n), *dst = PyTuple_New(n), *frags = PyTuple_New(n + 1);
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
    }
    /* A record's way reads the level name and the logger at these places (RecordHead). */
    if (n <= HEAD_NAME || PyTuple_GET_ITEM(src, HEAD_LEVELNAME) != st->s_levelname ||
        PyTuple_GET_ITEM(src, HEAD_NAME) != st->s_name) {
        PyErr_SetString(PyExc_ValueError, "configure(): record_attrs' level name and logger "
                                          "are not where a record's way reads them");
        goto fail;
    }
    for (Py_ssize_t i = 0; i <= n; i++) {
        Out o;
        out_init(&o, PY_SSIZE_T_MAX);
        PyObject *frag = NULL;
        if (out_put(&o, ",", 1) == 0 &&
            put_str(&o, i < n ? PyTuple_GET_ITEM(dst, i) : st->s_message) == 0 &&
            out_put(&o, ":", 1) == 0)
            frag = PyBytes_FromStringAndSize(o.data, o.len);
        out_free(&o);
        if (frag == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "configure(): an event key JSON cannot hold");
            goto fail;
        }
        PyTuple_SET_ITEM(frags, i, frag);
    }
    /* The head's event keys: the record attributes' and the message's. */
    PyObject *head_set = PyFrozenSet_New(dst);
    if (head_set == NULL)
        goto fail;
    if (PySet_Add(head_set, st->s_message) < 0) { /* (a new frozenset takes one) */
        Py_DECREF(head_set);
        goto fail;
    }
    Py_XSETREF(st->head_set, head_set);
    Py_SETREF(st->src_keys, src);
    Py_SETREF(st->dst_keys, dst);
    Py_XSETREF(st->key_frags, frags);
    clear_head_cache(st);
    clear_caches(st);
    Py_CLEAR(st->otel_var);
    Py_CLEAR(st->span_ids);
    st->span_source_off = 0;
    st->n_fields = n;
    st->head_cache = PyMem_Calloc((size_t)n, sizeof(HeadCache));
    if (st->head_cache == NULL) {
        st->n_fields = 0;
        return PyErr_NoMemory();
    }
    st->cached_sec = -1;
    if (find_places(st) < 0)
        return NULL;
    st->configured = 1;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(src);
    Py_XDECREF(dst);
    Py_XDECREF(frags);
    return NULL;
}

static PyMethodDef methods[] = {
    {"front_method", (PyCFunction)(void (*)(void))front_method, METH_FASTCALL,
     "front_method(kind, python) -> method: a front end's compiled call, told its Python "
     "twin."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(**table): the event model and what handle() reads (loghandler/_engine/compiled.py)."},
    {"record_put", (PyCFunction)(void (*)(void))record_put, METH_FASTCALL,
     "record_put(handler, record, fast) -> bool: the record's way on the compiled path "
     "(sampling, its item, hold, the queue); False: nothing done, the careful path's."},
    {"otel_put", (PyCFunction)(void (*)(void))otel_put, METH_FASTCALL,
     "otel_put(front, log_record, record, scope, fields, known, fast) -> bool: an "
     "OpenTelemetry record on its way (read as otel_event reads it); False: nothing done."},
    {"admit_repeats", (PyCFunction)(void (*)(void))admit_repeats, METH_FASTCALL,
     "admit_repeats(events, seen, order, head, now, window, limit, max_keys, names, sightings) -> (kept, "
     "suppressed, ended, head): Selector._admit over a batch (shaping.py)."},
    {"items_size", items_size, METH_O,
     "items_size(items) -> int: the queue items' estimated sizes, summed."},
    {"format_items", (PyCFunction)(void (*)(void))format_items, METH_FASTCALL,
     "format_items(items, static, static_plain, finish, clean, fallback, skip) -> list."},
    {"format_record", format_record, METH_O,
     "format_record(event) -> bool: _time and level of a fast-path event formatted."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef processor_def = {
    "processor_call", (PyCFunction)(void (*)(void))processor_call, METH_FASTCALL,
    "IngestProcessor.__call__(self, logger, method_name, event_dict), compiled: its Python "
    "path is _put."};

static PyMethodDef sink_def = {
    "sink_call", (PyCFunction)(void (*)(void))sink_call, METH_FASTCALL,
    "IngestSink.__call__(self, message), compiled: its Python path is _put."};

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
        intern_into(&st->s_buffers, "buffers") < 0 ||
        intern_into(&st->s_trace_id, "trace_id") < 0 || intern_into(&st->s_span_id, "span_id") < 0 ||
        intern_into(&st->s_levelno, "levelno") < 0 ||
        intern_into(&st->s_levelname, "levelname") < 0 || intern_into(&st->s_name, "name") < 0 ||
        intern_into(&st->s_record, "record") < 0 ||
        intern_into(&st->s_timestamp, "timestamp") < 0 ||
        intern_into(&st->s_exception, "exception") < 0 ||
        intern_into(&st->s_extra, "extra") < 0 || intern_into(&st->s_no, "no") < 0 ||
        intern_into(&st->s_lower, "lower") < 0 ||
        intern_into(&st->s_observed, "observed_timestamp") < 0 ||
        intern_into(&st->s_severity_text, "severity_text") < 0 ||
        intern_into(&st->s_severity_number, "severity_number") < 0 ||
        intern_into(&st->s_value, "value") < 0 || intern_into(&st->s_body, "body") < 0 ||
        intern_into(&st->s_event_name, "event_name") < 0 ||
        intern_into(&st->s_attributes, "attributes") < 0 ||
        intern_into(&st->s_copy, "copy") < 0 || intern_into(&st->s_032x, "032x") < 0 ||
        intern_into(&st->s_016x, "016x") < 0)
        return -1;
    st->key_json = PyDict_New();
    if (st->key_json == NULL)
        return -1;
    st->ctx_cache = PyMem_Calloc(CTX_CACHE, sizeof(CtxEntry));
    st->span_cache = PyMem_Calloc(SPAN_CACHE, sizeof(SpanEntry));
    st->last_compose = PyMem_Calloc(1, sizeof(struct Compose));
    if (st->ctx_cache == NULL || st->span_cache == NULL || st->last_compose == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* handle as a method: bound to the handler it is read on, as a Python function is. */
    PyObject *func = PyCFunction_NewEx(&handle_def, module, NULL);
    PyObject *method = func == NULL ? NULL : PyInstanceMethod_New(func);
    Py_XDECREF(func);
    if (method == NULL)
        return -1;
    int r = PyModule_AddObjectRef(module, "handle", method);
    Py_DECREF(method);
    /* The other front ends' calls, as methods too. */
    PyMethodDef *defs[2] = {&processor_def, &sink_def};
    for (int k = 0; r == 0 && k < 2; k++) {
        func = PyCFunction_NewEx(defs[k], module, NULL);
        method = func == NULL ? NULL : PyInstanceMethod_New(func);
        Py_XDECREF(func);
        if (method == NULL)
            return -1;
        r = PyModule_AddObjectRef(module, defs[k]->ml_name, method);
        Py_DECREF(method);
    }
    return r;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    /* Not proven safe without the GIL: compiled.py uses the Python path on such builds. */
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
