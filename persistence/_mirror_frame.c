/* The mirror log's record framing in C: ``frame_rows`` of ``mirror_frame.py``, byte for byte.
 *
 * Why: every mirrored or streamed publish is framed once (entry header, routing key, meta,
 * properties, body, then the record's length and CRC); in Python that loop is about two
 * microseconds a record, a tenth of a message's whole cost in the broker. Here it is one copy and
 * one CRC. ``mirror_frame.py`` holds the pure-Python version, which is used when this module is
 * not built (no compiler, or HEADRACE_PURE_PYTHON=1) and which the tests hold this one to.
 *
 * The CRC is zlib's crc32, found with dlopen in the libz that Python's own zlib module loads, so
 * building needs neither zlib's headers nor its link library; no libz means no module (ImportError)
 * and the pure-Python framing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

typedef unsigned long (*crc32_fn)(unsigned long, const unsigned char *, unsigned int);

static crc32_fn zcrc32;
static unsigned long kind_crc; /* the CRC after the framing's kind byte */
static PyObject *struct_error;  /* struct.error: what the Python framing raises for a field too big */

#define KIND_ENTRY 1
#define FRAME_SIZE 9  /* u32 length, u32 crc, u8 kind */
#define HEAD_SIZE 24  /* u64 offset, i64 timestamp ms, u16 key length, u16 meta length, u32 props length */
#define INDEX_SIZE 24 /* u64 offset, u64 file position, i64 timestamp ms */
#define RELEASE_GIL_BYTES 65536 /* below this, taking the GIL back costs more than the framing */

static inline void put_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}


static int as_i64(PyObject *obj, long long *out) {
    *out = PyLong_AsLongLong(obj);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* One record's fields. The objects are owned here (strong references) until the call ends, so
 * nothing another thread does while pass 2 runs without the GIL can free what it reads. */
typedef struct {
    long long ts;
    const char *key; /* the UTF-8 of key_obj, cached in the str */
    Py_ssize_t key_len;
    PyObject *key_obj, *meta, *props, *body;
    PyObject *row; /* a row made by slow_row for a message; NULL otherwise */
} Fields;

/* Sets the text and byte fields from new references (stolen), checking their types. */
static int set_fields(Fields *f, PyObject *key, PyObject *meta, PyObject *props, PyObject *body) {
    f->key_obj = key;
    f->meta = meta;
    f->props = props;
    f->body = body;
    if (!key || !meta || !props || !body)
        return -1;
    if (!PyUnicode_Check(key) || !PyBytes_Check(props) || !PyBytes_Check(body) || !PyBytes_Check(meta)) {
        PyErr_SetString(PyExc_TypeError, "a mirror row is (int, str, bytes, bytes, bytes)");
        return -1;
    }
    f->key = PyUnicode_AsUTF8AndSize(key, &f->key_len);
    return f->key == NULL ? -1 : 0;
}

static int row_fields(PyObject *row, Fields *f) {
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 5) {
        PyErr_SetString(PyExc_TypeError, "a mirror row is a 5-tuple");
        return -1;
    }
    if (as_i64(PyTuple_GET_ITEM(row, 0), &f->ts))
        return -1;
    return set_fields(f, Py_NewRef(PyTuple_GET_ITEM(row, 1)), Py_NewRef(PyTuple_GET_ITEM(row, 4)),
                      Py_NewRef(PyTuple_GET_ITEM(row, 2)), Py_NewRef(PyTuple_GET_ITEM(row, 3)));
}

/* Where a slotted class keeps the attributes the framing reads. Resolved once per call from the
 * first message's class; for each message of exactly that class an attribute is then a load at its
 * slot's offset, which is what its member descriptor does, without the type lookup per attribute
 * that was most of pass 1. Any other object goes through PyObject_GetAttr. */
enum { A_HEADERS, A_PROPS, A_STAMP, A_KEY, A_BODY, A_COUNT };

typedef struct {
    PyTypeObject *type; /* NULL: no direct reads */
    Py_ssize_t offset[A_COUNT];
} Slots;

static PyObject *attr_names[A_COUNT];

static void resolve_slots(PyObject *obj, Slots *slots) {
    PyTypeObject *type = Py_TYPE(obj);
    slots->type = NULL;
    if (type->tp_getattro != PyObject_GenericGetAttr)
        return;
    for (int k = 0; k < A_COUNT; k++) {
        PyObject *descr = PyObject_GetAttr((PyObject *)type, attr_names[k]); /* a member descriptor, on the class */
        if (descr == NULL) {
            PyErr_Clear();
            return;
        }
        int direct = Py_TYPE(descr) == &PyMemberDescr_Type &&
                     ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (direct)
            slots->offset[k] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!direct)
            return;
    }
    slots->type = type;
}

/* A new reference to attribute ``k`` of ``obj``. */
static PyObject *get_attr(PyObject *obj, const Slots *slots, int k) {
    if (Py_TYPE(obj) == slots->type) {
        PyObject *value = *(PyObject **)((char *)obj + slots->offset[k]);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, attr_names[k]); /* also raises AttributeError for an empty slot */
}

/* A message's fields: the common case (no headers, and neither content type nor message id in the
 * property flags, bits 15 and 7) straight from its attributes with an empty meta; any other
 * message through ``slow_row(message)``, the broker's own row maker. */
static int message_fields(PyObject *msg, const Slots *slots, PyObject *slow_row, PyObject *empty, Fields *f) {
    PyObject *headers = get_attr(msg, slots, A_HEADERS);
    if (headers == NULL)
        return -1;
    int has_headers = PyObject_IsTrue(headers);
    Py_DECREF(headers);
    PyObject *props = get_attr(msg, slots, A_PROPS);
    if (has_headers < 0 || props == NULL) {
        Py_XDECREF(props);
        return -1;
    }
    const unsigned char *flags = PyBytes_Check(props) ? (const unsigned char *)PyBytes_AS_STRING(props) : NULL;
    if (has_headers || flags == NULL ||
        (PyBytes_GET_SIZE(props) >= 2 && ((flags[0] & 0x80) || (flags[1] & 0x80)))) {
        Py_DECREF(props);
        f->row = PyObject_CallOneArg(slow_row, msg);
        return f->row == NULL ? -1 : row_fields(f->row, f);
    }
    PyObject *stamp = get_attr(msg, slots, A_STAMP);
    if (stamp == NULL) {
        Py_DECREF(props);
        return -1;
    }
    double seconds = PyFloat_AsDouble(stamp);
    Py_DECREF(stamp);
    if ((seconds == -1.0 && PyErr_Occurred()) || !isfinite(seconds * 1000.0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a message's timestamp is not a finite number");
        Py_DECREF(props);
        return -1;
    }
    f->ts = (long long)(seconds * 1000.0); /* int(timestamp * 1000): truncation toward zero */
    return set_fields(f, get_attr(msg, slots, A_KEY), Py_NewRef(empty), props, get_attr(msg, slots, A_BODY));
}

/* Drops what the fields own; ``count`` is every slot allocated (unused ones are zero). */
static void release(Fields *fields, Py_ssize_t count) {
    for (Py_ssize_t k = 0; k < count; k++) {
        Fields *f = &fields[k];
        Py_XDECREF(f->row);
        Py_XDECREF(f->key_obj);
        Py_XDECREF(f->meta);
        Py_XDECREF(f->props);
        Py_XDECREF(f->body);
    }
    PyMem_Free(fields);
}

/* The framing of both entry points. slow_row is NULL for rows, the row maker for messages. */
static PyObject *frame(PyObject *const *args, Py_ssize_t nargs, PyObject *slow_row) {
    Py_ssize_t base = slow_row == NULL ? 1 : 2;
    if (nargs != base + 7) {
        PyErr_SetString(PyExc_TypeError, "wrong number of arguments");
        return NULL;
    }
    long long start_ll, offset, size, since, stamp, seg_max, interval;
    if (as_i64(args[base], &start_ll) || as_i64(args[base + 1], &offset) || as_i64(args[base + 2], &size) ||
        as_i64(args[base + 3], &since) || as_i64(args[base + 4], &stamp) || as_i64(args[base + 5], &seg_max) ||
        as_i64(args[base + 6], &interval))
        return NULL;
    /* a tuple of the items, so that a slow_row (Python code, which may let another thread run)
     * cannot resize what pass 1 walks */
    PyObject *seq = PySequence_Tuple(args[0]);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq), start = start_ll < 0 ? 0 : (Py_ssize_t)start_ll;
    if (start > n)
        start = n;
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    PyObject *empty = PyBytes_FromStringAndSize(NULL, 0), *data = NULL, *result = NULL;
    Py_ssize_t slots = n - start + 1;
    Fields *fields = PyMem_Calloc((size_t)slots, sizeof(Fields));
    unsigned char *index = NULL; /* the index entries, at most one per record */
    size_t index_len = 0;
    Py_ssize_t got = 0, i;
    if (empty == NULL || fields == NULL) {
        if (fields == NULL)
            PyErr_NoMemory();
        goto done;
    }
    /* pass 1: the fields, the lengths, and where the segment fills up */
    Slots layout = {0};
    if (slow_row != NULL && start < n)
        resolve_slots(items[start], &layout);
    size_t total = 0;
    long long end_size = size;
    for (i = start; i < n; i++, got++) {
        if (i > start && end_size >= seg_max)
            break; /* the caller rolls the segment and calls again from here */
        Fields *f = &fields[got];
        if ((slow_row == NULL ? row_fields(items[i], f) : message_fields(items[i], &layout, slow_row, empty, f)))
            goto done_counted;
        Py_ssize_t meta_len = PyBytes_GET_SIZE(f->meta), props_len = PyBytes_GET_SIZE(f->props);
        size_t entry_len = HEAD_SIZE + (size_t)f->key_len + (size_t)meta_len + (size_t)props_len +
                           (size_t)PyBytes_GET_SIZE(f->body);
        if (f->key_len > 0xFFFF || meta_len > 0xFFFF || (uint64_t)entry_len > 0xFFFFFFFFu) {
            PyErr_SetString(struct_error, "a mirror record field is too long for its length field");
            goto done_counted;
        }
        total += FRAME_SIZE + entry_len;
        end_size += (long long)(FRAME_SIZE + entry_len);
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    /* at most one index entry per record: room for all of them now, so pass 2 allocates nothing */
    index = PyMem_Malloc((size_t)got * INDEX_SIZE + 1);
    if (data == NULL || index == NULL) {
        if (index == NULL)
            PyErr_NoMemory();
        goto done_counted;
    }
    /* pass 2: the records, written once into the bytes returned. It touches no Python object but
     * the bytes and strings the rows hold (immutable, and alive until the rows are released), so a
     * large batch is framed without the GIL: the event loop runs on meanwhile. */
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(data);
    PyThreadState *released = total >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t k = 0; k < got; k++) {
        Fields *f = &fields[k];
        long long ts = f->ts < stamp ? stamp : f->ts; /* timestamps never go back along the log */
        stamp = ts;
        if (since >= interval) {
            unsigned char *q = index + index_len;
            put_be(q, (uint64_t)offset, 8);
            put_be(q + 8, (uint64_t)size, 8);
            put_be(q + 16, (uint64_t)ts, 8);
            index_len += INDEX_SIZE;
            since = 0;
        }
        Py_ssize_t meta_len = PyBytes_GET_SIZE(f->meta), props_len = PyBytes_GET_SIZE(f->props);
        Py_ssize_t body_len = PyBytes_GET_SIZE(f->body);
        size_t entry_len = HEAD_SIZE + (size_t)f->key_len + (size_t)meta_len + (size_t)props_len + (size_t)body_len;
        unsigned char *e = p + FRAME_SIZE;
        put_be(e, (uint64_t)offset, 8);
        put_be(e + 8, (uint64_t)ts, 8);
        put_be(e + 16, (uint64_t)f->key_len, 2);
        put_be(e + 18, (uint64_t)meta_len, 2);
        put_be(e + 20, (uint64_t)props_len, 4);
        unsigned char *w = e + HEAD_SIZE;
        memcpy(w, f->key, (size_t)f->key_len);
        w += f->key_len;
        memcpy(w, PyBytes_AS_STRING(f->meta), (size_t)meta_len);
        w += meta_len;
        memcpy(w, PyBytes_AS_STRING(f->props), (size_t)props_len);
        w += props_len;
        memcpy(w, PyBytes_AS_STRING(f->body), (size_t)body_len);
        put_be(p, (uint64_t)entry_len, 4);
        put_be(p + 4, (uint64_t)zcrc32(kind_crc, e, (unsigned int)entry_len), 4);
        p[8] = KIND_ENTRY;
        p += FRAME_SIZE + entry_len;
        size += (long long)(FRAME_SIZE + entry_len);
        since += (long long)(FRAME_SIZE + entry_len);
        offset += 1;
    }
    if (released != NULL)
        PyEval_RestoreThread(released);
    result = Py_BuildValue("(Oy#nLLLL)", data, (const char *)index, (Py_ssize_t)index_len,
                           start + got, offset, size, since, stamp);
done_counted:
    release(fields, slots);
    fields = NULL;
done:
    if (fields != NULL)
        PyMem_Free(fields);
    Py_XDECREF(data);
    Py_XDECREF(empty);
    PyMem_Free(index);
    Py_DECREF(seq);
    return result;
}

/* frame_rows(rows, start, offset, size, since, stamp, seg_max, interval)
 *   -> (data, index, next_row, offset, size, since, stamp); the contract is in mirror_frame.py. */
static PyObject *frame_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return frame(args, nargs, NULL);
}

/* frame_messages(messages, slow_row, start, offset, size, since, stamp, seg_max, interval): the
 * same, from the broker's messages (mirror_frame.py). */
static PyObject *frame_messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2 || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "frame_messages(messages, slow_row, ...): slow_row is a callable");
        return NULL;
    }
    return frame(args, nargs, args[1]);
}

static PyMethodDef methods[] = {
    {"frame_rows", (PyCFunction)(void (*)(void))frame_rows, METH_FASTCALL,
     "Frame mirror rows into log bytes and index entries (mirror_frame.frame_rows)."},
    {"frame_messages", (PyCFunction)(void (*)(void))frame_messages, METH_FASTCALL,
     "Frame broker messages into log bytes and index entries (mirror_frame.frame_messages)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mirror_frame", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__mirror_frame(void) {
    void *libz = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (libz == NULL) {
        PyErr_SetString(PyExc_ImportError, "libz.so.1 not found: the pure-Python framing is used");
        return NULL;
    }
    zcrc32 = (crc32_fn)dlsym(libz, "crc32");
    if (zcrc32 == NULL) {
        PyErr_SetString(PyExc_ImportError, "libz has no crc32: the pure-Python framing is used");
        return NULL;
    }
    const unsigned char kind = KIND_ENTRY;
    kind_crc = zcrc32(zcrc32(0, NULL, 0), &kind, 1);
    const char *names[A_COUNT] = {"headers", "props_raw", "timestamp", "routing_key", "body"};
    for (int k = 0; k < A_COUNT; k++)
        if ((attr_names[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return NULL;
    PyObject *struct_mod = PyImport_ImportModule("struct");
    if (struct_mod == NULL)
        return NULL;
    struct_error = PyObject_GetAttrString(struct_mod, "error");
    Py_DECREF(struct_mod);
    if (struct_error == NULL)
        return NULL;
    return PyModule_Create(&module);
}
