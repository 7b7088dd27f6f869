/* What every message crosses on the wire, in C: the publish frames cut out of a read
 * (``scan_publishes``), the deliver frames built (``encode_deliver``, and ``encode_delivers`` for a
 * consumer's turn of queue entries at once) and the three properties the
 * broker routes and expires on read from the property bytes (``quick_props``).
 *
 * Why: in Python these are about a third of the broker's CPU per message (the frame loop's
 * slicing and unpacking, a decode of the publish, a walk of the properties, a nine-part join per
 * delivery). Here each is one pass over the bytes and one allocation per object made. A publish
 * run's ``Message`` objects and their ``QueueEntry`` objects (``make_messages``, ``make_entries``)
 * and the scan's events are made with their slots written straight, not through the dataclasses'
 * generated ``__init__`` (about half a microsecond each in Python).
 *
 * The pure-Python twins are ``publish_scan.scan_publishes_py`` (which takes none: the frame loop's
 * own path then takes every publish), ``codec.encode_deliver_py`` (and ``encode_delivers_py``),
 * ``properties.quick_props_py`` and the loop in ``RunPlacer.place`` (which makes every message); they are used when this module is not built (no compiler) or
 * HEADRACE_PURE_PYTHON=1 is set, and the tests hold both to the same events and bytes. Anything
 * this code does not take in its stride (a headers table, a second flag word, a body over several
 * frames, any fault) is left to the Python path, which reports faults as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define FRAME_END 0xCE
#define T_METHOD 1
#define T_HEADER 2
#define T_BODY 3
#define BASIC 60
#define DELIVER 60

static PyObject *content_received; /* events.ContentReceived */
static PyObject *basic_publish;    /* methods_basic.BasicPublish */
static PyObject *syntax_error;     /* tables.FrameSyntaxError */
static PyObject *quick_props_py;   /* the Python quick_props, for a second flag word */
static PyObject *zero;             /* a publish's ticket */

static inline uint32_t get_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void put_be(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

/* A slotted dataclass made without its generated __init__: the object allocated and each field's
 * slot written at the offset its member descriptor names. ``setup_slots`` checks that the class's
 * ``__slots__`` are exactly the fields this code fills, in order, so a field added in Python is a
 * loud error at import, not an object half made. */
#define MAX_FIELDS 10
typedef struct {
    PyTypeObject *type;
    Py_ssize_t n;
    Py_ssize_t offsets[MAX_FIELDS];
} slotted;

static slotted content_slots, message_slots, entry_slots;

static int setup_slots(slotted *out, PyObject *cls, const char *const *names, Py_ssize_t n) {
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_SetString(PyExc_TypeError, "setup: a slotted dataclass without __new__ expected");
        return -1;
    }
    PyObject *slots = PyObject_GetAttrString(cls, "__slots__");
    if (slots == NULL)
        return -1;
    int ok = PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == n;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(slots, i);
        ok = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, names[i]) == 0;
        if (!ok)
            break;
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict, name);
        ok = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (ok)
            out->offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    Py_DECREF(slots);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "setup: %R's slots are not the fields _wire.c fills", cls);
        return -1;
    }
    Py_XSETREF(out->type, (PyTypeObject *)Py_NewRef(cls));
    out->n = n;
    return 0;
}

/* A new object of ``s->type`` with its fields set to ``values`` (new references taken). */
static PyObject *make_slotted(const slotted *s, PyObject *const *values) {
    PyObject *obj = s->type->tp_alloc(s->type, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < s->n; i++)
        *(PyObject **)((char *)obj + s->offsets[i]) = Py_NewRef(values[i]);
    return obj;
}

static const char *const content_fields[] = {"channel", "method", "props_raw", "body", "body_size", "headers"};
static const char *const message_fields[] = {"id", "exchange", "routing_key", "props_raw", "body",
                                             "persistent", "priority", "expiration_ms", "headers", "timestamp"};
static const char *const entry_fields_[] = {"seq", "message", "redelivered", "delivery_count", "expires_at",
                                            "owner", "acquired_count"};

/* setup_scan(ContentReceived, BasicPublish): the classes scan_publishes makes (publish_scan.py). */
static PyObject *setup_scan(PyObject *self, PyObject *args) {
    PyObject *cr, *bp;
    if (!PyArg_ParseTuple(args, "OO", &cr, &bp))
        return NULL;
    if (setup_slots(&content_slots, cr, content_fields, 6) < 0)
        return NULL;
    Py_XSETREF(content_received, Py_NewRef(cr));
    Py_XSETREF(basic_publish, Py_NewRef(bp));
    Py_RETURN_NONE;
}

/* setup_props(FrameSyntaxError, quick_props_py): what quick_props raises, and the Python one it
 * hands a property list with a second flag word (properties.py). */
static PyObject *setup_props(PyObject *self, PyObject *args) {
    PyObject *se, *qp;
    if (!PyArg_ParseTuple(args, "OO", &se, &qp))
        return NULL;
    Py_XSETREF(syntax_error, Py_NewRef(se));
    Py_XSETREF(quick_props_py, Py_NewRef(qp));
    Py_RETURN_NONE;
}

/* The property list at p[0:n] is one flag word with no headers table and exactly the values its
 * flags announce (what ``check_properties`` accepts and answers None for). */
static int plain_properties(const unsigned char *p, Py_ssize_t n) {
    if (n < 2)
        return 0;
    unsigned flags = ((unsigned)p[0] << 8) | p[1];
    if (flags & 1 || flags & (1u << 13))
        return 0;
    Py_ssize_t at = 2;
    for (int bit = 15; bit >= 2; bit--) {
        if (!(flags & (1u << bit)))
            continue;
        if (bit == 12 || bit == 11)
            at += 1; /* delivery mode, priority */
        else if (bit == 6)
            at += 8; /* timestamp */
        else {       /* a shortstr */
            if (at >= n)
                return 0;
            at += 1 + p[at];
        }
        if (at > n)
            return 0;
    }
    return at == n;
}

/* scan_publishes(src, pos, end, limit, max_size, open_channels, assembling, events) -> int
 *
 * From ``pos``, every frame triple that is one whole basic.publish (method, content header, one
 * body frame, all on a channel in ``open_channels`` and not in ``assembling``, a plain property
 * list, a body of the announced size, 1 to max_size bytes) becomes a ContentReceived appended to
 * ``events``. Returns where the first frame not taken starts. Consecutive publishes with the same
 * method bytes share one BasicPublish. */
static PyObject *scan_publishes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "scan_publishes takes 8 arguments");
        return NULL;
    }
    if (content_received == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "scan_publishes: setup_scan() not called");
        return NULL;
    }
    PyObject *srcobj = args[0], *open_channels = args[5], *assembling = args[6], *events = args[7];
    if (!PyBytes_Check(srcobj) || !PyAnySet_Check(open_channels) || !PyDict_Check(assembling) ||
        !PyList_Check(events)) {
        PyErr_SetString(PyExc_TypeError, "scan_publishes(bytes, int, int, int, int, set, dict, list)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    long long limit = PyLong_AsLongLong(args[3]);
    long long max_size = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    const unsigned char *src = (const unsigned char *)PyBytes_AS_STRING(srcobj);
    if (end > PyBytes_GET_SIZE(srcobj) || pos < 0)
        end = pos; /* nothing to take */
    const unsigned char *last_method = NULL;
    Py_ssize_t last_len = 0;
    PyObject *method = NULL;
    int last_channel = -1, channel_ok = 0;
    while (end - pos >= 7) {
        const unsigned char *f = src + pos;
        if (f[0] != T_METHOD)
            break;
        unsigned channel = ((unsigned)f[1] << 8) | f[2];
        uint32_t m_size = get_u32(f + 3);
        Py_ssize_t m_start = pos + 7, m_end = m_start + (Py_ssize_t)m_size;
        if ((long long)m_size + 8 > limit || m_end + 7 >= end || src[m_end] != FRAME_END || m_size < 4 ||
            get_u32(src + m_start) != ((BASIC << 16) | 40))
            break;
        if ((int)channel != last_channel) {
            PyObject *key = PyLong_FromLong(channel);
            if (key == NULL)
                goto error;
            int open = PySet_Contains(open_channels, key);
            int busy = open == 1 ? PyDict_Contains(assembling, key) : 0;
            Py_DECREF(key);
            if (open < 0 || busy < 0)
                goto error;
            channel_ok = open == 1 && busy == 0;
            last_channel = (int)channel;
        }
        if (!channel_ok)
            break;
        /* the method's arguments: ticket, exchange, routing key, bits */
        const unsigned char *mp = src + m_start;
        Py_ssize_t at = 6;
        if (at >= (Py_ssize_t)m_size)
            break;
        Py_ssize_t ex_at = at + 1, ex_len = mp[at];
        at = ex_at + ex_len;
        if (at >= (Py_ssize_t)m_size)
            break;
        Py_ssize_t rk_at = at + 1, rk_len = mp[at];
        at = rk_at + rk_len;
        if (at >= (Py_ssize_t)m_size)
            break;
        unsigned bits = mp[at];
        /* the content header frame */
        Py_ssize_t h_pos = m_end + 1;
        const unsigned char *h = src + h_pos;
        uint32_t h_size = get_u32(h + 3);
        Py_ssize_t h_start = h_pos + 7, h_end = h_start + (Py_ssize_t)h_size;
        if (h[0] != T_HEADER || (((unsigned)h[1] << 8) | h[2]) != channel || (long long)h_size + 8 > limit ||
            h_end + 8 > end || src[h_end] != FRAME_END || h_size < 14)
            break;
        const unsigned char *hp = src + h_start;
        if ((((unsigned)hp[0] << 8) | hp[1]) != BASIC || hp[2] || hp[3])
            break;
        uint64_t size = ((uint64_t)get_u32(hp + 4) << 32) | get_u32(hp + 8);
        if (!plain_properties(hp + 12, (Py_ssize_t)h_size - 12))
            break;
        /* the body frame */
        Py_ssize_t b_pos = h_end + 1;
        const unsigned char *b = src + b_pos;
        uint32_t b_size = get_u32(b + 3);
        Py_ssize_t b_start = b_pos + 7, b_end = b_start + (Py_ssize_t)b_size;
        if (b[0] != T_BODY || (((unsigned)b[1] << 8) | b[2]) != channel || (long long)b_size + 8 > limit ||
            b_end >= end || src[b_end] != FRAME_END)
            break;
        if (size != b_size || size == 0 || (long long)size > max_size)
            break;
        /* the method object: shared while the method bytes repeat */
        if (method == NULL || last_len != (Py_ssize_t)m_size || memcmp(last_method, mp, m_size) != 0) {
            PyObject *exchange = PyUnicode_DecodeUTF8((const char *)mp + ex_at, ex_len, NULL);
            if (exchange == NULL) {
                PyErr_Clear();
                break;
            }
            PyObject *key = PyUnicode_DecodeUTF8((const char *)mp + rk_at, rk_len, NULL);
            if (key == NULL) {
                PyErr_Clear();
                Py_DECREF(exchange);
                break;
            }
            PyObject *margs[5] = {zero, exchange, key, bits & 1 ? Py_True : Py_False,
                                  bits & 2 ? Py_True : Py_False};
            PyObject *made = PyObject_Vectorcall(basic_publish, margs, 5, NULL);
            Py_DECREF(exchange);
            Py_DECREF(key);
            if (made == NULL)
                goto error;
            Py_XSETREF(method, made);
            last_method = mp;
            last_len = (Py_ssize_t)m_size;
        }
        PyObject *props = PyBytes_FromStringAndSize((const char *)hp + 12, (Py_ssize_t)h_size - 12);
        PyObject *body = PyBytes_FromStringAndSize((const char *)src + b_start, (Py_ssize_t)b_size);
        PyObject *chan = PyLong_FromLong(channel);
        PyObject *bsize = PyLong_FromUnsignedLongLong(size);
        PyObject *event = NULL;
        if (props && body && chan && bsize) {
            PyObject *eargs[6] = {chan, method, props, body, bsize, Py_None};
            event = make_slotted(&content_slots, eargs);
        }
        Py_XDECREF(props);
        Py_XDECREF(body);
        Py_XDECREF(chan);
        Py_XDECREF(bsize);
        if (event == NULL)
            goto error;
        int failed = PyList_Append(events, event);
        Py_DECREF(event);
        if (failed)
            goto error;
        pos = b_end + 1;
    }
    Py_XDECREF(method);
    return PyLong_FromSsize_t(pos);
error:
    Py_XDECREF(method);
    return NULL;
}

/* A str's UTF-8 as a shortstr's bytes (its length at most 255). */
static const char *short_utf8(PyObject *obj, Py_ssize_t *n, const char *what) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "encode_deliver: %s must be str", what);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8AndSize(obj, n);
    if (s != NULL && *n > 255) {
        PyErr_Format(PyExc_ValueError, "encode_deliver: %s longer than 255 bytes", what);
        return NULL;
    }
    return s;
}

/* One delivery's parts, read off its arguments or its queue entry. */
typedef struct {
    const char *ex, *rk, *props, *body;
    Py_ssize_t ex_n, rk_n, props_n, size, chunk;
    int redelivered;
} deliver_item;

/* Checks the sizes, sets ``chunk`` (the body per frame) and returns the encoded size, or -1. */
static Py_ssize_t deliver_size(Py_ssize_t ct_n, deliver_item *d, long long frame_max) {
    d->chunk = frame_max ? (Py_ssize_t)(frame_max - 8) : (d->size ? d->size : 1);
    if (d->chunk <= 0) {
        PyErr_SetString(PyExc_ValueError, "encode_deliver: frame_max too small");
        return -1;
    }
    if (12 + d->props_n > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_OverflowError, "encode_deliver: properties too long");
        return -1;
    }
    Py_ssize_t frames = d->size ? (d->size + d->chunk - 1) / d->chunk : 0;
    return 8 + 16 + ct_n + d->ex_n + d->rk_n + 8 + 12 + d->props_n + frames * 8 + d->size;
}

/* basic.deliver, its content header and body frames at ``p``; returns the end. */
static unsigned char *write_deliver(unsigned char *p, long channel, const char *ct, Py_ssize_t ct_n,
                                    unsigned long long tag, const deliver_item *d) {
    Py_ssize_t m_size = 16 + ct_n + d->ex_n + d->rk_n, size = d->size, chunk = d->chunk;
    p[0] = T_METHOD;
    put_be(p + 1, (uint64_t)channel, 2);
    put_be(p + 3, (uint64_t)m_size, 4);
    put_be(p + 7, BASIC, 2);
    put_be(p + 9, DELIVER, 2);
    p += 11;
    *p++ = (unsigned char)ct_n;
    memcpy(p, ct, ct_n);
    p += ct_n;
    put_be(p, tag, 8);
    p += 8;
    *p++ = d->redelivered ? 1 : 0;
    *p++ = (unsigned char)d->ex_n;
    memcpy(p, d->ex, d->ex_n);
    p += d->ex_n;
    *p++ = (unsigned char)d->rk_n;
    memcpy(p, d->rk, d->rk_n);
    p += d->rk_n;
    *p++ = FRAME_END;
    /* the content header */
    p[0] = T_HEADER;
    put_be(p + 1, (uint64_t)channel, 2);
    put_be(p + 3, (uint64_t)(12 + d->props_n), 4);
    put_be(p + 7, BASIC, 2);
    put_be(p + 9, 0, 2);
    put_be(p + 11, (uint64_t)size, 8);
    p += 19;
    memcpy(p, d->props, d->props_n);
    p += d->props_n;
    *p++ = FRAME_END;
    /* the body, in frames of at most frame_max */
    for (Py_ssize_t start = 0; start < size; start += chunk) {
        Py_ssize_t n = size - start < chunk ? size - start : chunk;
        p[0] = T_BODY;
        put_be(p + 1, (uint64_t)channel, 2);
        put_be(p + 3, (uint64_t)n, 4);
        p += 7;
        memcpy(p, d->body + start, n);
        p += n;
        *p++ = FRAME_END;
    }
    return p;
}

/* exchange, routing key, properties and body into ``d``; 0, or -1 with an error set. */
static int deliver_fields(deliver_item *d, PyObject *exchange, PyObject *routing_key, PyObject *props,
                          PyObject *body) {
    d->ex = short_utf8(exchange, &d->ex_n, "exchange");
    if (d->ex == NULL)
        return -1;
    d->rk = short_utf8(routing_key, &d->rk_n, "routing key");
    if (d->rk == NULL)
        return -1;
    if (!PyBytes_Check(props) || !PyBytes_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "encode_deliver: properties and body must be bytes");
        return -1;
    }
    d->props_n = PyBytes_GET_SIZE(props);
    d->size = PyBytes_GET_SIZE(body);
    d->props = PyBytes_AS_STRING(props);
    d->body = PyBytes_AS_STRING(body);
    return 0;
}

/* encode_deliver(channel, consumer_tag, delivery_tag, redelivered, exchange, routing_key,
 *                props_raw, body, frame_max) -> bytes: as codec.encode_deliver_py. */
static PyObject *encode_deliver(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "encode_deliver takes 9 arguments");
        return NULL;
    }
    long channel = PyLong_AsLong(args[0]);
    unsigned long long tag = PyLong_AsUnsignedLongLong(args[2]);
    long long frame_max = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (channel < 0 || channel > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "encode_deliver: channel out of range");
        return NULL;
    }
    deliver_item d;
    d.redelivered = PyObject_IsTrue(args[3]);
    if (d.redelivered < 0)
        return NULL;
    Py_ssize_t ct_n;
    const char *ct = short_utf8(args[1], &ct_n, "consumer tag");
    if (ct == NULL || deliver_fields(&d, args[4], args[5], args[6], args[7]) < 0)
        return NULL;
    Py_ssize_t total = deliver_size(ct_n, &d, frame_max);
    if (total < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    write_deliver((unsigned char *)PyBytes_AS_STRING(out), channel, ct, ct_n, tag, &d);
    return out;
}

static PyObject *s_message, *s_redelivered, *s_exchange, *s_routing_key, *s_props_raw, *s_body;

/* The slot ``i`` of an object made as ``s`` describes (borrowed; NULL when unset). */
#define SLOT(obj, s, i) (*(PyObject **)((char *)(obj) + (s).offsets[i]))

/* One queue entry's parts into ``d`` (its message holds what the pointers point into). */
static int entry_fields(deliver_item *d, PyObject *entry) {
    if (entry_slots.type != NULL && Py_IS_TYPE(entry, entry_slots.type)) {
        /* a QueueEntry and its Message (setup_messages): their slots read straight */
        PyObject *redelivered = SLOT(entry, entry_slots, 2), *msg = SLOT(entry, entry_slots, 1);
        if (redelivered != NULL && msg != NULL && Py_IS_TYPE(msg, message_slots.type)) {
            PyObject *ex = SLOT(msg, message_slots, 1), *rk = SLOT(msg, message_slots, 2);
            PyObject *props = SLOT(msg, message_slots, 3), *body = SLOT(msg, message_slots, 4);
            if (ex != NULL && rk != NULL && props != NULL && body != NULL) {
                d->redelivered = PyObject_IsTrue(redelivered);
                if (d->redelivered < 0)
                    return -1;
                return deliver_fields(d, ex, rk, props, body);
            }
        }
    }
    PyObject *redelivered = PyObject_GetAttr(entry, s_redelivered);
    if (redelivered == NULL)
        return -1;
    d->redelivered = PyObject_IsTrue(redelivered);
    Py_DECREF(redelivered);
    if (d->redelivered < 0)
        return -1;
    PyObject *msg = PyObject_GetAttr(entry, s_message);
    if (msg == NULL)
        return -1;
    PyObject *ex = PyObject_GetAttr(msg, s_exchange);
    PyObject *rk = ex ? PyObject_GetAttr(msg, s_routing_key) : NULL;
    PyObject *props = rk ? PyObject_GetAttr(msg, s_props_raw) : NULL;
    PyObject *body = props ? PyObject_GetAttr(msg, s_body) : NULL;
    int result = body ? deliver_fields(d, ex, rk, props, body) : -1;
    /* the message keeps its fields alive as long as the caller's list keeps the entry */
    Py_XDECREF(ex);
    Py_XDECREF(rk);
    Py_XDECREF(props);
    Py_XDECREF(body);
    Py_DECREF(msg);
    return result;
}

/* encode_delivers(channel, consumer_tag, first_tag, entries, frame_max) -> bytes: as
 * codec.encode_delivers_py, a consumer's turn of queue entries in one allocation. */
static PyObject *encode_delivers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_delivers takes 5 arguments");
        return NULL;
    }
    long channel = PyLong_AsLong(args[0]);
    unsigned long long tag = PyLong_AsUnsignedLongLong(args[2]);
    long long frame_max = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (channel < 0 || channel > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "encode_deliver: channel out of range");
        return NULL;
    }
    Py_ssize_t ct_n;
    const char *ct = short_utf8(args[1], &ct_n, "consumer tag");
    if (ct == NULL)
        return NULL;
    PyObject *seq = PySequence_Fast(args[3], "encode_delivers: entries must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    deliver_item *parts = PyMem_Malloc((n ? n : 1) * sizeof(deliver_item));
    PyObject *out = NULL;
    if (parts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (entry_fields(&parts[i], items[i]) < 0)
            goto done;
        Py_ssize_t size = deliver_size(ct_n, &parts[i], frame_max);
        if (size < 0)
            goto done;
        total += size;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++)
        p = write_deliver(p, channel, ct, ct_n, tag + (unsigned long long)i, &parts[i]);
done:
    PyMem_Free(parts);
    Py_DECREF(seq);
    return out;
}

/* quick_props(raw) -> (delivery_mode, priority, expiration, has_headers): as
 * properties.quick_props_py, which it calls for a property list with a second flag word. */
static PyObject *quick_props(PyObject *self, PyObject *raw) {
    if (quick_props_py == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "quick_props: setup_props() not called");
        return NULL;
    }
    if (!PyBytes_Check(raw))
        return PyObject_CallOneArg(quick_props_py, raw);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(raw);
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    if (n < 2 || !((((unsigned)p[0] << 8) | p[1]) & 0xFFFE))
        return PyTuple_Pack(4, Py_None, Py_None, Py_None, Py_False);
    unsigned flags = ((unsigned)p[0] << 8) | p[1];
    if (flags & 1)
        return PyObject_CallOneArg(quick_props_py, raw);
    Py_ssize_t at = 2;
    PyObject *dm = Py_None, *pri = Py_None, *exp = NULL, *result;
    int has_headers = (flags & (1u << 13)) != 0;
    if (flags & 0x8000) {
        if (at >= n)
            goto truncated;
        at += 1 + p[at];
    }
    if (flags & 0x4000) {
        if (at >= n)
            goto truncated;
        at += 1 + p[at];
    }
    if (has_headers) {
        if (at + 4 > n)
            goto truncated;
        at += 4 + (Py_ssize_t)get_u32(p + at);
    }
    if (flags & (1u << 12)) {
        if (at >= n)
            goto truncated;
        dm = PyLong_FromLong(p[at++]);
    }
    if (flags & (1u << 11)) {
        if (at >= n)
            goto truncated_dm;
        pri = PyLong_FromLong(p[at++]);
    }
    if (flags & 0x0100) {
        if (flags & 0x0400) {
            if (at >= n)
                goto truncated_pri;
            at += 1 + p[at];
        }
        if (flags & 0x0200) {
            if (at >= n)
                goto truncated_pri;
            at += 1 + p[at];
        }
        if (at >= n)
            goto truncated_pri;
        Py_ssize_t len = p[at];
        Py_ssize_t start = at + 1;
        if (start + len > n) /* Python's slice stops at the end */
            len = n > start ? n - start : 0;
        exp = PyUnicode_DecodeUTF8((const char *)p + start, len, "replace");
        if (exp == NULL)
            goto fail;
    }
    result = PyTuple_Pack(4, dm, pri, exp ? exp : Py_None, has_headers ? Py_True : Py_False);
    if (dm != Py_None)
        Py_DECREF(dm);
    if (pri != Py_None)
        Py_DECREF(pri);
    Py_XDECREF(exp);
    return result;
truncated_pri:
    if (pri != Py_None)
        Py_DECREF(pri);
truncated_dm:
    if (dm != Py_None)
        Py_DECREF(dm);
truncated:
    PyErr_SetString(syntax_error ? syntax_error : PyExc_ValueError, "truncated content properties");
    return NULL;
fail:
    if (pri != Py_None)
        Py_DECREF(pri);
    if (dm != Py_None)
        Py_DECREF(dm);
    return NULL;
}

/* setup_messages(Message, QueueEntry): the classes make_messages and make_entries make. */
static PyObject *setup_messages(PyObject *self, PyObject *args) {
    PyObject *msg, *entry;
    if (!PyArg_ParseTuple(args, "OO", &msg, &entry))
        return NULL;
    if (setup_slots(&message_slots, msg, message_fields, 10) < 0 ||
        setup_slots(&entry_slots, entry, entry_fields_, 7) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* make_messages(contents, start, first_id, exchange, routing_key, now, out) -> int
 *
 * From ``start`` on, each (props_raw, body) of ``contents`` whose property list has one flag word,
 * no headers table and no expiration becomes Message(first_id + i, exchange, routing_key,
 * props_raw, body, delivery_mode == 2, priority or 0, None, None, now), appended to ``out``.
 * Returns the index of the first one it leaves to the caller's Python path (which reads the rest
 * of the properties and reports their faults), len(contents) when it took them all. */
static PyObject *make_messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "make_messages takes 7 arguments");
        return NULL;
    }
    if (message_slots.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "make_messages: setup_messages() not called");
        return NULL;
    }
    PyObject *contents = args[0], *exchange = args[3], *key = args[4], *now = args[5], *out = args[6];
    if (!PyList_Check(contents) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "make_messages(list, int, int, str, str, float, list)");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long first_id = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (i < 0)
        i = 0;
    for (; i < PyList_GET_SIZE(contents); i++) {
        PyObject *item = PyList_GET_ITEM(contents, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            break;
        PyObject *props = PyTuple_GET_ITEM(item, 0), *body = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_Check(props) || !PyBytes_Check(body))
            break;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(props);
        Py_ssize_t n = PyBytes_GET_SIZE(props);
        int dm = -1, pri = 0;
        unsigned flags = n < 2 ? 0 : ((unsigned)p[0] << 8) | p[1];
        if (flags & 0xFFFE) { /* as quick_props: no property at all reads as none, flag word or not */
            if (flags & 1 || flags & (1u << 13) || flags & 0x0100)
                break; /* a second flag word, a headers table, an expiration: the Python path */
            Py_ssize_t at = 2;
            if (flags & 0x8000) {
                if (at >= n)
                    break;
                at += 1 + p[at];
            }
            if (flags & 0x4000) {
                if (at >= n)
                    break;
                at += 1 + p[at];
            }
            if (flags & (1u << 12)) {
                if (at >= n)
                    break;
                dm = p[at++];
            }
            if (flags & (1u << 11)) {
                if (at >= n)
                    break;
                pri = p[at++];
            }
        }
        PyObject *id = PyLong_FromLongLong(first_id + i);
        PyObject *priority = PyLong_FromLong(pri);
        if (id == NULL || priority == NULL) {
            Py_XDECREF(id);
            Py_XDECREF(priority);
            return NULL;
        }
        PyObject *values[10] = {id, exchange, key, props, body, dm == 2 ? Py_True : Py_False, priority,
                                Py_None, Py_None, now};
        PyObject *message = make_slotted(&message_slots, values);
        Py_DECREF(id);
        Py_DECREF(priority);
        if (message == NULL)
            return NULL;
        int failed = PyList_Append(out, message);
        Py_DECREF(message);
        if (failed)
            return NULL;
    }
    return PyLong_FromSsize_t(i);
}

/* make_entries(first_seq, messages) -> list: QueueEntry(first_seq + i, message) of each, the
 * other fields at their defaults (not redelivered, never delivered, no deadline, no owner). */
static PyObject *make_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "make_entries takes 2 arguments");
        return NULL;
    }
    if (entry_slots.type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "make_entries: setup_messages() not called");
        return NULL;
    }
    long long seq = PyLong_AsLongLong(args[0]);
    if (seq == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seqobj = PySequence_Fast(args[1], "make_entries: messages must be a sequence");
    if (seqobj == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seqobj);
    PyObject **items = PySequence_Fast_ITEMS(seqobj);
    PyObject *out = PyList_New(n);
    PyObject *zero_ = zero;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *s = PyLong_FromLongLong(seq + i);
        if (s == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyObject *values[7] = {s, items[i], Py_False, zero_, Py_None, Py_None, zero_};
        PyObject *entry = make_slotted(&entry_slots, values);
        Py_DECREF(s);
        if (entry == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, entry);
    }
    Py_DECREF(seqobj);
    return out;
}

static PyMethodDef methods[] = {
    {"setup_messages", setup_messages, METH_VARARGS, "setup_messages(Message, QueueEntry)"},
    {"make_messages", (PyCFunction)(void (*)(void))make_messages, METH_FASTCALL,
     "A run's Messages from (props_raw, body) pairs, up to the first the Python path must read."},
    {"make_entries", (PyCFunction)(void (*)(void))make_entries, METH_FASTCALL,
     "QueueEntry(first_seq + i, message) of each message, as a list."},
    {"setup_scan", setup_scan, METH_VARARGS, "setup_scan(ContentReceived, BasicPublish)"},
    {"setup_props", setup_props, METH_VARARGS, "setup_props(FrameSyntaxError, quick_props_py)"},
    {"scan_publishes", (PyCFunction)(void (*)(void))scan_publishes, METH_FASTCALL,
     "Whole basic.publish frame triples from pos on, as ContentReceived events; returns the new pos."},
    {"encode_deliver", (PyCFunction)(void (*)(void))encode_deliver, METH_FASTCALL,
     "basic.deliver, its content header and body frames, as one bytes."},
    {"encode_delivers", (PyCFunction)(void (*)(void))encode_delivers, METH_FASTCALL,
     "encode_deliver of each queue entry of a consumer's turn, tagged from first_tag on, as one bytes."},
    {"quick_props", quick_props, METH_O, "(delivery_mode, priority, expiration, has_headers) of property bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wire(void) {
    zero = PyLong_FromLong(0);
    s_message = PyUnicode_InternFromString("message");
    s_redelivered = PyUnicode_InternFromString("redelivered");
    s_exchange = PyUnicode_InternFromString("exchange");
    s_routing_key = PyUnicode_InternFromString("routing_key");
    s_props_raw = PyUnicode_InternFromString("props_raw");
    s_body = PyUnicode_InternFromString("body");
    if (zero == NULL || s_message == NULL || s_redelivered == NULL || s_exchange == NULL || s_routing_key == NULL
        || s_props_raw == NULL || s_body == NULL)
        return NULL;
    return PyModule_Create(&module);
}
