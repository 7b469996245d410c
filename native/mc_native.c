/*
 * mooncake_core._native: the GIL-free data path of the Transfer Engine.
 *
 * Python decides what to move; these functions move the bytes with the GIL
 * released so that other Python threads (the control plane, other transfers)
 * keep running while a copy or a socket loop is in progress.
 *
 * Contents:
 *   copy(dst, dst_off, src, src_off, n)      bounds-checked memmove on buffers
 *   copy_many(jobs, threads)                 raw-address copies split over pthreads (shm)
 *   buffer_address(obj)                      (address, length, readonly) of a buffer
 *   parse_header(data)                       the wire header parser the server uses
 *   SegTable                                 registered segments + the data-plane server loop
 *   transfer(fd, slices, results, window)    the initiator's pipelined request loop
 *
 * Wire header (40 bytes, little-endian), mirrored by mooncake_core/transfer/protocol.py:
 *   0 magic u32 "MCTE" | 4 version u8 | 5 op u8 | 6 flags u16 | 8 segment u32 |
 *   12 status u32 | 16 request id u64 | 24 offset u64 | 32 length u64
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define MC_MAGIC 0x4554434Du /* bytes "MCTE" read as little-endian u32 */
#define MC_VERSION 1
#define MC_HDR 40
#define MC_MAX_DATA (1ULL << 31) /* larger lengths are malformed, never allocated */
#define IOV_BATCH 64             /* iovecs per sendmsg (well under IOV_MAX) */
#define ACK_BATCH 64             /* acks the server may hold before flushing */
#define RD_BUDGET (64u << 10)    /* unread READ bytes allowed before sending a WRITE */

enum { OP_READ = 1, OP_WRITE = 2, OP_READ_RESP = 3, OP_WRITE_ACK = 4 };
enum { ST_OK = 0, ST_UNKNOWN_SEGMENT = 1, ST_OUT_OF_BOUNDS = 2 };
/* parse_header results */
enum { PH_OK = 0, PH_MAGIC = -1, PH_VERSION = -2, PH_OP = -3, PH_LENGTH = -4 };
/* counters layout: u64 slots in a caller-provided buffer (see protocol.py SERVER_COUNTERS) */
enum {
    C_BYTES_RX = 0, C_BYTES_TX, C_SLICES_RX, C_SLICES_TX, C_MALFORMED, C_BOUNDS, C_UNKNOWN_SEG,
    C_COUNT
};

typedef struct {
    uint32_t magic;
    uint8_t version, op;
    uint16_t flags;
    uint32_t seg, status;
    uint64_t req_id, offset, length;
} hdr_t;

static void put_u16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t get_u16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void encode_hdr(unsigned char *b, const hdr_t *h) {
    put_u32(b, MC_MAGIC);
    b[4] = MC_VERSION;
    b[5] = h->op;
    put_u16(b + 6, h->flags);
    put_u32(b + 8, h->seg);
    put_u32(b + 12, h->status);
    put_u64(b + 16, h->req_id);
    put_u64(b + 24, h->offset);
    put_u64(b + 32, h->length);
}

/* Data-plane header parser: only ops that travel on a data connection are valid. */
static int decode_hdr(const unsigned char *b, hdr_t *h) {
    h->magic = get_u32(b);
    h->version = b[4];
    h->op = b[5];
    h->flags = get_u16(b + 6);
    h->seg = get_u32(b + 8);
    h->status = get_u32(b + 12);
    h->req_id = get_u64(b + 16);
    h->offset = get_u64(b + 24);
    h->length = get_u64(b + 32);
    if (h->magic != MC_MAGIC) return PH_MAGIC;
    if (h->version != MC_VERSION) return PH_VERSION;
    if (h->op < OP_READ || h->op > OP_WRITE_ACK) return PH_OP;
    if (h->length > MC_MAX_DATA) return PH_LENGTH;
    return PH_OK;
}

static const char *ph_reason(int code) {
    switch (code) {
        case PH_MAGIC: return "bad magic";
        case PH_VERSION: return "unsupported version";
        case PH_OP: return "unknown op";
        case PH_LENGTH: return "absurd length";
        default: return "ok";
    }
}

static inline void ctr_add(uint64_t *c, int slot, uint64_t v) {
    if (c) __atomic_fetch_add(&c[slot], v, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- socket helpers */

/* Receive exactly n bytes. Returns 0 on success, 1 on EOF before any byte when
 * eof_ok, else -errno (EAGAIN = the socket's receive timeout; ECONNRESET for EOF). */
static int recv_exact(int fd, char *p, size_t n, int eof_ok) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, p + got, n - got, 0);
        if (r > 0) { got += (size_t)r; continue; }
        if (r == 0) return (got == 0 && eof_ok) ? 1 : -ECONNRESET;
        if (errno == EINTR) continue;
        return -errno;
    }
    return 0;
}

/* Buffered reader: small frames (headers, acks) arrive many per recv() instead of one
 * syscall each; payloads bigger than what is buffered go straight into their
 * destination with recv(), so at most RB bytes per frame are copied twice. */
#define RB 8192
typedef struct { char buf[RB]; size_t off, len; } rbuf_t;

/* Read exactly n bytes. idle_ok: at a frame boundary (nothing buffered), a receive
 * timeout means "idle", not an error: keep waiting (returns 0 with *idle set to 1 so
 * the caller can flush and retry). EOF at a boundary returns 1. Errors: -errno. */
static int rb_read(int fd, rbuf_t *rb, char *dst, size_t n, int boundary) {
    size_t avail = rb->len - rb->off;
    if (avail >= n) {
        memcpy(dst, rb->buf + rb->off, n);
        rb->off += n;
        return 0;
    }
    int at_start = boundary && avail == 0;
    memcpy(dst, rb->buf + rb->off, avail);
    dst += avail;
    n -= avail;
    rb->off = rb->len = 0;
    if (n >= RB / 2) {
        int r = recv_exact(fd, dst, n, 0);
        return r;
    }
    while (rb->len < n) {
        ssize_t r = recv(fd, rb->buf + rb->len, RB - rb->len, 0);
        if (r > 0) { rb->len += (size_t)r; continue; }
        if (r == 0) return (at_start && rb->len == 0) ? 1 : -ECONNRESET;
        if (errno == EINTR) continue;
        if (errno == EAGAIN && at_start && rb->len == 0) continue; /* idle connection */
        return -errno;
    }
    memcpy(dst, rb->buf, n);
    rb->off = n;
    return 0;
}

/* Whether a whole header is already buffered (then no flush is needed before reading). */
static int rb_has(const rbuf_t *rb, size_t n) { return rb->len - rb->off >= n; }

static int drain(int fd, rbuf_t *rb, uint64_t n) {
    char scratch[65536];
    while (n > 0) {
        size_t k = n > sizeof scratch ? sizeof scratch : (size_t)n;
        int r = rb_read(fd, rb, scratch, k, 0);
        if (r) return r;
        n -= k;
    }
    return 0;
}

/* Send an iovec array completely (partial sends resumed). */
static int send_iov(int fd, struct iovec *v, int cnt) {
    while (cnt > 0) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = v;
        m.msg_iovlen = (size_t)(cnt > IOV_BATCH ? IOV_BATCH : cnt);
        ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        size_t left = (size_t)r;
        while (cnt > 0 && left >= v->iov_len) { left -= v->iov_len; v++; cnt--; }
        if (cnt > 0) { v->iov_base = (char *)v->iov_base + left; v->iov_len -= left; }
    }
    return 0;
}

/* ---------------------------------------------------------------- copy */

/* A forward copy whose destination lies 1-31 bytes past its source, modulo 4 KiB, runs
 * about ten times slower (each load waits on a recent store whose address matches in
 * its low 12 bits: "4K aliasing"). glibc's memcpy copies forward from 1 KiB up to its
 * large-copy threshold (512 KiB here), and so does `rep movsb`: a 64 KiB get_into into a
 * malloc'd buffer (16 bytes past a page) from a page-aligned replica measured 2.6 GB/s
 * against 24 GB/s. Backwards, each load is below every store still in flight: the
 * same copy runs at full speed (docs/benchmarks.md, "Copies 1-31 bytes apart"). */
typedef struct { uint64_t w[8]; } block64_t;

static void copy_backward(char *d, const char *s, size_t n) {
    size_t k = n & ~(size_t)63;
    if (n > k) memcpy(d + k, s + k, n - k);
    while (k) {
        block64_t t;
        k -= 64;
        memcpy(&t, s + k, 64);
        memcpy(d + k, &t, 64);
    }
}

/* Copies of at least NT_MIN bytes, and aliasing ones of at least NT_ALIASED_MIN, go
 * backwards with streaming stores: the destination is not read first. 16 and 64 MiB
 * from a cold source measured 11-13 GB/s against memcpy's 8-10; at 1-4 MiB glibc's own
 * large-copy path (from 512 KiB on this host, a few MiB on hosts with more cache) was
 * faster when it applies, so only aliasing copies stream from 1 MiB. A caller that
 * will not read the destination soon lowers the bar (copy_many's stream_min): writes
 * into a store segment of 64 KiB and 1 MiB pieces measured 11.5 -> 15.6 and 11.4 ->
 * 16.4 GB/s streamed (bench/copy_streams.py; docs/benchmarks.md, "Three steps for the
 * batches"). */
#define NT_MIN ((size_t)8 << 20)
#define NT_ALIASED_MIN ((size_t)1 << 20)

#ifdef __SSE2__
static void copy_backward_nt(char *d, const char *s, size_t n) {
    size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* up to the first aligned byte */
    size_t end = head + ((n - head) & ~(size_t)63);
    if (n > end) memcpy(d + end, s + end, n - end);
    for (size_t k = end; k > head;) {
        k -= 64;
        __m128i a = _mm_loadu_si128((const __m128i *)(s + k));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + k + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + k + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + k + 48));
        _mm_stream_si128((__m128i *)(d + k), a);
        _mm_stream_si128((__m128i *)(d + k + 16), b);
        _mm_stream_si128((__m128i *)(d + k + 32), c);
        _mm_stream_si128((__m128i *)(d + k + 48), e);
    }
    _mm_sfence(); /* the streamed stores are visible before the copy counts as done */
    if (head) memcpy(d, s, head);
}
#endif

/* memcpy, or a backward copy where a forward one would alias (ranges must not overlap).
 * Copies of at least `stream_min` bytes stream (NT_MIN unless the caller knows this
 * process will not read the destination soon: a put into a store segment). */
static void copy_range(char *d, const char *s, size_t n, size_t stream_min) {
    size_t dist = (size_t)((uintptr_t)d - (uintptr_t)s) & 4095;
    int aliases = n > 1024 && dist != 0 && dist < 32;
#ifdef __SSE2__
    if (n >= stream_min || (aliases && n >= NT_ALIASED_MIN)) {
        copy_backward_nt(d, s, n);
        return;
    }
#else
    (void)stream_min;
#endif
    if (aliases) copy_backward(d, s, n);
    else memcpy(d, s, n);
}

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
    char *d = (char *)dst.buf + dst_off;
    const char *sp = (const char *)src.buf + src_off;
    if (d + n <= sp || sp + n <= d) copy_range(d, sp, (size_t)n, NT_MIN);
    else memmove(d, sp, (size_t)n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

/* bytes_of(src, off, n) -> a new bytes object holding src[off:off + n]. A large one's
 * pages are first asked for as huge pages: a fresh 64 MiB object faulted in 4 KiB at a
 * time made its copy take 42 ms, against 12 ms with MADV_HUGEPAGE on this host (its
 * transparent huge pages are "madvise" only); docs/benchmarks.md, "A large get's bytes
 * on huge pages". Only the 2 MiB-aligned interior of the object's own memory is
 * advised. */
#define HUGE_BYTES_MIN ((Py_ssize_t)4 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

static PyObject *py_bytes_of(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src;
    Py_ssize_t off, n;
    if (!PyArg_ParseTuple(args, "y*nn", &src, &off, &n)) return NULL;
    if (n < 0 || off < 0 || off > src.len - n) {
        PyBuffer_Release(&src);
        PyErr_Format(PyExc_ValueError, "bytes_of out of bounds: off=%zd n=%zd len=%zd", off, n,
                     src.len);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) {
        PyBuffer_Release(&src);
        return NULL;
    }
    char *d = PyBytes_AS_STRING(out);
    const char *sp = (const char *)src.buf + off;
    Py_BEGIN_ALLOW_THREADS
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_BYTES_MIN) {
        uintptr_t a = ((uintptr_t)d + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        uintptr_t e = ((uintptr_t)d + (uintptr_t)n) & ~(HUGE_PAGE - 1);
        if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE); /* a hint: failure is fine */
    }
#endif
    copy_range(d, sp, (size_t)n, NT_MIN);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    return out;
}

/* One copy job: 3 x u64 (dst address, src address, length). */
typedef struct { uint64_t dst, src, n; } cjob_t;
typedef struct { const cjob_t *jobs; size_t count; uint64_t skip, take; size_t stream_min; } cpart_t;

/* Copy `take` bytes of the job list starting `skip` bytes into it. */
static void run_part(const cpart_t *p) {
    uint64_t skip = p->skip, take = p->take;
    for (size_t i = 0; i < p->count && take > 0; i++) {
        uint64_t n = p->jobs[i].n;
        if (skip >= n) { skip -= n; continue; }
        uint64_t k = n - skip < take ? n - skip : take;
        copy_range((char *)(uintptr_t)p->jobs[i].dst + skip,
                   (const char *)(uintptr_t)p->jobs[i].src + skip, (size_t)k, p->stream_min);
        take -= k;
        skip = 0;
    }
}

static void *part_thread(void *arg) { run_part((const cpart_t *)arg); return NULL; }

/* copy_many(jobs: bytes of packed cjob_t, threads: int, split_min: int, stream_min: int
 * = 0). Raw addresses: the caller (shm transport) has bounds-checked every job against
 * mapped regions. The total is cut into `threads` equal byte ranges when it is at least
 * split_min bytes. Ranges of at least stream_min bytes (0: NT_MIN) stream. */
static PyObject *py_copy_many(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer jb;
    int threads;
    Py_ssize_t split_min, stream_min = 0;
    if (!PyArg_ParseTuple(args, "y*in|n", &jb, &threads, &split_min, &stream_min)) return NULL;
    if (jb.len % (Py_ssize_t)sizeof(cjob_t) != 0 || threads < 1 || threads > 16 || stream_min < 0) {
        PyBuffer_Release(&jb);
        PyErr_Format(PyExc_ValueError,
                     "copy_many: bad job buffer (%zd bytes), threads=%d or stream_min=%zd", jb.len,
                     threads, stream_min);
        return NULL;
    }
    const cjob_t *jobs = (const cjob_t *)jb.buf;
    size_t count = (size_t)jb.len / sizeof(cjob_t);
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) total += jobs[i].n;
    if ((Py_ssize_t)total < split_min) threads = 1;
    Py_BEGIN_ALLOW_THREADS
    cpart_t parts[16];
    pthread_t tids[16];
    int started[16] = {0};
    uint64_t share = (total + (uint64_t)threads - 1) / (uint64_t)threads;
    share = (share + 4095) & ~(uint64_t)4095; /* page-aligned cuts */
    for (int t = 0; t < threads; t++) {
        uint64_t skip = share * (uint64_t)t;
        parts[t].jobs = jobs;
        parts[t].count = count;
        parts[t].skip = skip;
        parts[t].take = skip >= total ? 0 : (total - skip < share ? total - skip : share);
        parts[t].stream_min = stream_min ? (size_t)stream_min : NT_MIN;
    }
    for (int t = 1; t < threads; t++)
        if (parts[t].take) started[t] = pthread_create(&tids[t], NULL, part_thread, &parts[t]) == 0;
    run_part(&parts[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else if (parts[t].take) run_part(&parts[t]); /* thread creation failed: do it here */
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&jb);
    return PyLong_FromUnsignedLongLong(total);
}

static PyObject *py_buffer_address(PyObject *self, PyObject *obj) {
    (void)self;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        if (PyObject_GetBuffer(obj, &b, PyBUF_ND) < 0) return NULL;
    }
    if (!PyBuffer_IsContiguous(&b, 'C')) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "buffer is not C-contiguous");
        return NULL;
    }
    PyObject *r = Py_BuildValue("(KnO)", (unsigned long long)(uintptr_t)b.buf, b.len,
                                b.readonly ? Py_True : Py_False);
    PyBuffer_Release(&b);
    return r;
}

static PyObject *py_parse_header(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
    if (b.len != MC_HDR) {
        PyBuffer_Release(&b);
        PyErr_Format(PyExc_ValueError, "header must be %d bytes, got %zd", MC_HDR, b.len);
        return NULL;
    }
    hdr_t h;
    int rc = decode_hdr((const unsigned char *)b.buf, &h);
    PyBuffer_Release(&b);
    if (rc != PH_OK) {
        PyErr_SetString(PyExc_ValueError, ph_reason(rc));
        return NULL;
    }
    return Py_BuildValue("(iiIIKKK)", (int)h.op, (int)h.flags, h.seg, h.status,
                         (unsigned long long)h.req_id, (unsigned long long)h.offset,
                         (unsigned long long)h.length);
}

/* ---------------------------------------------------------------- SegTable + server */

/* by_addr: also reachable through SEG_BY_ADDR, where a request's offset is an absolute
 * address in this process that must fall, with its length, inside one such segment. */
typedef struct { uint32_t id; char *base; uint64_t len; int by_addr; } seg_t;
#define SEG_BY_ADDR 0xFFFFFFFFu

typedef struct {
    PyObject_HEAD
    pthread_rwlock_t lock; /* readers: serving requests; writer: add/remove */
    seg_t *segs;
    size_t n, cap;
} SegTable;

static int segtable_init(SegTable *self, PyObject *args, PyObject *kw) {
    (void)args; (void)kw;
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    /* Writers (unregister) must not starve behind a stream of served requests. */
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&self->lock, &a);
    pthread_rwlockattr_destroy(&a);
    self->segs = NULL;
    self->n = self->cap = 0;
    return 0;
}

static void segtable_dealloc(SegTable *self) {
    pthread_rwlock_destroy(&self->lock);
    PyMem_RawFree(self->segs);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *segtable_add(SegTable *self, PyObject *args) {
    unsigned int id;
    unsigned long long addr, len;
    int by_addr = 0;
    if (!PyArg_ParseTuple(args, "IKK|p", &id, &addr, &len, &by_addr)) return NULL;
    if (id == SEG_BY_ADDR) {
        PyErr_SetString(PyExc_ValueError, "segment id 0xFFFFFFFF is reserved (by address)");
        return NULL;
    }
    if (addr == 0 && len > 0) {
        PyErr_SetString(PyExc_ValueError, "segment address is NULL");
        return NULL;
    }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    for (size_t i = 0; i < self->n; i++)
        if (self->segs[i].id == id) err = 1;
    if (!err && self->n == self->cap) {
        size_t nc = self->cap ? self->cap * 2 : 8;
        seg_t *ns = PyMem_RawRealloc(self->segs, nc * sizeof(seg_t));
        if (!ns) err = 2;
        else { self->segs = ns; self->cap = nc; }
    }
    if (!err) {
        self->segs[self->n].id = id;
        self->segs[self->n].base = (char *)(uintptr_t)addr;
        self->segs[self->n].len = len;
        self->segs[self->n].by_addr = by_addr;
        self->n++;
    }
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (err == 1) { PyErr_Format(PyExc_ValueError, "segment id %u already registered", id); return NULL; }
    if (err == 2) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* Remove a segment; waits for requests being served on it to finish. */
static PyObject *segtable_remove(SegTable *self, PyObject *args) {
    unsigned int id;
    if (!PyArg_ParseTuple(args, "I", &id)) return NULL;
    int found = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    for (size_t i = 0; i < self->n; i++) {
        if (self->segs[i].id == id) {
            self->segs[i] = self->segs[self->n - 1];
            self->n--;
            found = 1;
            break;
        }
    }
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(found);
}

/* Serve one authenticated data connection until EOF or error, GIL released.
 * serve(fd, counters: writable buffer of >= C_COUNT u64) -> (code, message)
 * code 0: peer closed cleanly; 1: malformed frame (connection must be closed);
 * 2: socket error or timeout. */
static PyObject *segtable_serve(SegTable *self, PyObject *args) {
    int fd;
    Py_buffer cb;
    if (!PyArg_ParseTuple(args, "iw*", &fd, &cb)) return NULL;
    if (cb.len < (Py_ssize_t)(C_COUNT * sizeof(uint64_t)) || ((uintptr_t)cb.buf & 7)) {
        PyBuffer_Release(&cb);
        PyErr_SetString(PyExc_ValueError, "counters buffer too small or misaligned");
        return NULL;
    }
    uint64_t *ctr = (uint64_t *)cb.buf;
    int code = 0, err = 0, ph = 0;
    Py_BEGIN_ALLOW_THREADS
    rbuf_t *rb = malloc(sizeof(rbuf_t));
    /* Acks (and refusals) are held while more requests are already buffered and go out
     * together, in front of the next READ response or before we would block. */
    unsigned char (*acks)[MC_HDR] = malloc((size_t)ACK_BATCH * MC_HDR);
    int nacks = 0;
    struct iovec iov[ACK_BATCH + 2];
    if (!rb || !acks) { code = 2; err = ENOMEM; goto out; }
    rb->off = rb->len = 0;
    for (;;) {
        unsigned char in[MC_HDR];
        int r;
        if (nacks && (!rb_has(rb, MC_HDR) || nacks == ACK_BATCH)) {
            for (int i = 0; i < nacks; i++) { iov[i].iov_base = acks[i]; iov[i].iov_len = MC_HDR; }
            r = send_iov(fd, iov, nacks);
            nacks = 0;
            if (r < 0) { code = 2; err = -r; break; }
        }
        r = rb_read(fd, rb, (char *)in, MC_HDR, 1);
        if (r == 1) { code = 0; break; }
        if (r < 0) { code = 2; err = -r; break; }
        hdr_t h;
        ph = decode_hdr(in, &h);
        if (ph == PH_OK && h.op != OP_READ && h.op != OP_WRITE) ph = PH_OP;
        if (ph != PH_OK) { ctr_add(ctr, C_MALFORMED, 1); code = 1; break; }
        hdr_t resp = h;
        resp.flags = 0;
        resp.status = ST_OK;
        pthread_rwlock_rdlock(&self->lock);
        seg_t *sg = NULL;
        uint64_t off = h.offset;
        if (h.seg == SEG_BY_ADDR) {
            /* The offset is an address here: only a range inside one by_addr segment. */
            for (size_t i = 0; i < self->n; i++) {
                seg_t *s = &self->segs[i];
                uint64_t b = (uint64_t)(uintptr_t)s->base;
                if (s->by_addr && h.offset >= b && h.offset - b <= s->len &&
                    h.length <= s->len - (h.offset - b)) { sg = s; off = h.offset - b; break; }
            }
            if (!sg) { resp.status = ST_OUT_OF_BOUNDS; ctr_add(ctr, C_BOUNDS, 1); }
        } else {
            for (size_t i = 0; i < self->n; i++)
                if (self->segs[i].id == h.seg) { sg = &self->segs[i]; break; }
            if (!sg) { resp.status = ST_UNKNOWN_SEGMENT; ctr_add(ctr, C_UNKNOWN_SEG, 1); }
            else if (h.offset > sg->len || h.length > sg->len - h.offset) {
                resp.status = ST_OUT_OF_BOUNDS;
                ctr_add(ctr, C_BOUNDS, 1);
            }
        }
        if (h.op == OP_READ && resp.status == ST_OK) {
            resp.op = OP_READ_RESP;
            unsigned char out[MC_HDR];
            encode_hdr(out, &resp);
            int k = 0;
            for (int i = 0; i < nacks; i++) { iov[k].iov_base = acks[i]; iov[k].iov_len = MC_HDR; k++; }
            nacks = 0;
            iov[k].iov_base = out; iov[k].iov_len = MC_HDR; k++;
            if (h.length) { iov[k].iov_base = sg->base + off; iov[k].iov_len = (size_t)h.length; k++; }
            r = send_iov(fd, iov, k);
            if (r == 0) {
                ctr_add(ctr, C_BYTES_TX, h.length);
                ctr_add(ctr, C_SLICES_TX, 1);
            }
        } else if (h.op == OP_READ) {
            resp.op = OP_READ_RESP;
            resp.length = 0;
            encode_hdr(acks[nacks++], &resp);
            r = 0;
        } else {
            resp.op = OP_WRITE_ACK;
            resp.length = 0;
            if (resp.status == ST_OK) r = rb_read(fd, rb, sg->base + off, (size_t)h.length, 0);
            else r = drain(fd, rb, h.length); /* keep the stream in sync; length is bounded */
            if (r == 0) {
                if (resp.status == ST_OK) {
                    ctr_add(ctr, C_BYTES_RX, h.length);
                    ctr_add(ctr, C_SLICES_RX, 1);
                }
                encode_hdr(acks[nacks++], &resp);
            }
        }
        pthread_rwlock_unlock(&self->lock);
        if (r < 0) { code = 2; err = -r; break; }
    }
out:
    free(rb);
    free(acks);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&cb);
    if (code == 0) return Py_BuildValue("(is)", 0, "peer closed");
    if (code == 1) return Py_BuildValue("(is)", 1, ph_reason(ph));
    return Py_BuildValue("(is)", 2, err == EAGAIN ? "timed out" : strerror(err));
}

static PyMethodDef segtable_methods[] = {
    {"add", (PyCFunction)segtable_add, METH_VARARGS, "add(id, address, length, by_addr=False): expose memory (by_addr: also by absolute address)."},
    {"remove", (PyCFunction)segtable_remove, METH_VARARGS,
     "remove(id) -> bool: stop serving a segment (waits for in-flight requests)."},
    {"serve", (PyCFunction)segtable_serve, METH_VARARGS,
     "serve(fd, counters) -> (code, message): data-plane loop for one connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SegTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake_core._native.SegTable",
    .tp_basicsize = sizeof(SegTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Registered segments served by the data-plane loop.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)segtable_init,
    .tp_dealloc = (destructor)segtable_dealloc,
    .tp_methods = segtable_methods,
};

/* ---------------------------------------------------------------- initiator loop */

/* One slice on the wire, packed by protocol.py SLICE_STRUCT (40 bytes). */
typedef struct { uint32_t op, seg; uint64_t req_id, remote_off, local_addr, len; } slice_t;

/* transfer(fd, slices, results, window) -> (done, errno, message)
 * Pipelines the slices over one connection: up to `window` requests in flight, then
 * one response read per request sent. results (int32 per slice) receives the remote
 * status (0 = done). On a socket or protocol error, returns how many slices completed
 * (in order) and the error; the caller retries the rest elsewhere. */
static PyObject *py_transfer(PyObject *self, PyObject *args) {
    (void)self;
    int fd, window;
    Py_buffer sb, rb;
    if (!PyArg_ParseTuple(args, "iy*w*i", &fd, &sb, &rb, &window)) return NULL;
    size_t n = (size_t)sb.len / sizeof(slice_t);
    if (sb.len % (Py_ssize_t)sizeof(slice_t) || rb.len < (Py_ssize_t)(n * sizeof(int32_t)) ||
        window < 1) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&rb);
        PyErr_SetString(PyExc_ValueError, "transfer: bad slice/result buffers or window");
        return NULL;
    }
    const slice_t *sl = (const slice_t *)sb.buf;
    int32_t *res = (int32_t *)rb.buf;
    size_t sent = 0, done = 0;
    int err = 0;
    const char *msg = "";
    Py_BEGIN_ALLOW_THREADS
    rbuf_t *in = malloc(sizeof(rbuf_t));
    /* Requests that fit the window go out together: headers (and WRITE payloads) of up
     * to IOV_BATCH/2 requests in one sendmsg. */
    unsigned char (*hdrs)[MC_HDR] = malloc((size_t)(IOV_BATCH / 2) * MC_HDR);
    struct iovec iov[IOV_BATCH];
    if (!in || !hdrs) { err = ENOMEM; msg = "out of memory"; goto out; }
    in->off = in->len = 0;
    /* Bytes of READ responses requested but not read yet. A WRITE is only sent while
     * this is small: otherwise the server may block sending READ data we are not
     * reading while we block sending WRITE data it is not reading (a deadlock once
     * both socket buffers are full). Pure READ or pure WRITE streams are unaffected. */
    uint64_t rd_out = 0;
#define CAN_SEND(i) \
    ((i) < n && (i) - done < (size_t)window && !(sl[i].op == OP_WRITE && rd_out > RD_BUDGET))
    while (done < n) {
        if (CAN_SEND(sent)) {
            int k = 0, m = 0;
            while (CAN_SEND(sent) && m < IOV_BATCH / 2) {
                const slice_t *s = &sl[sent];
                hdr_t h = {MC_MAGIC, MC_VERSION, (uint8_t)s->op, 0, s->seg, 0,
                           s->req_id, s->remote_off, s->len};
                encode_hdr(hdrs[m], &h);
                iov[k].iov_base = hdrs[m]; iov[k].iov_len = MC_HDR; k++;
                if (s->op == OP_WRITE && s->len) {
                    iov[k].iov_base = (void *)(uintptr_t)s->local_addr;
                    iov[k].iov_len = (size_t)s->len;
                    k++;
                }
                if (s->op == OP_READ) rd_out += s->len;
                m++;
                sent++;
            }
            int r = send_iov(fd, iov, k);
            if (r < 0) { err = -r; msg = "send failed"; break; }
            continue;
        }
        const slice_t *s = &sl[done];
        unsigned char hb[MC_HDR];
        int r = rb_read(fd, in, (char *)hb, MC_HDR, 0);
        if (r < 0) { err = -r; msg = "receive failed"; break; }
        hdr_t h;
        if (decode_hdr(hb, &h) != PH_OK || h.req_id != s->req_id ||
            h.op != (s->op == OP_READ ? OP_READ_RESP : OP_WRITE_ACK) ||
            h.length != (h.op == OP_READ_RESP && h.status == ST_OK ? s->len : 0)) {
            err = EPROTO;
            msg = "malformed response";
            break;
        }
        if (h.length) {
            r = rb_read(fd, in, (char *)(uintptr_t)s->local_addr, (size_t)h.length, 0);
            if (r < 0) { err = -r; msg = "receive failed"; break; }
        }
        if (s->op == OP_READ) rd_out -= s->len;
        res[done++] = (int32_t)h.status;
    }
#undef CAN_SEND
out:
    free(in);
    free(hdrs);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&sb);
    PyBuffer_Release(&rb);
    if (err == EAGAIN) return Py_BuildValue("(nis)", (Py_ssize_t)done, err, "timed out");
    if (err) return Py_BuildValue("(nis)", (Py_ssize_t)done, err,
                                  err == EPROTO ? msg : strerror(err));
    return Py_BuildValue("(nis)", (Py_ssize_t)done, 0, "");
}

static PyMethodDef methods[] = {
    {"copy", py_copy, METH_VARARGS,
     "copy(dst, dst_off, src, src_off, n): bounds-checked memmove without the GIL."},
    {"bytes_of", py_bytes_of, METH_VARARGS,
     "bytes_of(src, off, n) -> bytes: a copy of src[off:off + n], a large one on huge pages."},
    {"copy_many", py_copy_many, METH_VARARGS,
     "copy_many(jobs, threads, split_min, stream_min=0) -> bytes copied: raw-address copies "
     "over pthreads."},
    {"buffer_address", py_buffer_address, METH_O,
     "buffer_address(obj) -> (address, length, readonly) of a contiguous buffer."},
    {"parse_header", py_parse_header, METH_VARARGS,
     "parse_header(data) -> (op, flags, segment, status, request_id, offset, length)."},
    {"transfer", py_transfer, METH_VARARGS,
     "transfer(fd, slices, results, window) -> (done, errno, message): pipelined requests."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mooncake_core._native",
    "GIL-free data path of the Transfer Engine.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&SegTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&SegTableType);
    if (PyModule_AddObject(m, "SegTable", (PyObject *)&SegTableType) < 0) {
        Py_DECREF(&SegTableType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "HEADER_SIZE", MC_HDR);
    PyModule_AddIntConstant(m, "COUNTERS", C_COUNT);
    return m;
}
