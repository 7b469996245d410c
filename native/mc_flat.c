/*
 * mooncake_core._flat: a small binary encoding of plain nested values, in C.
 *
 * The audit's writer process is sent every decision the Conductor makes. pickle and
 * marshal cost 20-40 ns an object (pickle's memo, marshal's bytes object per str),
 * which for a decision with 32 candidates (~300 numbers and names) is most of the
 * audit's budget on the decision path. This encoding knows only what a decision is
 * made of, copies each value once into one growing buffer and allocates nothing else.
 *
 *   pack(obj) -> bytes        None, bool, int (-2**63 .. 2**64-1), float, str (any str
 *                             subclass, e.g. a str-valued Enum, is written as its str),
 *                             tuple (and its subclasses, e.g. named tuples), list;
 *                             nested at most MAX_DEPTH deep. Anything else: TypeError.
 *   unpack(data) -> object    the inverse (tuples come back as plain tuples, str
 *                             subclasses as str); ValueError names the first problem
 *                             (truncated, unknown tag, too deep, bad UTF-8, trailing
 *                             bytes) and never allocates more than the input implies.
 *
 * Layout (little-endian): one tag byte per value, then
 *   0 None | 1 False | 2 True | 3 int: i64 | 4 int: u64 | 5 float: f64 |
 *   6 str: u32 length, UTF-8 | 7 tuple: u32 count, values | 8 list: u32 count, values |
 *   9 int: i8 | 10 int: i32 | 11 float +0.0 | 12 str: u8 length, UTF-8 |
 *   13 tuple: u8 count, values | 14 list: u8 count, values |
 *   15 the same tuple as an earlier one: u16 index
 * Every tuple written in full (tags 7, 13) is numbered from 0 in the order its tag is
 * written (before its values); tag 15 repeats one of the first 65,536 by number. The
 * encoder repeats a tuple it has already written (the same object, not an equal one):
 * the holders a decision's plans share. (Repeating strs too saved 2% of the bytes of a
 * decision and cost 6% more time.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#define MAX_DEPTH 32

enum {
    T_NONE, T_FALSE, T_TRUE, T_INT, T_UINT, T_FLOAT, T_STR, T_TUPLE, T_LIST,
    T_I8, T_I32, T_ZERO, T_STR8, T_TUPLE8, T_LIST8, T_REF
};

#define STACK_BUF 8192 /* a decision with 32 candidates takes ~1.4 KiB */
#define MAX_REFS 65536 /* objects tag 15 can name (a u16) */
#define SEEN_SLOTS 256 /* the encoder's table (a power of two; half of it is used) */

typedef struct {
    char *buf; /* the stack buffer until it is outgrown, then the heap */
    size_t len, cap;
    int heap;
    uint32_t numbered; /* tuples written in full so far */
    uint32_t seen_count;
    /* open addressing on the object's address: where it was numbered */
    PyObject *seen_obj[SEEN_SLOTS];
    uint16_t seen_idx[SEEN_SLOTS];
} out_t;

static size_t slot_of(PyObject *v) {
    uintptr_t h = (uintptr_t)v;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 40) & (SEEN_SLOTS - 1);
}

/* The number ``v`` was given when it was written in full, or -1. */
static long seen(const out_t *o, PyObject *v) {
    for (size_t i = slot_of(v); o->seen_obj[i]; i = (i + 1) & (SEEN_SLOTS - 1))
        if (o->seen_obj[i] == v) return o->seen_idx[i];
    return -1;
}

/* Let later copies of ``v`` name it by ``idx`` (if the table has room). It is
 * remembered once its values are written, so a value never names a tuple that holds it
 * (that would need a cycle, through a list; the depth limit ends those). */
static void remember(out_t *o, PyObject *v, uint32_t idx) {
    if (idx >= MAX_REFS || o->seen_count >= SEEN_SLOTS / 2) return; /* short probes */
    size_t i = slot_of(v);
    while (o->seen_obj[i]) i = (i + 1) & (SEEN_SLOTS - 1);
    o->seen_obj[i] = v;
    o->seen_idx[i] = (uint16_t)idx;
    o->seen_count++;
}

static int grow(out_t *o, size_t need) {
    if (o->len + need <= o->cap) return 0;
    size_t cap = o->cap * 2;
    while (cap < o->len + need) cap *= 2;
    char *b = o->heap ? PyMem_Realloc(o->buf, cap) : PyMem_Malloc(cap);
    if (!b) {
        PyErr_NoMemory();
        return -1;
    }
    if (!o->heap) memcpy(b, o->buf, o->len);
    o->buf = b;
    o->cap = cap;
    o->heap = 1;
    return 0;
}

static int put(out_t *o, unsigned char tag, const void *p, size_t n) {
    if (grow(o, 1 + n) < 0) return -1;
    o->buf[o->len++] = (char)tag;
    if (n) memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

/* A length or count: the short tag with a u8 when it fits, else the long one. */
static int put_count(out_t *o, unsigned char tag, unsigned char tag8, Py_ssize_t n) {
    if (n <= UINT8_MAX) {
        uint8_t c8 = (uint8_t)n;
        return put(o, tag8, &c8, 1);
    }
    if ((size_t)n > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "flat.pack: a str or sequence over 2**32-1 long");
        return -1;
    }
    uint32_t c = (uint32_t)n;
    return put(o, tag, &c, 4);
}

static int put_ref(out_t *o, long idx) {
    uint16_t r = (uint16_t)idx;
    return put(o, T_REF, &r, 2);
}

static int enc(out_t *o, PyObject *v, int depth);

static int enc_float(out_t *o, PyObject *v) {
    double d = PyFloat_AS_DOUBLE(v);
    if (d == 0.0 && !signbit(d)) return put(o, T_ZERO, NULL, 0);
    return put(o, T_FLOAT, &d, 8);
}

static int enc_int(out_t *o, PyObject *v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
        if (x >= INT8_MIN && x <= INT8_MAX) {
            int8_t b = (int8_t)x;
            return put(o, T_I8, &b, 1);
        }
        if (x >= INT32_MIN && x <= INT32_MAX) {
            int32_t w = (int32_t)x;
            return put(o, T_I32, &w, 4);
        }
        return put(o, T_INT, &x, 8);
    }
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred())) return put(o, T_UINT, &u, 8);
        PyErr_Clear();
    }
    PyErr_SetString(PyExc_ValueError, "flat.pack: an int outside -2**63 .. 2**64-1");
    return -1;
}

static int enc_str(out_t *o, PyObject *v) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (!s) return -1;
    if (put_count(o, T_STR, T_STR8, n) < 0 || grow(o, (size_t)n) < 0) return -1;
    memcpy(o->buf + o->len, s, (size_t)n);
    o->len += (size_t)n;
    return 0;
}

static int enc_seq(out_t *o, PyObject *v, int depth, int is_tuple) {
    if (depth >= MAX_DEPTH) {
        PyErr_Format(PyExc_ValueError, "flat.pack: nested over %d deep", MAX_DEPTH);
        return -1;
    }
    uint32_t number = 0;
    if (is_tuple) {
        long idx = seen(o, v);
        if (idx >= 0) return put_ref(o, idx);
        number = o->numbered++;
    }
    Py_ssize_t n = is_tuple ? PyTuple_GET_SIZE(v) : PyList_GET_SIZE(v);
    if (is_tuple ? put_count(o, T_TUPLE, T_TUPLE8, n) : put_count(o, T_LIST, T_LIST8, n))
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* No encoding here runs Python code, but a list's size is read again each
         * time rather than trusted. */
        if (!is_tuple && i >= PyList_GET_SIZE(v)) {
            PyErr_SetString(PyExc_RuntimeError, "flat.pack: a list changed size");
            return -1;
        }
        PyObject *item = is_tuple ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i);
        if (enc(o, item, depth + 1) < 0) return -1;
    }
    if (is_tuple) remember(o, v, number);
    return 0;
}

static int enc(out_t *o, PyObject *v, int depth) {
    if (v == Py_None) return put(o, T_NONE, NULL, 0);
    if (v == Py_False) return put(o, T_FALSE, NULL, 0);
    if (v == Py_True) return put(o, T_TRUE, NULL, 0);
    /* The exact types first: one comparison each. */
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyFloat_Type) return enc_float(o, v);
    if (t == &PyLong_Type) return enc_int(o, v);
    if (t == &PyUnicode_Type) return enc_str(o, v);
    if (t == &PyTuple_Type) return enc_seq(o, v, depth, 1);
    if (t == &PyList_Type) return enc_seq(o, v, depth, 0);
    /* Subclasses (named tuples, str enums): type flags first, then float, whose check
     * walks the type's bases. */
    if (PyLong_Check(v)) return enc_int(o, v);
    if (PyUnicode_Check(v)) return enc_str(o, v);
    if (PyTuple_Check(v)) return enc_seq(o, v, depth, 1);
    if (PyList_Check(v)) return enc_seq(o, v, depth, 0);
    if (PyFloat_Check(v)) return enc_float(o, v);
    PyErr_Format(PyExc_TypeError, "flat.pack: cannot encode a %.100s", t->tp_name);
    return -1;
}

static void out_init(out_t *o, char *stack, size_t cap) {
    o->buf = stack;
    o->len = 0;
    o->cap = cap;
    o->heap = 0;
    o->numbered = o->seen_count = 0;
    memset(o->seen_obj, 0, sizeof o->seen_obj);
}

static PyObject *py_pack(PyObject *self, PyObject *obj) {
    (void)self;
    char stack[STACK_BUF];
    out_t o; /* ~11 KiB on the stack: the buffer and the table of tuples written */
    out_init(&o, stack, sizeof stack);
    PyObject *r = NULL;
    if (enc(&o, obj, 0) == 0) r = PyBytes_FromStringAndSize(o.buf, (Py_ssize_t)o.len);
    if (o.heap) PyMem_Free(o.buf);
    return r;
}

/*
 * A ring of packed records in memory two processes share (the audit's writer
 * process reads what the conductor's process writes; one writing process, whose
 * threads the GIL keeps apart, and one reading process).
 *
 *   offset   0  u64 head: bytes ever written (the writer's; stored with release)
 *   offset   8  u64 count: records ever written (the writer's)
 *   offset  64  u64 tail: bytes the reader is done with (the reader's; release)
 *   offset  72  u64 done: records the reader is done with (the reader's)
 *   offset 128  u64 size: bytes of the data area (a multiple of 8, set before use)
 *   offset 136  u64 soft end: 0, or where the writer goes back to the start whenever
 *               what is unread fits before it (set before use)
 *   other words before 256: the two sides' own (ring_get, ring_set)
 *   offset 256  the data area
 *
 * A record at head % size: u32 payload length, u32 kind, the payload, zeros up to a
 * multiple of 8. One that would not fit before the end of the area (or that starts past
 * the soft end, with room at the start) leaves a u32 0xFFFFFFFF there (the reader skips
 * to the start) and is written at the start.
 */
#define RING_HEAD 0
#define RING_COUNT 8
#define RING_TAIL 64
#define RING_DONE 72
#define RING_SIZE 128
#define RING_SOFT 136
#define RING_DATA 256
#define RING_WRAP 0xFFFFFFFFu

typedef struct {
    Py_buffer view;
    unsigned char *base;
    uint64_t size;
} ring_t;

static uint64_t *ring_word(const ring_t *r, size_t at) { return (uint64_t *)(r->base + at); }

/* ``obj``'s buffer, 8-aligned and at least ``min`` bytes; -1 with an exception. */
static int ring_buffer(Py_buffer *v, PyObject *obj, int flags, Py_ssize_t min) {
    if (PyObject_GetBuffer(obj, v, flags) < 0) return -1;
    if (((uintptr_t)v->buf & 7) || v->len < min) {
        PyBuffer_Release(v);
        PyErr_SetString(PyExc_ValueError, "flat ring: the buffer is not 8-aligned or too small");
        return -1;
    }
    return 0;
}

/* The ring in ``obj`` (a writable buffer), its header checked; -1 with an exception. */
static int ring_open(ring_t *r, PyObject *obj) {
    if (ring_buffer(&r->view, obj, PyBUF_WRITABLE, RING_DATA + 8) < 0) return -1;
    r->base = (unsigned char *)r->view.buf;
    r->size = __atomic_load_n(ring_word(r, RING_SIZE), __ATOMIC_ACQUIRE);
    if (r->size < 8 || (r->size & 7) || r->size > (uint64_t)r->view.len - RING_DATA) {
        PyBuffer_Release(&r->view);
        PyErr_Format(PyExc_ValueError, "flat ring: a data area of %llu bytes does not fit",
                     (unsigned long long)r->size);
        return -1;
    }
    return 0;
}

/* A header word: head, count, tail, done, size, or another 8-aligned word before the
 * data area that the two sides agree on. */
static int ring_field(long at) {
    if (at >= 0 && at < RING_DATA && !(at & 7)) return 1;
    PyErr_SetString(PyExc_ValueError, "flat ring: not a header word (8-aligned, below 256)");
    return 0;
}

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* ring_push(ring, kind, obj) -> int: obj packed as one record; returns the records
 * ever written, this one included (its sequence number), or 0: no room. */
static PyObject *py_ring_push(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "ring_push(ring, kind, obj)");
        return NULL;
    }
    long kind = PyLong_AsLong(args[1]);
    if (kind == -1 && PyErr_Occurred()) return NULL;
    if (kind < 0 || kind > (long)UINT32_MAX - 1) {
        PyErr_SetString(PyExc_ValueError, "flat ring: kind out of range");
        return NULL;
    }
    ring_t r;
    if (ring_open(&r, args[0]) < 0) return NULL;
    char stack[STACK_BUF];
    out_t o;
    out_init(&o, stack, sizeof stack);
    PyObject *res = NULL;
    if (enc(&o, args[2], 0) < 0) goto done;
    uint64_t need = 8 + pad8(o.len);
    if (o.len >= RING_WRAP || need > r.size) {
        PyErr_Format(PyExc_ValueError, "flat ring: a record of %zu bytes is larger than the ring",
                     o.len);
        goto done;
    }
    uint64_t head = __atomic_load_n(ring_word(&r, RING_HEAD), __ATOMIC_RELAXED);
    uint64_t tail = __atomic_load_n(ring_word(&r, RING_TAIL), __ATOMIC_ACQUIRE);
    uint64_t at = head % r.size, left = r.size - at, skip = need > left ? left : 0;
    /* Back to the start early, past the soft end, when what is unread and this record
     * fit before here: a reader that keeps up touches only the first soft bytes. */
    uint64_t soft = __atomic_load_n(ring_word(&r, RING_SOFT), __ATOMIC_RELAXED);
    if (!skip && soft && at >= soft && head - tail + need <= at) skip = left;
    if (head - tail + skip + need > r.size) {
        res = PyLong_FromLong(0);
        goto done;
    }
    unsigned char *data = r.base + RING_DATA;
    if (skip) {
        uint32_t wrap = RING_WRAP;
        memcpy(data + at, &wrap, 4);
        at = 0;
    }
    uint32_t h[2] = {(uint32_t)o.len, (uint32_t)kind};
    memcpy(data + at, h, 8);
    memcpy(data + at + 8, o.buf, o.len);
    memset(data + at + 8 + o.len, 0, pad8(o.len) - o.len);
    uint64_t count = __atomic_load_n(ring_word(&r, RING_COUNT), __ATOMIC_RELAXED) + 1;
    __atomic_store_n(ring_word(&r, RING_COUNT), count, __ATOMIC_RELAXED);
    __atomic_store_n(ring_word(&r, RING_HEAD), head + skip + need, __ATOMIC_RELEASE);
    res = PyLong_FromUnsignedLongLong(count);
done:
    if (o.heap) PyMem_Free(o.buf);
    PyBuffer_Release(&r.view);
    return res;
}

/* ring_read(ring, pos) -> (kind, payload bytes, next pos) | None when pos is the head.
 * ValueError: pos or the record there is not one the writer could have made. */
static PyObject *py_ring_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ring_read(ring, pos)");
        return NULL;
    }
    unsigned long long pos = PyLong_AsUnsignedLongLong(args[1]);
    if (pos == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    ring_t r;
    if (ring_open(&r, args[0]) < 0) return NULL;
    PyObject *res = NULL;
    uint64_t head = __atomic_load_n(ring_word(&r, RING_HEAD), __ATOMIC_ACQUIRE);
    const unsigned char *data = r.base + RING_DATA;
    if (pos == head) {
        res = Py_None;
        Py_INCREF(res);
        goto done;
    }
    if (pos > head || head - pos > r.size || (pos & 7)) {
        PyErr_Format(PyExc_ValueError, "flat ring: position %llu is not in the ring (head %llu)",
                     pos, (unsigned long long)head);
        goto done;
    }
    uint64_t at = pos % r.size;
    uint32_t h[2];
    memcpy(h, data + at, 4);
    if (h[0] == RING_WRAP) {
        pos += r.size - at;
        at = 0;
        if (pos >= head) goto corrupt;
        memcpy(h, data, 4);
    }
    memcpy(&h[1], data + at + 4, 4);
    if (r.size - at < 8 || pad8(h[0]) > r.size - at - 8 || pos + 8 + pad8(h[0]) > head) goto corrupt;
    PyObject *payload = PyBytes_FromStringAndSize((const char *)data + at + 8, h[0]);
    if (!payload) goto done;
    res = Py_BuildValue("(kNK)", (unsigned long)h[1], payload,
                        (unsigned long long)(pos + 8 + pad8(h[0])));
    goto done;
corrupt:
    PyErr_Format(PyExc_ValueError, "flat ring: the record at %llu runs past the head %llu",
                 pos, (unsigned long long)head);
done:
    PyBuffer_Release(&r.view);
    return res;
}

/* ring_get(ring, field) -> int: a header field, loaded with acquire. */
static PyObject *py_ring_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "ring_get(ring, field)");
        return NULL;
    }
    long at = PyLong_AsLong(args[1]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    if (!ring_field(at)) return NULL;
    Py_buffer v;
    if (ring_buffer(&v, args[0], PyBUF_SIMPLE, RING_DATA) < 0) return NULL;
    PyObject *res = PyLong_FromUnsignedLongLong(
        __atomic_load_n((uint64_t *)((char *)v.buf + at), __ATOMIC_ACQUIRE));
    PyBuffer_Release(&v);
    return res;
}

/* ring_set(ring, field, value, [field, value, ...]): store header words in order, each
 * with release (checked first: all or none). */
static PyObject *py_ring_set(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 3 || !(nargs & 1) || nargs > 17) {
        PyErr_SetString(PyExc_TypeError, "ring_set(ring, field, value, ...): 1 to 8 pairs");
        return NULL;
    }
    long at[8];
    unsigned long long value[8];
    Py_ssize_t n = (nargs - 1) / 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        at[i] = PyLong_AsLong(args[1 + 2 * i]);
        if (at[i] == -1 && PyErr_Occurred()) return NULL;
        if (!ring_field(at[i])) return NULL;
        value[i] = PyLong_AsUnsignedLongLong(args[2 + 2 * i]);
        if (value[i] == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer v;
    if (ring_buffer(&v, args[0], PyBUF_WRITABLE, RING_DATA) < 0) return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        __atomic_store_n((uint64_t *)((char *)v.buf + at[i]), (uint64_t)value[i],
                         __ATOMIC_RELEASE);
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

#define REFS_STACK 256

typedef struct {
    PyObject *obj; /* a tuple, borrowed: owned by the value being built */
    int done;      /* it may be named only once all its values are in */
} ref_t;

typedef struct {
    const unsigned char *p;
    size_t len, pos;
    uint32_t numbered, cap;
    ref_t *refs;
    int heap;
} in_t;

static int number(in_t *in, PyObject *v) {
    uint32_t n = in->numbered;
    if (n >= MAX_REFS) return 0; /* numbered, but no reference can name it */
    if (n == in->cap) {
        uint32_t cap = in->cap * 2;
        ref_t *r = in->heap ? PyMem_Realloc(in->refs, cap * sizeof *r)
                            : PyMem_Malloc(cap * sizeof *r);
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        if (!in->heap) memcpy(r, in->refs, n * sizeof *r);
        in->refs = r;
        in->cap = cap;
        in->heap = 1;
    }
    in->refs[n].obj = v;
    in->refs[n].done = 0;
    in->numbered = n + 1;
    return 0;
}

static PyObject *bad(const in_t *in, const char *what) {
    PyErr_Format(PyExc_ValueError, "flat.unpack: %s at byte %zu of %zu", what, in->pos, in->len);
    return NULL;
}

static int take(in_t *in, void *dst, size_t n) {
    if (in->len - in->pos < n) return -1;
    memcpy(dst, in->p + in->pos, n);
    in->pos += n;
    return 0;
}

static PyObject *dec(in_t *in, int depth) {
    if (in->pos >= in->len) return bad(in, "truncated");
    unsigned char tag = in->p[in->pos++];
    switch (tag) {
    case T_NONE: Py_RETURN_NONE;
    case T_FALSE: Py_RETURN_FALSE;
    case T_TRUE: Py_RETURN_TRUE;
    case T_INT: {
        long long x;
        if (take(in, &x, 8) < 0) return bad(in, "truncated int");
        return PyLong_FromLongLong(x);
    }
    case T_UINT: {
        unsigned long long u;
        if (take(in, &u, 8) < 0) return bad(in, "truncated int");
        return PyLong_FromUnsignedLongLong(u);
    }
    case T_I8: {
        int8_t b;
        if (take(in, &b, 1) < 0) return bad(in, "truncated int");
        return PyLong_FromLong(b);
    }
    case T_I32: {
        int32_t w;
        if (take(in, &w, 4) < 0) return bad(in, "truncated int");
        return PyLong_FromLong(w);
    }
    case T_FLOAT: {
        double d;
        if (take(in, &d, 8) < 0) return bad(in, "truncated float");
        return PyFloat_FromDouble(d);
    }
    case T_ZERO: return PyFloat_FromDouble(0.0);
    case T_STR:
    case T_STR8: {
        uint32_t n = 0;
        if (take(in, &n, tag == T_STR ? 4 : 1) < 0 || in->len - in->pos < n)
            return bad(in, "truncated str");
        PyObject *s = PyUnicode_DecodeUTF8((const char *)in->p + in->pos, n, "strict");
        if (!s) {
            PyErr_Clear();
            return bad(in, "a str that is not UTF-8");
        }
        in->pos += n;
        return s;
    }
    case T_TUPLE:
    case T_TUPLE8:
    case T_LIST:
    case T_LIST8: {
        uint32_t n = 0;
        int is_tuple = tag == T_TUPLE || tag == T_TUPLE8;
        if (take(in, &n, tag == T_TUPLE || tag == T_LIST ? 4 : 1) < 0)
            return bad(in, "truncated count");
        if (depth >= MAX_DEPTH) return bad(in, "nested too deep");
        /* Each value takes at least one byte: a count larger than what is left is
         * malformed, and refusing it bounds the allocation by the input's size. */
        if (n > in->len - in->pos) return bad(in, "a count larger than the bytes left");
        PyObject *seq = is_tuple ? PyTuple_New(n) : PyList_New(n);
        if (!seq) return NULL;
        uint32_t number_of = in->numbered;
        if (is_tuple && number(in, seq) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++) {
            PyObject *item = dec(in, depth + 1);
            if (!item) {
                Py_DECREF(seq);
                return NULL;
            }
            if (is_tuple)
                PyTuple_SET_ITEM(seq, i, item);
            else
                PyList_SET_ITEM(seq, i, item);
        }
        if (is_tuple && number_of < MAX_REFS) in->refs[number_of].done = 1;
        return seq;
    }
    case T_REF: {
        uint16_t r;
        if (take(in, &r, 2) < 0) return bad(in, "truncated reference");
        if (r >= in->numbered) return bad(in, "a reference to nothing");
        /* A tuple still being filled (one of this value's parents) cannot be named:
         * no value refers to itself. */
        if (!in->refs[r].done) return bad(in, "a reference to an unfinished tuple");
        PyObject *v = in->refs[r].obj;
        Py_INCREF(v);
        return v;
    }
    default:
        in->pos--;
        return bad(in, "unknown tag");
    }
}

static PyObject *py_unpack(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    ref_t stack[REFS_STACK];
    in_t in = {(const unsigned char *)b.buf, (size_t)b.len, 0, 0, REFS_STACK, stack, 0};
    PyObject *r = dec(&in, 0);
    if (in.heap) PyMem_Free(in.refs);
    if (r && in.pos != in.len) {
        Py_DECREF(r);
        r = bad(&in, "trailing bytes");
    }
    PyBuffer_Release(&b);
    return r;
}

static PyMethodDef methods[] = {
    {"pack", py_pack, METH_O, "pack(obj) -> bytes: plain nested values, encoded."},
    {"unpack", py_unpack, METH_O, "unpack(data) -> object: the inverse of pack."},
    {"ring_push", (PyCFunction)(void (*)(void))py_ring_push, METH_FASTCALL,
     "ring_push(ring, kind, obj) -> int: obj packed into the shared ring; its number, 0: full."},
    {"ring_read", (PyCFunction)(void (*)(void))py_ring_read, METH_FASTCALL,
     "ring_read(ring, pos) -> (kind, payload, next) | None: the record at pos."},
    {"ring_get", (PyCFunction)(void (*)(void))py_ring_get, METH_FASTCALL,
     "ring_get(ring, field) -> int: a header field."},
    {"ring_set", (PyCFunction)(void (*)(void))py_ring_set, METH_FASTCALL,
     "ring_set(ring, field, value, ...): store header words in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mooncake_core._flat",
    "A small binary encoding of plain nested values (the audit's wire).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__flat(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH);
    PyModule_AddIntConstant(m, "RING_HEAD", RING_HEAD);
    PyModule_AddIntConstant(m, "RING_COUNT", RING_COUNT);
    PyModule_AddIntConstant(m, "RING_TAIL", RING_TAIL);
    PyModule_AddIntConstant(m, "RING_DONE", RING_DONE);
    PyModule_AddIntConstant(m, "RING_SIZE", RING_SIZE);
    PyModule_AddIntConstant(m, "RING_SOFT", RING_SOFT);
    PyModule_AddIntConstant(m, "RING_DATA", RING_DATA);
    return m;
}
