/* tracekit._walk: the attribution walk of one rank in one compiled pass (docs/attribution.md 4).
 *
 * Plain CPython C API. Polars columns come in through the Arrow C stream interface
 * (``Series.__arrow_c_stream__()``: a PyCapsule; zero-copy, no pyarrow), numpy arrays through the
 * buffer protocol; no numpy or Arrow headers are needed to build. The reference is the numpy
 * path of analyzers/attribution.py + analyzers/buckets.py + analyzers/timeline.py
 * (``TRACEKIT_PURE=1``); tests/test_attribution_compiled.py compares every number.
 *
 * codes(stream, names, values, out): a string column (string, large string, string view or
 *   dictionary-encoded) -> one int8 per row: values[i] where the row equals names[i],
 *   values[-2] for any other string, values[-1] for null.
 * walk_rank(...): membership lookup, launch ends through (rank, correlation), first event of a
 *   launch call, the exclusive walk with the PDL rule, queue delay, launch counts and
 *   cross-thread counts of the instances of one rank; the GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "pythread.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "arrow_c.h" /* the Arrow C data and stream interfaces */
#include "buf.h"     /* Buf, get_buf, rel_buf */
#include "intern.h"  /* StrTable: the column interner's table */

/* bucket codes: positions in tracekit.buckets.BUCKETS, given once by configure() (from
 * tracekit.buckets.WALK_CODES) before the first walk_rank: work codes 0..n_work-1 (memory among
 * them), communication n_work..n_event-1, launch overhead and idle elsewhere below nb. */
#define MAX_CODES 64
typedef struct {
    int nb, n_work, memory, n_event, launch, idle;
    int ok;
} BucketCodes;
static BucketCodes BC;
#define UNKNOWN_LAUNCH INT64_MIN

/* kind codes (the values analyzers/attribution.py passes to codes() for the kind column) */
#define K_OTHER 0
#define K_KERNEL 1
#define K_MEMCPY 2
#define K_MEMSET 3
#define K_LAUNCH 4

/* ---- columns ----------------------------------------------------------------------------- */

enum { C_NULL, C_I8, C_I16, C_I32, C_I64, C_U8, C_U16, C_U32, C_U64, C_BOOL, C_STR, C_LSTR, C_VIEW };

typedef struct {
    struct ArrowSchema schema;
    struct ArrowArray arr;
    int type;
    int64_t n, off;
    const uint8_t *valid;
    const void *vals;
    const void *offsets; /* C_STR / C_LSTR */
    const char *data;    /* C_STR / C_LSTR */
    const char **vbufs;  /* C_VIEW data buffers */
    int64_t n_vbufs;
    /* dictionary-encoded: indices in vals (type), strings in dict */
    int is_dict;
    int dict_type;
    const struct ArrowArray *dict;
} Col;

static int type_of(const char *f, int *out) {
    if (!f || !f[0]) return -1;
    if (f[1] == 0) {
        switch (f[0]) {
        case 'n': *out = C_NULL; return 0;
        case 'c': *out = C_I8; return 0;
        case 's': *out = C_I16; return 0;
        case 'i': *out = C_I32; return 0;
        case 'l': *out = C_I64; return 0;
        case 'C': *out = C_U8; return 0;
        case 'S': *out = C_U16; return 0;
        case 'I': *out = C_U32; return 0;
        case 'L': *out = C_U64; return 0;
        case 'b': *out = C_BOOL; return 0;
        case 'u': case 'z': *out = C_STR; return 0;
        case 'U': case 'Z': *out = C_LSTR; return 0;
        default: return -1;
        }
    }
    if (f[0] == 'v' && (f[1] == 'u' || f[1] == 'z') && f[2] == 0) {
        *out = C_VIEW;
        return 0;
    }
    return -1;
}

static void col_free(Col *c) {
    if (c->arr.release) c->arr.release(&c->arr);
    if (c->schema.release) c->schema.release(&c->schema);
    c->arr.release = NULL;
    c->schema.release = NULL;
}

/* lay out the buffers of array a (type t) into c */
static int col_layout(Col *c, const struct ArrowArray *a, int t, const char *what) {
    c->n = a->length;
    c->off = a->offset;
    c->valid = (a->n_buffers > 0 && a->null_count != 0) ? (const uint8_t *)a->buffers[0] : NULL;
    if (t == C_NULL) {
        c->valid = NULL;
        return 0;
    }
    if (t == C_VIEW) {
        if (a->n_buffers < 2) goto bad;
        c->vals = a->buffers[1];
        c->n_vbufs = a->n_buffers - 3;
        c->vbufs = (const char **)(a->buffers + 2);
        return 0;
    }
    if (t == C_STR || t == C_LSTR) {
        if (a->n_buffers < 3) goto bad;
        c->offsets = a->buffers[1];
        c->data = (const char *)a->buffers[2];
        return 0;
    }
    if (a->n_buffers < 2) goto bad;
    c->vals = a->buffers[1];
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "%s: unexpected Arrow buffer layout", what);
    return -1;
}

/* import a column from an "arrow_array_stream" capsule (one chunk) */
static int col_import(PyObject *cap, Col *c, const char *what) {
    struct ArrowArrayStream *st;
    struct ArrowArray more;
    int t;
    memset(c, 0, sizeof(*c));
    if (!PyCapsule_IsValid(cap, "arrow_array_stream")) {
        PyErr_Format(PyExc_TypeError, "%s: expected an arrow_array_stream capsule", what);
        return -1;
    }
    st = (struct ArrowArrayStream *)PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (!st || !st->get_schema || st->get_schema(st, &c->schema) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: cannot read the Arrow schema", what);
        return -1;
    }
    if (st->get_next(st, &c->arr) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: cannot read the Arrow array", what);
        return -1;
    }
    if (c->arr.release) {
        memset(&more, 0, sizeof(more));
        if (st->get_next(st, &more) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: cannot read the Arrow stream", what);
            return -1;
        }
        if (more.release) {
            int64_t len = more.length;
            more.release(&more);
            if (len > 0) {
                PyErr_Format(PyExc_ValueError, "%s: more than one chunk (rechunk first)", what);
                return -1;
            }
        }
    }
    if (type_of(c->schema.format, &t) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: unsupported Arrow format %s", what, c->schema.format ? c->schema.format : "?");
        return -1;
    }
    if (!c->arr.release) { /* no chunk: an empty column */
        c->type = t;
        return 0;
    }
    if (c->schema.dictionary) {
        int dt;
        if (!c->arr.dictionary || type_of(c->schema.dictionary->format, &dt) < 0 ||
            !(dt == C_STR || dt == C_LSTR || dt == C_VIEW) || !(t >= C_I8 && t <= C_U64)) {
            PyErr_Format(PyExc_ValueError, "%s: unsupported dictionary column", what);
            return -1;
        }
        c->is_dict = 1;
        c->dict_type = dt;
        c->dict = c->arr.dictionary;
    }
    c->type = t;
    return col_layout(c, &c->arr, t, what);
}

static inline int bit(const uint8_t *b, int64_t j) { return (b[j >> 3] >> (j & 7)) & 1; }

static inline int col_valid(const Col *c, int64_t i) {
    if (c->type == C_NULL) return 0;
    return !c->valid || bit(c->valid, c->off + i);
}

/* integer value of row i (no validity check) */
static inline int64_t col_raw(const Col *c, int64_t i) {
    int64_t j = c->off + i;
    switch (c->type) {
    case C_I64: return ((const int64_t *)c->vals)[j];
    case C_I32: return ((const int32_t *)c->vals)[j];
    case C_I16: return ((const int16_t *)c->vals)[j];
    case C_I8: return ((const int8_t *)c->vals)[j];
    case C_U64: return (int64_t)((const uint64_t *)c->vals)[j];
    case C_U32: return ((const uint32_t *)c->vals)[j];
    case C_U16: return ((const uint16_t *)c->vals)[j];
    case C_U8: return ((const uint8_t *)c->vals)[j];
    case C_BOOL: return bit((const uint8_t *)c->vals, j);
    default: return 0;
    }
}

static inline int64_t col_i64(const Col *c, int64_t i, int64_t fill) {
    return col_valid(c, i) ? col_raw(c, i) : fill;
}


/* the bytes of string row i of array a laid out in c (type t) */
static inline const char *str_at(const Col *c, int t, int64_t j, int64_t *len) {
    if (t == C_VIEW) {
        const uint8_t *v = (const uint8_t *)c->vals + 16 * j;
        int32_t l;
        memcpy(&l, v, 4);
        *len = l;
        if (l <= 12) return (const char *)v + 4;
        {
            int32_t bi, bo;
            memcpy(&bi, v + 8, 4);
            memcpy(&bo, v + 12, 4);
            return c->vbufs[bi] + bo;
        }
    }
    if (t == C_STR) {
        const int32_t *o = (const int32_t *)c->offsets;
        *len = o[j + 1] - o[j];
        return c->data + o[j];
    }
    {
        const int64_t *o = (const int64_t *)c->offsets;
        *len = o[j + 1] - o[j];
        return c->data + o[j];
    }
}

typedef struct {
    const char **s;
    Py_ssize_t *len;
    Py_ssize_t n;
    const int8_t *val; /* n + 2: then other, null */
} Names;

static inline int8_t name_code(const Names *nm, const char *p, int64_t len) {
    for (Py_ssize_t k = 0; k < nm->n; k++)
        if (nm->len[k] == len && memcmp(nm->s[k], p, (size_t)len) == 0) return nm->val[k];
    return nm->val[nm->n];
}

/* string views: each name as the 16-byte view image of its length and first bytes, with a
 * mask of the bytes that hold the string (padding of inline views is not relied on) */
typedef struct {
    uint64_t t0, t1, m0, m1;
    int inl;
} ViewKey;

static void view_keys(const Names *nm, ViewKey *vk) {
    for (Py_ssize_t k = 0; k < nm->n; k++) {
        uint8_t img[16], msk[16];
        int32_t l = (int32_t)nm->len[k];
        Py_ssize_t nb = nm->len[k] <= 12 ? nm->len[k] : 4;
        memset(img, 0, 16);
        memset(msk, 0, 16);
        memcpy(img, &l, 4);
        memset(msk, 0xFF, 4);
        memcpy(img + 4, nm->s[k], (size_t)nb);
        memset(msk + 4, 0xFF, (size_t)nb);
        memcpy(&vk[k].t0, img, 8);
        memcpy(&vk[k].t1, img + 8, 8);
        memcpy(&vk[k].m0, msk, 8);
        memcpy(&vk[k].m1, msk + 8, 8);
        vk[k].inl = nm->len[k] <= 12;
    }
}

/* codes of rows [0, n) of a string view column: word compares, the last two views remembered
 * (kernel and launch rows alternate in eager phases) */
static void codes_of_views(const Col *c, int64_t n, const Names *nm, const ViewKey *vk, int8_t *out, const int8_t *mask,
                           int8_t want) {
    int8_t null_v = nm->val[nm->n + 1], other = nm->val[nm->n], ca = 0, cb = 0;
    uint64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    int have_a = 0, have_b = 0;
    const uint8_t *views = (const uint8_t *)c->vals;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = c->off + i;
        uint64_t v0, v1;
        int8_t code = other;
        if ((mask && mask[i] != want) || (c->valid && !bit(c->valid, j))) {
            out[i] = null_v;
            continue;
        }
        memcpy(&v0, views + 16 * j, 8);
        memcpy(&v1, views + 16 * j + 8, 8);
        if (have_a && v0 == a0 && v1 == a1) { /* the same view: the same string */
            out[i] = ca;
            continue;
        }
        if (have_b && v0 == b0 && v1 == b1) {
            int8_t hit = cb;
            out[i] = hit;
            b0 = a0, b1 = a1, cb = ca; /* swap: the other remembered view becomes b */
            a0 = v0, a1 = v1, ca = hit;
            continue;
        }
        for (Py_ssize_t k = 0; k < nm->n; k++) {
            if ((v0 ^ vk[k].t0) & vk[k].m0) continue;
            if (vk[k].inl) {
                if ((v1 ^ vk[k].t1) & vk[k].m1) continue;
            } else {
                int64_t len;
                const char *p = str_at(c, C_VIEW, j, &len);
                if (memcmp(p, nm->s[k], (size_t)len) != 0) continue;
            }
            code = nm->val[k];
            break;
        }
        b0 = a0, b1 = a1, cb = ca, have_b = have_a;
        a0 = v0, a1 = v1, ca = code, have_a = 1;
        out[i] = code;
    }
}

/* codes of rows [0, n) of string layout c (type t); null rows -> val[n + 1] */
static void codes_of(const Col *c, int t, int64_t n, const Names *nm, int8_t *out, const int8_t *mask, int8_t want) {
    int8_t null_v = nm->val[nm->n + 1];
    if (t == C_VIEW) {
        ViewKey vk[64];
        if (nm->n <= 64) {
            view_keys(nm, vk);
            codes_of_views(c, n, nm, vk, out, mask, want);
            return;
        }
    }
    const char *last = NULL;
    int64_t last_len = -1;
    int8_t last_code = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = c->off + i, len;
        const char *p;
        if ((mask && mask[i] != want) || (c->valid && !bit(c->valid, j))) {
            out[i] = null_v;
            continue;
        }
        p = str_at(c, t, j, &len);
        if (len == last_len && memcmp(p, last, (size_t)len) == 0) {
            out[i] = last_code;
            continue;
        }
        last_code = name_code(nm, p, len);
        last = p;
        last_len = len;
        out[i] = last_code;
    }
}

/* codes(stream, names, values, out[, mask, want]): rows where mask != want are given the null
 * value without being read */
static PyObject *py_codes(PyObject *self, PyObject *args) {
    PyObject *cap, *names, *ovals, *oout, *omask = Py_None;
    int want = 0;
    const int8_t *mk = NULL;
    Col c;
    Buf vals = {0}, out = {0}, mbuf = {0};
    Names nm = {0};
    int8_t *dcodes = NULL;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!OO|Oi", &cap, &PyTuple_Type, &names, &ovals, &oout, &omask, &want)) return NULL;
    memset(&c, 0, sizeof(c));
    if (col_import(cap, &c, "codes") < 0) goto done;
    if (get_buf(ovals, &vals, 1, 0, "values") < 0 || get_buf(oout, &out, 1, 1, "out") < 0) goto done;
    if (omask != Py_None) {
        if (get_buf(omask, &mbuf, 1, 0, "mask") < 0) goto done;
        if (mbuf.view.len != out.view.len) {
            PyErr_SetString(PyExc_ValueError, "codes: mask and out differ in length");
            goto done;
        }
        mk = (const int8_t *)mbuf.view.buf;
    }
    nm.n = PyTuple_GET_SIZE(names);
    if (vals.view.len != nm.n + 2) {
        PyErr_SetString(PyExc_ValueError, "codes: values must have len(names) + 2 items");
        goto done;
    }
    if (out.view.len != c.n) {
        PyErr_Format(PyExc_ValueError, "codes: out has %zd items for %lld rows", out.view.len, (long long)c.n);
        goto done;
    }
    nm.s = (const char **)calloc((size_t)nm.n + 1, sizeof(char *));
    nm.len = (Py_ssize_t *)calloc((size_t)nm.n + 1, sizeof(Py_ssize_t));
    if (!nm.s || !nm.len) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nm.n; k++) {
        nm.s[k] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, k), &nm.len[k]);
        if (!nm.s[k]) goto done;
    }
    nm.val = (const int8_t *)vals.view.buf;
    if (c.n == 0) {
        ret = Py_NewRef(Py_None);
        goto done;
    }
    if (c.type == C_NULL) {
        memset(out.view.buf, nm.val[nm.n + 1], (size_t)c.n);
    } else if (c.is_dict) {
        Col d;
        int64_t nd = c.dict->length;
        memset(&d, 0, sizeof(d));
        if (col_layout(&d, c.dict, c.dict_type, "codes dictionary") < 0) goto done;
        dcodes = (int8_t *)malloc((size_t)nd + 1);
        if (!dcodes) {
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        codes_of(&d, c.dict_type, nd, &nm, dcodes, NULL, 0);
        {
            int8_t *o = (int8_t *)out.view.buf;
            int8_t null_v = nm.val[nm.n + 1];
            for (int64_t i = 0; i < c.n; i++) {
                if ((mk && mk[i] != (int8_t)want) || !col_valid(&c, i)) {
                    o[i] = null_v;
                } else {
                    int64_t k = col_raw(&c, i);
                    o[i] = (k >= 0 && k < nd) ? dcodes[k] : null_v;
                }
            }
        }
        Py_END_ALLOW_THREADS
    } else if (c.type == C_STR || c.type == C_LSTR || c.type == C_VIEW) {
        Py_BEGIN_ALLOW_THREADS
        codes_of(&c, c.type, c.n, &nm, (int8_t *)out.view.buf, mk, (int8_t)want);
        Py_END_ALLOW_THREADS
    } else {
        PyErr_SetString(PyExc_ValueError, "codes: not a string column");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    free(dcodes);
    free((void *)nm.s);
    free(nm.len);
    rel_buf(&vals);
    rel_buf(&out);
    rel_buf(&mbuf);
    col_free(&c);
    return ret;
}

/* interning: strings -> 1 + their index in order of first appearance (a null row counts as the
 * string null_as, or has code 0 where null_as is NULL); the view of the last row remembered (collective rows repeat their group / op),
 * and for string-view columns a small direct-mapped cache view -> code in front of the string hash:
 * polars shares one copy of the bytes between the rows of one value (a parquet dictionary), so
 * equal views are common and an equal view is the same string (no byte hashed). */
#define VIEW_CACHE 4096
typedef struct {
    StrTable st; /* the distinct strings (pointers into the column's buffers); code = index + 1 */
    int64_t last;
    uint64_t l0, l1;
    int have_last;
    uint64_t *vc; /* VIEW_CACHE entries of (view word 0, view word 1, code; 0 = empty) */
    const char *null_as;
    int64_t null_len;
} Interner;

static int interner_init(Interner *I, const char *null_as, int64_t null_len) {
    memset(I, 0, sizeof(*I));
    I->null_as = null_as;
    I->null_len = null_len;
    return 0;
}

static void interner_free(Interner *I) {
    strtable_free(&I->st);
    free(I->vc);
    I->vc = NULL;
}

static int64_t intern_str(Interner *I, const char *p, int64_t len);

/* the code of row j (relative to the column's offset) of string column c; -1: no memory */
static int64_t intern_row(Interner *I, const Col *c, int64_t j) {
    const char *p;
    int64_t len;
    int valid = col_valid(c, j);
    if (c->type == C_VIEW && valid) { /* the same view as the last row: the same string */
        uint64_t v0, v1, *e;
        int64_t code;
        const uint8_t *v = (const uint8_t *)c->vals + 16 * (c->off + j);
        memcpy(&v0, v, 8);
        memcpy(&v1, v + 8, 8);
        if (I->have_last && v0 == I->l0 && v1 == I->l1) return I->last;
        I->l0 = v0, I->l1 = v1, I->have_last = 1;
        if (!I->vc && !(I->vc = (uint64_t *)calloc(3 * VIEW_CACHE, sizeof(uint64_t)))) return -1;
        {
            uint64_t h = (v0 ^ (v1 * 0x9e3779b97f4a7c15ULL)) * 0xbf58476d1ce4e5b9ULL;
            e = I->vc + 3 * ((h >> 40) & (VIEW_CACHE - 1));
        }
        if (e[2] && e[0] == v0 && e[1] == v1) return I->last = (int64_t)e[2];
        p = str_at(c, c->type, c->off + j, &len);
        if ((code = intern_str(I, p, len)) < 0) return -1;
        e[0] = v0, e[1] = v1, e[2] = (uint64_t)code;
        return code;
    }
    if (!valid && !I->null_as) return 0; /* nulls not interned: code 0 */
    I->have_last = 0;
    if (!valid) {
        p = I->null_as;
        len = I->null_len;
    } else {
        p = str_at(c, c->type, c->off + j, &len);
    }
    return intern_str(I, p, len);
}

/* the code of the string (p, len): 1 + its index in order of first appearance; -1: no memory */
static int64_t intern_str(Interner *I, const char *p, int64_t len) {
    int64_t k = strtable_intern(&I->st, p, len, -1);
    return k < 0 ? -1 : (I->last = k + 1);
}

/* the distinct strings of an interner, in code order (a new list; needs the GIL) */
static PyObject *interner_list(const Interner *I) {
    PyObject *lst = PyList_New((Py_ssize_t)I->st.n);
    if (!lst) return NULL;
    for (int64_t q = 0; q < I->st.n; q++) {
        PyObject *u = PyUnicode_DecodeUTF8(I->st.items[q].p, (Py_ssize_t)I->st.items[q].len, "surrogateescape");
        if (!u) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, q, u);
    }
    return lst;
}

static int is_string_col(const Col *c) {
    return !c->is_dict && (c->type == C_STR || c->type == C_LSTR || c->type == C_VIEW || c->type == C_NULL);
}

/* intern(stream, rows, null_as, out) -> distinct strings: out[i] = the code of row rows[i]
 * (null_as None: a null row has code 0 and is not one of the strings) */
static PyObject *py_intern(PyObject *self, PyObject *args) {
    PyObject *cap, *orows, *oout, *onull, *ret = NULL;
    const char *null_as = NULL;
    Py_ssize_t null_len = 0;
    Col c;
    Buf rows = {0}, out = {0};
    Interner I;
    (void)self;
    memset(&I, 0, sizeof(I));
    if (!PyArg_ParseTuple(args, "OOOO", &cap, &orows, &onull, &oout)) return NULL;
    if (onull != Py_None && !(null_as = PyUnicode_AsUTF8AndSize(onull, &null_len))) return NULL;
    memset(&c, 0, sizeof(c));
    if (col_import(cap, &c, "intern") < 0) goto done;
    if (get_buf(orows, &rows, 8, 0, "rows") < 0 || get_buf(oout, &out, 8, 1, "out") < 0) goto done;
    if (rows.view.len != out.view.len) {
        PyErr_SetString(PyExc_ValueError, "intern: rows and out differ in length");
        goto done;
    }
    if (!is_string_col(&c)) {
        PyErr_SetString(PyExc_ValueError, "intern: not a plain string column");
        goto done;
    }
    if (interner_init(&I, null_as, null_len) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const int64_t *r = (const int64_t *)rows.view.buf;
        int64_t *o = (int64_t *)out.view.buf, nr = rows.view.len / 8;
        for (int64_t i = 0; i < nr; i++) {
            if (r[i] < 0 || r[i] >= c.n) {
                PyErr_SetString(PyExc_IndexError, "intern: row out of range");
                goto done;
            }
            if ((o[i] = intern_row(&I, &c, r[i])) < 0) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }
    ret = interner_list(&I);
done:
    interner_free(&I);
    rel_buf(&rows);
    rel_buf(&out);
    col_free(&c);
    return ret;
}

/* ---- work memory: one block per rank, kept in a small pool between calls ------------------ */

/* Fresh memory costs a page fault per 4 KiB (kernel time that dominated the first version):
 * the blocks of finished ranks are reused by the next ones, and trim() (called at the end of
 * an attribution) frees them. */
#define POOL 16
static struct {
    char *p;
    size_t size;
    int busy;
} pool[POOL];
static PyThread_type_lock pool_lock;

/* a work block; a large one aligned to 2 MiB and marked for transparent huge pages where the
 * kernel offers them on request (one fault per 2 MiB instead of per 4 KiB: the faults of the
 * blocks were about a third of the CPU time of an attribution) */
#define HUGE_BLOCK ((size_t)2 << 20)
static char *block_alloc(size_t need) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (need >= 2 * HUGE_BLOCK) {
        void *p = NULL;
        size_t size = (need + HUGE_BLOCK - 1) & ~(HUGE_BLOCK - 1);
        if (posix_memalign(&p, HUGE_BLOCK, size) != 0) return NULL;
        (void)madvise(p, size, MADV_HUGEPAGE);
        return (char *)p;
    }
#endif
    return (char *)malloc(need);
}

static char *pool_get(size_t need, int *slot) {
    int best = -1, spare = -1;
    char *p;
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    for (int i = 0; i < POOL; i++) {
        if (pool[i].busy) continue;
        if (pool[i].p && pool[i].size >= need && (best < 0 || pool[i].size < pool[best].size)) best = i;
        if (spare < 0 || !pool[i].p || (pool[spare].p && pool[i].size < pool[spare].size)) spare = i;
    }
    if (best < 0 && spare >= 0) { /* grow the smallest free block (or an empty entry) */
        free(pool[spare].p);
        pool[spare].p = block_alloc(need);
        pool[spare].size = pool[spare].p ? need : 0;
        if (pool[spare].p) best = spare;
    }
    if (best >= 0) pool[best].busy = 1;
    PyThread_release_lock(pool_lock);
    *slot = best;
    if (best >= 0) return pool[best].p;
    p = block_alloc(need); /* every entry busy: a private block */
    return p;
}

static void pool_put(char *p, int slot) {
    if (slot < 0) {
        free(p);
        return;
    }
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    pool[slot].busy = 0;
    PyThread_release_lock(pool_lock);
}

static PyObject *py_trim(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    PyThread_acquire_lock(pool_lock, WAIT_LOCK);
    for (int i = 0; i < POOL; i++)
        if (!pool[i].busy) {
            free(pool[i].p);
            pool[i].p = NULL;
            pool[i].size = 0;
        }
    PyThread_release_lock(pool_lock);
    Py_RETURN_NONE;
}

/* carve aligned arrays out of one block */
typedef struct {
    char *p;
    size_t used, size;
} Arena;

static size_t al(size_t n) { return (n + 63) & ~(size_t)63; }

static void *take(Arena *a, size_t n) {
    void *r = a->p + a->used;
    a->used += al(n);
    return r;
}

/* ---- correlation table: direct-address when dense, else open addressing ------------------- */

typedef struct {
    int64_t launch_end; /* the first launch row's end */
    int32_t best_g;     /* the earliest member GPU event of the correlation; -1: none yet */
    uint8_t used, has_l, cross;
} Slot;

typedef struct {
    int dense;
    int64_t lo, cap, mask;
    Slot *s;
    int64_t *key; /* hash mode */
} Corr;

static int64_t corr_cap(int64_t lo, int64_t hi, int64_t count, int *dense) {
    int64_t cap = 16;
    *dense = 0;
    if (count == 0) return 0;
    if (hi - lo + 1 <= 2 * count + (1 << 16)) {
        *dense = 1;
        return hi - lo + 1;
    }
    while (cap < 2 * count) cap <<= 1;
    return cap;
}

static void corr_init(Corr *t, Slot *mem, int64_t *key, int64_t lo, int64_t cap, int dense) {
    t->dense = dense;
    t->lo = lo;
    t->cap = cap;
    t->mask = cap - 1;
    t->s = mem;
    t->key = key;
    for (int64_t i = 0; i < cap; i++) {
        mem[i].used = mem[i].has_l = mem[i].cross = 0;
        mem[i].launch_end = UNKNOWN_LAUNCH;
        mem[i].best_g = -1;
    }
}

static inline Slot *corr_slot(Corr *t, int64_t k) {
    uint64_t h;
    if (t->dense) return t->s + (k - t->lo);
    h = ((uint64_t)k * 0x9E3779B97F4A7C15ull) >> 17;
    for (;;) {
        int64_t i = (int64_t)(h & (uint64_t)t->mask);
        Slot *s = t->s + i;
        if (!s->used) {
            s->used = 1;
            t->key[i] = k;
            return s;
        }
        if (t->key[i] == k) return s;
        h++;
    }
}

/* ---- the walk ------------------------------------------------------------------------------ */

static inline int64_t floordiv(int64_t a, int64_t b) { /* floor(a / b), b > 0 */
    int64_t q = a / b;
    if ((a % b) != 0 && a < 0) q--;
    return q;
}

/* how many ns t in [a, b) have t mod k == pos */
static inline int64_t share(int64_t a, int64_t b, int64_t pos, int64_t k) {
    if (k == 1) return b - a;
    return floordiv(b - 1 - pos, k) - floordiv(a - 1 - pos, k);
}

typedef struct {
    int64_t t;
    int32_t d; /* +1 start, -1 end */
    int32_t code;
} Pt;

static int pt_cmp(const void *a, const void *b) {
    int64_t x = ((const Pt *)a)->t, y = ((const Pt *)b)->t;
    return (x > y) - (x < y);
}

typedef struct {
    Pt *pts;
    int64_t cap;
    int64_t *sst;  /* PDL: stream of each run */
    int64_t *smax; /* PDL: running max end */
    int64_t scap;
} Scratch;

static int scratch_fit(Scratch *w, int64_t m) {
    if (2 * m > w->cap) {
        int64_t cap = 2 * m + 64;
        Pt *p = (Pt *)realloc(w->pts, (size_t)cap * sizeof(Pt));
        if (!p) return -1;
        w->pts = p;
        w->cap = cap;
    }
    if (m > w->scap) {
        int64_t cap = m + 16;
        int64_t *a = (int64_t *)realloc(w->sst, (size_t)cap * sizeof(int64_t));
        int64_t *b;
        if (!a) return -1;
        w->sst = a;
        b = (int64_t *)realloc(w->smax, (size_t)cap * sizeof(int64_t));
        if (!b) return -1;
        w->smax = b;
        w->scap = cap;
    }
    return 0;
}

/* one cluster of m >= 2 overlapping events (start order): PDL rule, then the point sweep.
 * s, e: starts and (clipped) ends; code; stream. Adds to b (nb codes) and *ov. */
static int cluster(Scratch *w, int64_t m, const int64_t *s, const int64_t *e, const int8_t *code, const int64_t *stream,
                   int64_t *b, int64_t *ov) {
    int64_t ns = 0, np = 0, cnt[MAX_CODES];
    if (scratch_fit(w, m) < 0) return -1;
    for (int64_t i = 0; i < m; i++) {
        int64_t si = s[i], ei = e[i];
        if (stream[i] >= 0) { /* PDL: counts from the latest end of earlier events of its stream */
            int64_t k = 0;
            while (k < ns && w->sst[k] != stream[i]) k++;
            if (k == ns) {
                w->sst[ns] = stream[i];
                w->smax[ns] = ei;
                ns++;
            } else {
                if (w->smax[k] > si) si = w->smax[k];
                if (ei > w->smax[k]) w->smax[k] = ei;
                if (ei < si) ei = si;
            }
        }
        w->pts[np].t = si;
        w->pts[np].d = 1;
        w->pts[np].code = code[i];
        np++;
        w->pts[np].t = ei;
        w->pts[np].d = -1;
        w->pts[np].code = code[i];
        np++;
    }
    if (np <= 16) { /* insertion sort */
        for (int64_t i = 1; i < np; i++) {
            Pt x = w->pts[i];
            int64_t j = i - 1;
            while (j >= 0 && w->pts[j].t > x.t) {
                w->pts[j + 1] = w->pts[j];
                j--;
            }
            w->pts[j + 1] = x;
        }
    } else {
        qsort(w->pts, (size_t)np, sizeof(Pt), pt_cmp);
    }
    memset(cnt, 0, sizeof(cnt));
    for (int64_t i = 0; i < np;) {
        int64_t t = w->pts[i].t, a, bb, kw = 0, kc = 0;
        while (i < np && w->pts[i].t == t) {
            cnt[w->pts[i].code] += w->pts[i].d;
            i++;
        }
        if (i == np) break;
        a = t;
        bb = w->pts[i].t;
        for (int c = 0; c < BC.n_work; c++) kw += cnt[c] > 0;
        for (int c = BC.n_work; c < BC.n_event; c++) kc += cnt[c] > 0;
        if (kw) {
            int64_t pos = 0;
            for (int c = 0; c < BC.n_work; c++)
                if (cnt[c] > 0) b[c] += share(a, bb, pos++, kw);
            if (kc) *ov += bb - a;
        } else if (kc) {
            int64_t pos = 0;
            for (int c = BC.n_work; c < BC.n_event; c++)
                if (cnt[c] > 0) b[c] += share(a, bb, pos++, kc);
        }
    }
    return 0;
}

/* stable merge sort of idx[0..n) by key[idx] */
static void msort(int64_t *idx, int64_t *tmp, int64_t n, const int64_t *key) {
    if (n < 2) return;
    if (n <= 16) {
        for (int64_t i = 1; i < n; i++) {
            int64_t x = idx[i], j = i - 1;
            while (j >= 0 && key[idx[j]] > key[x]) {
                idx[j + 1] = idx[j];
                j--;
            }
            idx[j + 1] = x;
        }
        return;
    }
    {
        int64_t h = n / 2, i = 0, j = h, k = 0;
        msort(idx, tmp, h, key);
        msort(idx + h, tmp, n - h, key);
        while (i < h && j < n) tmp[k++] = (key[idx[j]] < key[idx[i]]) ? idx[j++] : idx[i++];
        while (i < h) tmp[k++] = idx[i++];
        while (j < n) tmp[k++] = idx[j++];
        memcpy(idx, tmp, (size_t)n * sizeof(int64_t));
    }
}

typedef struct {
    int64_t s, e;
} SE;

static int se_cmp(const void *a, const void *b) {
    int64_t x = ((const SE *)a)->s, y = ((const SE *)b)->s;
    return (x > y) - (x < y);
}

typedef struct {
    /* inputs */
    Col *start, *dur, *pid, *corr, *stream, *tid, *graph;
    Col *kind, *cat;            /* 1-byte codes (an Enum's physical codes, or codes() output) */
    const int8_t *lut_k, *lut_c; /* code -> kind code / bucket code; entry 256: null */
    int64_t n;
    const int64_t *dense;
    int64_t n_dense;
    const int64_t *i_tid; /* NULL: no cross-thread counts */
    int64_t n_itid;
    const int64_t *host_start;
    const uint8_t *is_host;
    int64_t k_lo, m;
    int64_t latency;
    /* outputs (m instances; buckets m x nb) */
    int64_t *buckets, *ws, *we, *ov, *n_ev, *qd, *graph_l, *eager_l, *cross;
    /* rows of launches with an unknown graph flag (relative), for the caller */
    int64_t *unres;
    int64_t n_unres;
    /* collective kernels (coll_seq not null) when seq is given: (row, coll_seq, start, dur,
     * phase_id) per kernel, for the allreduce matching */
    Col *seq, *group, *op;
    Interner ig, io;  /* group and op of the collective kernels, interned per rank */
    int64_t *coll[7]; /* the caller's output columns, cap_coll rows each */
    int64_t n_coll, cap_coll;
    int status; /* 0 ok, 1 instance of another rank, 2 unresolved bucket code, 3 coll_out too short, -1 no memory */
} Job;

/* the LUT value of 1-byte code row i of c (lut[256] where the row is null) */
static inline int8_t code_at(const Col *c, const int8_t *lut, int64_t i) {
    int64_t j = c->off + i;
    if (c->type == C_NULL || (c->valid && !bit(c->valid, j))) return lut[256];
    return lut[((const uint8_t *)c->vals)[j]];
}

static inline int64_t inst_of(const Job *J, int64_t pid) {
    /* _instance_of: dense[pid] for 0 <= pid < n_dense - 1, else -1 */
    if (pid < 0 || pid >= J->n_dense - 1) return -1;
    return J->dense[pid];
}

static inline int64_t gv(const Col *c, int64_t i, int64_t fill) { /* col_i64 with an int64 fast path */
    int64_t j = c->off + i;
    if (c->valid && !bit(c->valid, j)) return fill;
    if (c->type == C_I64) return ((const int64_t *)c->vals)[j];
    return c->type == C_NULL ? fill : col_raw(c, i);
}

/* the walk of one instance, one event at a time (events in start order): gaps split into launch
 * overhead and idle, clusters of overlapping events resolved by cluster() when they close */
typedef struct {
    int64_t runmax, ws, we, nev, nc;
    int64_t *cs, *cse, *cst; /* the open cluster: starts, ends, streams, codes */
    int8_t *ccode;
    int64_t *bk, *ov; /* the instance's buckets and overlapped comm */
} IState;

static inline int flush(Scratch *W, IState *st) {
    if (st->nc == 1) st->bk[st->ccode[0]] += st->cse[0] - st->cs[0];
    else if (st->nc > 1 && cluster(W, st->nc, st->cs, st->cse, st->ccode, st->cst, st->bk, st->ov) < 0) return -1;
    st->nc = 0;
    return 0;
}

/* s, e: start and end (e >= s); le: launch end (UNKNOWN_LAUNCH: none); first: the first event of
 * its launch call */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int step(Scratch *W, IState *st, int64_t s, int64_t e, int64_t le, int first, int64_t latency,
                       int64_t stream, int8_t code) {
    if (st->nev == 0) {
        st->ws = s;
        st->we = e;
    } else {
        int64_t gap = s - st->runmax;
        if (s < st->ws) st->ws = s;
        if (gap > 0) {
            int64_t lp = 0;
            if (le != UNKNOWN_LAUNCH) {
                lp = le + (first ? latency : 0);
                if (lp > s) lp = s;
                lp -= s - gap;
                if (lp < 0) lp = 0;
                if (lp > gap) lp = gap;
            }
            st->bk[BC.launch] += lp;
            st->bk[BC.idle] += gap - lp;
        }
        if (gap >= 0 && flush(W, st) < 0) return -1; /* the previous cluster is complete */
        if (e > st->we) st->we = e;
    }
    st->cs[st->nc] = s;
    st->cse[st->nc] = e;
    st->cst[st->nc] = stream;
    st->ccode[st->nc] = code;
    st->nc++;
    if (st->nev == 0 || e > st->runmax) st->runmax = e;
    st->nev++;
    return 0;
}

static inline void istart(IState *st, Job *J, int64_t k) {
    st->nev = st->nc = 0;
    st->runmax = st->ws = st->we = 0;
    st->bk = J->buckets + k * BC.nb;
    st->ov = &J->ov[k];
}

static inline int ifinish(Scratch *W, IState *st, Job *J, int64_t k) {
    if (flush(W, st) < 0) return -1;
    J->ws[k] = st->ws;
    J->we[k] = st->we;
    J->n_ev[k] = st->nev;
    return 0;
}

/* the correlation of row i into *out when it has one (1), tracking the range and count */
static inline int corr_at(const int64_t *C, const uint8_t *vC, int64_t oC, int64_t i, int64_t *out, int64_t *lo, int64_t *hi,
                          int64_t *n) {
    int64_t c;
    if (!C || (vC && !bit(vC, oC + i))) return 0;
    c = C[oC + i];
    *out = c;
    if (c < *lo) *lo = c;
    if (c > *hi) *hi = c;
    (*n)++;
    return 1;
}

static void run_job(Job *J) {
    int64_t n = J->n, ng = 0, nl = 0, lo = INT64_MAX, hi = INT64_MIN, ncorr = 0, m = J->m, cap, maxk = 0;
    int dense_t = 0, g_sorted = 1, mono = 1, pslot = -1, pslot2 = -1;
    int64_t last_inst = -1;
    IState st;
    size_t need;
    Corr T;
    Scratch W;
    Arena A, B;
    memset(&B, 0, sizeof(B));
    int64_t *gs, *ge, *gc, *gst, *gle, *lc, *lend, *order, *tmp, *head;
    int32_t *gi;
    int8_t *gcode, *ghas, *lhas, *lx;
    int64_t *bstart = NULL, *cs = NULL, *cse = NULL, *cst = NULL, *ss = NULL, *se = NULL;
    int8_t *ccode = NULL;
    SE *sorted = NULL;
    memset(&W, 0, sizeof(W));
    memset(&A, 0, sizeof(A));
    memset(&st, 0, sizeof(st));
    J->status = -1;
    /* arrays of one entry per row (GPU rows and launch rows counted in pass 1, not before: the
     * pages past the counts are never touched, so they cost address space only) */
    ng = nl = n;
    need = 7 * al((size_t)(ng + 1) * 8) + al((size_t)(ng + 1) * 4) + 2 * al((size_t)ng + 1) +
           2 * al((size_t)(nl + 1) * 8) + 2 * al((size_t)nl + 1) + al((size_t)(m + 2) * 8) + 64;
    A.p = pool_get(need, &pslot);
    if (!A.p) goto done;
    A.size = need;
    gs = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    ge = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    gc = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    gst = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    gle = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    order = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    tmp = (int64_t *)take(&A, (size_t)(ng + 1) * 8);
    gi = (int32_t *)take(&A, (size_t)(ng + 1) * 4);
    gcode = (int8_t *)take(&A, (size_t)ng + 1);
    ghas = (int8_t *)take(&A, (size_t)ng + 1);
    lc = (int64_t *)take(&A, (size_t)(nl + 1) * 8);
    lend = (int64_t *)take(&A, (size_t)(nl + 1) * 8);
    lhas = (int8_t *)take(&A, (size_t)nl + 1);
    lx = (int8_t *)take(&A, (size_t)nl + 1);
    head = (int64_t *)take(&A, (size_t)(m + 2) * 8);
    memset(head, 0, (size_t)(m + 2) * 8);

    /* pass 1, one sweep over the rows: GPU rows gathered (instance, times, correlation, stream,
     * bucket); launch rows: correlation, end, cross-thread flag, launch counts per instance.
     * The int64 columns through local pointers (no reloads through the Col structs). */
    {
        int64_t g = 0, l = 0;
        const int64_t *S = (const int64_t *)J->start->vals, *D = (const int64_t *)J->dur->vals;
        const int64_t *P = (const int64_t *)J->pid->vals, *C = (const int64_t *)J->corr->vals;
        const int64_t *ST = (const int64_t *)J->stream->vals, *TI = (const int64_t *)J->tid->vals;
        const uint8_t *vS = J->start->valid, *vD = J->dur->valid, *vP = J->pid->valid, *vC = J->corr->valid;
        const uint8_t *vST = J->stream->valid, *vTI = J->tid->valid;
        const int64_t oS = J->start->off, oD = J->dur->off, oP = J->pid->off, oC = J->corr->off, oST = J->stream->off,
                      oTI = J->tid->off;
        const Col *KC = J->kind, *CB = J->cat;
        const int8_t *lk = J->lut_k, *lcb = J->lut_c;
        const int64_t *itid = J->i_tid;
#define VAL(V, v, o, i, fill) ((V) && (!(v) || bit((v), (o) + (i))) ? (V)[(o) + (i)] : (fill))
        for (int64_t i = 0; i < n; i++) {
            int8_t k = code_at(KC, lk, i);
            if (k >= K_KERNEL && k <= K_MEMSET) {
                int64_t s = VAL(S, vS, oS, i, 0), inst = inst_of(J, VAL(P, vP, oP, i, -1));
                int has = corr_at(C, vC, oC, i, &gc[g], &lo, &hi, &ncorr);
                gs[g] = s;
                ge[g] = s + VAL(D, vD, oD, i, 0);
                if (g && s < gs[g - 1]) g_sorted = 0;
                if (inst >= 0) {
                    inst -= J->k_lo;
                    if (inst < 0 || inst >= m) {
                        J->status = 1;
                        goto done;
                    }
                    head[inst + 1]++;
                    if (inst < last_inst) mono = 0;
                    last_inst = inst;
                }
                gi[g] = (int32_t)inst;
                ghas[g] = (int8_t)has;
                gst[g] = VAL(ST, vST, oST, i, -1);
                if (k == K_KERNEL) {
                    int8_t b = code_at(CB, lcb, i);
                    if (b < 0 || b >= BC.n_event) {
                        J->status = 2;
                        goto done;
                    }
                    gcode[g] = b;
                    if (J->seq && col_valid(J->seq, i)) {
                        int64_t q = J->n_coll++;
                        if (q >= J->cap_coll) {
                            J->status = 3;
                            goto done;
                        }
                        J->coll[0][q] = i;
                        J->coll[1][q] = col_raw(J->seq, i);
                        J->coll[2][q] = s;
                        J->coll[3][q] = VAL(D, vD, oD, i, 0);
                        J->coll[4][q] = VAL(P, vP, oP, i, -1);
                        if ((J->coll[5][q] = intern_row(&J->ig, J->group, i)) < 0 ||
                            (J->coll[6][q] = intern_row(&J->io, J->op, i)) < 0)
                            goto done;
                    }
                } else {
                    gcode[g] = BC.memory;
                }
                g++;
            } else if (k == K_LAUNCH) {
                int64_t p = VAL(P, vP, oP, i, -1), inst = inst_of(J, p);
                lhas[l] = (int8_t)corr_at(C, vC, oC, i, &lc[l], &lo, &hi, &ncorr);
                lend[l] = VAL(S, vS, oS, i, 0) + VAL(D, vD, oD, i, 0);
                lx[l] = itid && inst >= 0 && VAL(TI, vTI, oTI, i, -1) != itid[inst];
                if (p >= 0 && inst >= 0) {
                    int64_t li = inst - J->k_lo;
                    if (li < 0 || li >= m) {
                        J->status = 1;
                        goto done;
                    }
                    if (!col_valid(J->graph, i)) J->unres[J->n_unres++] = i;
                    else if (col_raw(J->graph, i)) J->graph_l[li]++;
                    else J->eager_l[li]++;
                }
                l++;
            }
        }
        ng = g;
        nl = l;
#undef VAL
    }
    if (ng > INT32_MAX) goto done;
    /* the correlation table; launch rows: the first launch row of a correlation wins */
    cap = corr_cap(lo, hi, ncorr, &dense_t);
    B.p = pool_get(al((size_t)(cap + 1) * sizeof(Slot)) + (dense_t ? 0 : al((size_t)(cap + 1) * 8)) + 64, &pslot2);
    if (!B.p) goto done;
    corr_init(&T, (Slot *)take(&B, (size_t)(cap + 1) * sizeof(Slot)), dense_t ? NULL : (int64_t *)take(&B, (size_t)(cap + 1) * 8),
              lo, cap, dense_t);
    for (int64_t l = 0; l < nl; l++) {
        if (lhas[l]) {
            Slot *sl = corr_slot(&T, lc[l]);
            if (!sl->has_l) {
                sl->has_l = 1;
                sl->launch_end = lend[l];
                sl->cross = lx[l];
            }
        }
    }
    for (int64_t k = 0; k < m; k++)
        if (head[k + 1] > maxk) maxk = head[k + 1];
    cs = (int64_t *)malloc((size_t)(maxk + 1) * 8);
    cse = (int64_t *)malloc((size_t)(maxk + 1) * 8);
    cst = (int64_t *)malloc((size_t)(maxk + 1) * 8);
    ccode = (int8_t *)malloc((size_t)maxk + 1);
    if (!cs || !cse || !cst || !ccode) goto done;
    st.cs = cs, st.cse = cse, st.cst = cst, st.ccode = ccode;
    if (g_sorted && mono) {
        /* GPU rows in start order, each instance's events contiguous among the member events
         * (the canonical order, instances one after another): one pass walks every instance,
         * looks up launch ends, marks the first event of each launch call (the earliest member
         * event, table order among equal starts) and keeps the running maximum of ends that
         * queue delay needs (ends of all GPU events that started before the window) */
        int64_t cur = -1, rm_all = 0, rm_lt = 0, prev_s = 0;
        int have_all = 0, have_lt = 0;
        for (int64_t g = 0; g < ng; g++) {
            int64_t s = gs[g], er = ge[g], k = gi[g];
            if (g == 0 || s > prev_s) {
                rm_lt = rm_all;
                have_lt = have_all;
                prev_s = s;
            }
            if (k >= 0) {
                int64_t le = UNKNOWN_LAUNCH;
                int first = 1;
                if (k != cur) {
                    if (cur >= 0 && ifinish(&W, &st, J, cur) < 0) goto done;
                    cur = k;
                    istart(&st, J, k);
                    if (have_lt && J->is_host[k]) {
                        int64_t busy = rm_lt < s ? rm_lt : s, d = busy - J->host_start[k];
                        J->qd[k] += d > 0 ? d : 0;
                    }
                }
                if (ghas[g]) {
                    Slot *sl = corr_slot(&T, gc[g]);
                    le = sl->launch_end;
                    first = sl->best_g < 0;
                    if (first) sl->best_g = (int32_t)g;
                    if (sl->cross) J->cross[k]++;
                }
                if (step(&W, &st, s, er > s ? er : s, le, first, J->latency, gst[g], gcode[g]) < 0) goto done;
            }
            if (!have_all || er > rm_all) rm_all = er;
            have_all = 1;
        }
        if (cur >= 0 && ifinish(&W, &st, J, cur) < 0) goto done;
    } else {
        /* any order: GPU rows' slots first, then each instance's events gathered and sorted */
        /* GPU rows: launch end; the first event of each launch call = its earliest-starting member
         * event (in table order among equal starts) */
        if (!g_sorted) {
            bstart = (int64_t *)malloc((size_t)(cap + 1) * 8);
            if (!bstart) goto done;
        }
        for (int64_t g = 0; g < ng; g++) {
            Slot *sl;
            if (!ghas[g]) {
                gle[g] = UNKNOWN_LAUNCH;
                continue;
            }
            sl = corr_slot(&T, gc[g]);
            gle[g] = sl->launch_end;
            gc[g] = sl - T.s; /* the slot from here on */
            if (gi[g] >= 0) {
                if (sl->best_g < 0 || (bstart && gs[g] < bstart[gc[g]])) {
                    sl->best_g = (int32_t)g;
                    if (bstart) bstart[gc[g]] = gs[g];
                }
                if (sl->cross) J->cross[gi[g]]++;
            }
        }

        /* member events grouped by instance (stable), each instance in start order */
        for (int64_t k = 0; k < m; k++) head[k + 1] += head[k];
        {
            int64_t *cur = tmp; /* fill cursors (tmp is free until the walk) */
            if (m + 1 > ng + 1) {
                cur = (int64_t *)malloc((size_t)(m + 1) * 8);
                if (!cur) goto done;
            }
            memcpy(cur, head, (size_t)(m + 1) * 8);
            for (int64_t g = 0; g < ng; g++)
                if (gi[g] >= 0) order[cur[gi[g]]++] = g;
            if (cur != tmp) free(cur);
        }
        for (int64_t k = 0; k < m; k++) {
            int64_t a = head[k], z = head[k + 1];
            if (z == a) continue;
            if (!g_sorted) {
                for (int64_t q = a + 1; q < z; q++)
                    if (gs[order[q]] < gs[order[q - 1]]) {
                        msort(order + a, tmp, z - a, gs);
                        break;
                    }
            }
            istart(&st, J, k);
            for (int64_t q = a; q < z; q++) {
                int64_t g = order[q], s = gs[g];
                int first = !ghas[g] || T.s[gc[g]].best_g == g;
                if (step(&W, &st, s, ge[g] > s ? ge[g] : s, gle[g], first, J->latency, gst[g], gcode[g]) < 0) goto done;
            }
            if (ifinish(&W, &st, J, k) < 0) goto done;
        }
        /* queue delay: the latest end of any GPU event of the rank that started before the window */
        {
            const int64_t *s_ = gs, *e_ = ge;
            if (!g_sorted) {
                sorted = (SE *)malloc((size_t)(ng + 1) * sizeof(SE));
                ss = (int64_t *)malloc((size_t)(ng + 1) * sizeof(int64_t));
                se = (int64_t *)malloc((size_t)(ng + 1) * sizeof(int64_t));
                if (!sorted || !ss || !se) goto done;
                for (int64_t g = 0; g < ng; g++) {
                    sorted[g].s = gs[g];
                    sorted[g].e = ge[g];
                }
                qsort(sorted, (size_t)ng, sizeof(SE), se_cmp);
                for (int64_t g = 0; g < ng; g++) {
                    ss[g] = sorted[g].s;
                    se[g] = sorted[g].e;
                }
                s_ = ss;
                e_ = se;
            }
            /* prefix max of ends, in tmp */
            for (int64_t g = 0; g < ng; g++) tmp[g] = (g && tmp[g - 1] > e_[g]) ? tmp[g - 1] : e_[g];
            for (int64_t k = 0; k < m; k++) {
                int64_t a = 0, b = ng, w = J->ws[k];
                if (!J->n_ev[k] || !J->is_host[k]) continue;
                while (a < b) { /* first g with s_[g] >= w */
                    int64_t mid = a + (b - a) / 2;
                    if (s_[mid] < w) a = mid + 1;
                    else b = mid;
                }
                if (a > 0) {
                    int64_t busy = tmp[a - 1] < w ? tmp[a - 1] : w, d = busy - J->host_start[k];
                    J->qd[k] += d > 0 ? d : 0;
                }
            }
        }
    }
    J->status = 0;
done:
    if (A.p) pool_put(A.p, pslot);
    if (B.p) pool_put(B.p, pslot2);
    free(bstart), free(cs), free(cse), free(cst), free(ccode), free(sorted), free(ss), free(se);
    free(W.pts), free(W.sst), free(W.smax);
}

/* walk_rank(columns=, luts=, dense=, i_tid=, host_start=, is_host=, k_lo=, latency=, outs=, coll_out=)
 *   -> (status, unresolved rows, n_coll, groups, ops); every argument by keyword.
 * columns: {name: capsule or None} over the rank's rows, the names of COL_NAMES (tid, coll_seq,
 * group and coll_op may be None; group and coll_op are needed with coll_seq); kind and category as
 * 1-byte codes (uint8 / int8: the physical codes of an Enum, or the output of codes());
 * luts: 514 int8: code -> kind code (K_*), then code -> bucket code (-1: unresolved), entry 256 of
 * each for a null row; dense: int64 phase id -> instance (last
 * entry -1); i_tid: int64 per instance (all ranks) or None; host_start (int64) / is_host (uint8):
 * the rank's instances [k_lo, k_lo + m); outs: {name: writable int64 buffer} over those instances,
 * the names of OUT_NAMES (buckets: m x nb codes; all zero on entry); coll_out: None, or
 * {name: writable int64 buffer} of one length, the names of COLL_NAMES, for the collective kernels
 * (coll_seq not null; group / op as codes; status 3 when there are more than they hold); n_coll:
 * how many were written; groups / ops: the strings of the codes (1 + index; a null group is "", a
 * null op "?"). */
enum { COL_START, COL_DUR, COL_PHASE_ID, COL_CORR, COL_STREAM, COL_TID, COL_GRAPH, COL_SEQ, COL_KIND, COL_CAT,
       COL_GROUP, COL_OP, N_COLS };
static const char *COL_NAMES[N_COLS] = {"start_ns", "dur_ns", "phase_id", "correlation", "stream", "tid",
                                        "graph",    "coll_seq", "kind",   "category",    "group",  "coll_op"};
static const char COL_TYPE[N_COLS] = {'l', 'l', 'l', 'l', 'l', 'l', 'b', 'l', 'c', 'c', 's', 's'};
static const int COL_OPTIONAL[N_COLS] = {0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1};
enum { OUT_BUCKETS, OUT_WS, OUT_WE, OUT_OV, OUT_EVENTS, OUT_QD, OUT_GRAPH, OUT_EAGER, OUT_CROSS, N_OUTS };
static const char *OUT_NAMES[N_OUTS] = {"buckets", "window_start", "window_end", "overlapped_comm", "events",
                                        "queue_delay", "graph_launches", "eager_launches", "cross_thread"};
enum { N_COLL = 7 };
static const char *COLL_NAMES[N_COLL] = {"row", "coll_seq", "start", "dur", "phase_id", "group", "op"};

/* d[names[i]] for every name into got[i] (borrowed; Py_None where absent); an error for a key
 * that is not one of names, or a required one absent. */
static int named_args(PyObject *d, const char **names, int n, const int *optional, PyObject **got, const char *what) {
    Py_ssize_t found = 0;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyDict_GetItemString(d, names[i]);
        if (v) found++;
        else if (optional && optional[i]) v = Py_None;
        else {
            PyErr_Format(PyExc_ValueError, "walk_rank: %s has no %s", what, names[i]);
            return -1;
        }
        got[i] = v;
    }
    if (found != PyDict_Size(d)) {
        PyErr_Format(PyExc_ValueError, "walk_rank: %s has keys other than the expected ones", what);
        return -1;
    }
    return 0;
}

static PyObject *py_walk_rank(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"columns", "luts", "dense", "i_tid", "host_start", "is_host", "k_lo", "latency",
                             "outs",    "coll_out", NULL};
    PyObject *cols, *oluts, *odense, *oitid, *ohs, *oih, *outs, *ocoll;
    PyObject *colv[N_COLS], *outv[N_OUTS], *collv[N_COLL];
    long long k_lo, latency;
    Col c[N_COLS];
    Buf luts = {0}, dense = {0}, itid = {0}, hs = {0}, ih = {0}, ob[N_OUTS], cb5[N_COLL];
    Job J;
    PyObject *ret = NULL;
    (void)self;
    memset(c, 0, sizeof(c));
    memset(ob, 0, sizeof(ob));
    memset(cb5, 0, sizeof(cb5));
    memset(&J, 0, sizeof(J));
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "walk_rank takes keyword arguments only");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOOOLLO!O", kwlist, &PyDict_Type, &cols, &oluts, &odense, &oitid,
                                     &ohs, &oih, &k_lo, &latency, &PyDict_Type, &outs, &ocoll))
        return NULL;
    if (!BC.ok) {
        PyErr_SetString(PyExc_RuntimeError, "walk_rank: configure() was not called");
        return NULL;
    }
    if (named_args(cols, COL_NAMES, N_COLS, COL_OPTIONAL, colv, "columns") < 0 ||
        named_args(outs, OUT_NAMES, N_OUTS, NULL, outv, "outs") < 0)
        return NULL;
    for (int i = 0; i < N_COLS; i++) {
        int ok;
        if (colv[i] == Py_None) continue;
        if (col_import(colv[i], &c[i], COL_NAMES[i]) < 0) goto done;
        switch (COL_TYPE[i]) {
        case 's': ok = is_string_col(&c[i]); break;
        case 'c': ok = !c[i].is_dict && (c[i].type == C_U8 || c[i].type == C_I8 || c[i].type == C_NULL); break;
        case 'b': ok = c[i].type == C_BOOL || c[i].type == C_NULL; break;
        default: ok = c[i].type == C_I64 || c[i].type == C_NULL;
        }
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "walk_rank: %s is not an %s column", COL_NAMES[i],
                         COL_TYPE[i] == 's' ? "string" : COL_TYPE[i] == 'c' ? "1-byte code" : COL_TYPE[i] == 'b' ? "boolean" : "int64");
            goto done;
        }
        if (c[i].type == C_NULL) c[i].vals = NULL; /* every row null */
    }
    if (get_buf(oluts, &luts, 1, 0, "luts") < 0 || get_buf(odense, &dense, 8, 0, "dense") < 0 ||
        get_buf(ohs, &hs, 8, 0, "host_start") < 0 || get_buf(oih, &ih, 1, 0, "is_host") < 0)
        goto done;
    if (oitid != Py_None && get_buf(oitid, &itid, 8, 0, "i_tid") < 0) goto done;
    J.n = c[COL_KIND].n;
    J.m = hs.view.len / 8;
    for (int i = 0; i < N_COLS; i++)
        if (colv[i] != Py_None && c[i].n != J.n) {
            PyErr_Format(PyExc_ValueError, "walk_rank: %s has %lld rows, kind %lld", COL_NAMES[i], (long long)c[i].n,
                         (long long)J.n);
            goto done;
        }
    if (luts.view.len != 514 || ih.view.len != J.m || dense.view.len < 8) {
        PyErr_SetString(PyExc_ValueError, "walk_rank: inconsistent input lengths");
        goto done;
    }
    for (int i = 0; i < N_OUTS; i++) {
        if (get_buf(outv[i], &ob[i], 8, 1, OUT_NAMES[i]) < 0) goto done;
        if (ob[i].view.len != (i == OUT_BUCKETS ? BC.nb : 1) * J.m * 8) {
            PyErr_Format(PyExc_ValueError, "walk_rank: output %s of the wrong size", OUT_NAMES[i]);
            goto done;
        }
    }
    J.start = &c[COL_START], J.dur = &c[COL_DUR], J.pid = &c[COL_PHASE_ID], J.corr = &c[COL_CORR];
    J.stream = &c[COL_STREAM], J.tid = &c[COL_TID], J.graph = &c[COL_GRAPH];
    J.seq = colv[COL_SEQ] == Py_None ? NULL : &c[COL_SEQ];
    if (J.seq) {
        if (!PyDict_Check(ocoll) || colv[COL_GROUP] == Py_None || colv[COL_OP] == Py_None) {
            PyErr_SetString(PyExc_ValueError, "walk_rank: coll_seq needs group, coll_op and coll_out (7 int64 buffers)");
            goto done;
        }
        if (named_args(ocoll, COLL_NAMES, N_COLL, NULL, collv, "coll_out") < 0) goto done;
        J.group = &c[COL_GROUP], J.op = &c[COL_OP];
        if (interner_init(&J.ig, "", 0) < 0 || interner_init(&J.io, "?", 1) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        for (int f = 0; f < N_COLL; f++) {
            if (get_buf(collv[f], &cb5[f], 8, 1, COLL_NAMES[f]) < 0) goto done;
            if (cb5[f].view.len != cb5[0].view.len) {
                PyErr_SetString(PyExc_ValueError, "walk_rank: coll_out buffers of different lengths");
                goto done;
            }
            J.coll[f] = (int64_t *)cb5[f].view.buf;
        }
        J.cap_coll = cb5[0].view.len / 8;
    }
    J.kind = &c[COL_KIND], J.cat = &c[COL_CAT];
    J.lut_k = (const int8_t *)luts.view.buf;
    J.lut_c = J.lut_k + 257;
    J.dense = (const int64_t *)dense.view.buf;
    J.n_dense = dense.view.len / 8;
    J.i_tid = itid.ok ? (const int64_t *)itid.view.buf : NULL;
    J.n_itid = itid.ok ? itid.view.len / 8 : 0;
    if (J.i_tid && colv[COL_TID] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "walk_rank: i_tid without a tid column");
        goto done;
    }
    J.host_start = (const int64_t *)hs.view.buf;
    J.is_host = (const uint8_t *)ih.view.buf;
    J.k_lo = k_lo;
    J.latency = latency;
    J.buckets = (int64_t *)ob[OUT_BUCKETS].view.buf, J.ws = (int64_t *)ob[OUT_WS].view.buf;
    J.we = (int64_t *)ob[OUT_WE].view.buf, J.ov = (int64_t *)ob[OUT_OV].view.buf;
    J.n_ev = (int64_t *)ob[OUT_EVENTS].view.buf, J.qd = (int64_t *)ob[OUT_QD].view.buf;
    J.graph_l = (int64_t *)ob[OUT_GRAPH].view.buf, J.eager_l = (int64_t *)ob[OUT_EAGER].view.buf;
    J.cross = (int64_t *)ob[OUT_CROSS].view.buf;
    {
        /* every instance index of dense must be < len(i_tid) */
        if (J.i_tid)
            for (int64_t i = 0; i < J.n_dense; i++)
                if (J.dense[i] >= J.n_itid) {
                    PyErr_SetString(PyExc_ValueError, "walk_rank: i_tid shorter than the instances");
                    goto done;
                }
    }
    J.unres = (int64_t *)malloc((size_t)(J.n + 1) * sizeof(int64_t));
    if (!J.unres) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    run_job(&J);
    Py_END_ALLOW_THREADS
    if (J.status < 0) {
        PyErr_NoMemory();
        goto done;
    }
    {
        PyObject *rows = PyBytes_FromStringAndSize((const char *)J.unres, (Py_ssize_t)(J.n_unres * 8)), *gl, *ol;
        if (!rows) goto done;
        gl = interner_list(&J.ig);
        ol = gl ? interner_list(&J.io) : NULL;
        if (!ol) {
            Py_DECREF(rows);
            Py_XDECREF(gl);
            goto done;
        }
        ret = Py_BuildValue("(iNLNN)", J.status, rows, (long long)J.n_coll, gl, ol);
    }
done:
    free(J.unres);
    interner_free(&J.ig);
    interner_free(&J.io);
    for (int f = 0; f < N_COLL; f++) rel_buf(&cb5[f]);
    for (int i = 0; i < N_COLS; i++) col_free(&c[i]);
    rel_buf(&luts), rel_buf(&dense), rel_buf(&itid), rel_buf(&hs), rel_buf(&ih);
    for (int i = 0; i < N_OUTS; i++) rel_buf(&ob[i]);
    return ret;
}

/* match(g, op, seqn, rk, start, dur, wait, ok) -> bool: collectives.match_arrays without a sort
 * (the k-th collective of a group across ranks). g, op: dense codes >= 1; seqn >= 0: coll_seq;
 * rk: rank; all int64; outputs: wait (int64), ok (1 byte: matched). A segment (group, coll_seq)
 * is addressed as base[group] + coll_seq, so the coll_seq of a group must be dense enough
 * (annotate_collectives numbers them 0, 1, ... per rank and group); returns False, writing
 * nothing, where they are not (negative or sparse) and the caller runs the numpy matching. */
static PyObject *py_match(PyObject *self, PyObject *args) {
    PyObject *o[8], *ret = NULL;
    Buf b[8];
    int64_t n, gmax = 0, rlo = INT64_MAX, rhi = INT64_MIN, ng, nr, S = 0;
    int64_t *per = NULL, *base = NULL, *last = NULL, *opmin = NULL, *opmax = NULL;
    uint8_t *bad = NULL;
    int fits = 1, oom = 0;
    (void)self;
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
    for (int i = 0; i < 8; i++)
        if (get_buf(o[i], &b[i], i == 7 ? 1 : 8, i >= 6, "match") < 0) goto done;
    n = b[0].view.len / 8;
    for (int i = 1; i < 8; i++)
        if (b[i].view.len != n * (i == 7 ? 1 : 8)) {
            PyErr_SetString(PyExc_ValueError, "match: arrays of different lengths");
            goto done;
        }
    if (n == 0) {
        ret = Py_NewRef(Py_True);
        goto done;
    }
    {
        const int64_t *g = (const int64_t *)b[0].view.buf, *op = (const int64_t *)b[1].view.buf;
        const int64_t *sq = (const int64_t *)b[2].view.buf, *rk = (const int64_t *)b[3].view.buf;
        const int64_t *st = (const int64_t *)b[4].view.buf, *du = (const int64_t *)b[5].view.buf;
        int64_t *wait = (int64_t *)b[6].view.buf;
        uint8_t *ok = (uint8_t *)b[7].view.buf;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; i < n; i++) {
            if (g[i] < 1 || sq[i] < 0) fits = 0;
            if (g[i] > gmax) gmax = g[i];
            if (rk[i] < rlo) rlo = rk[i];
            if (rk[i] > rhi) rhi = rk[i];
        }
        ng = gmax, nr = rhi - rlo + 1;
        if (fits && (nr > 4 * n + 4096 || ng > n || ng * nr > 16 * n + 65536)) fits = 0;
        if (fits) {
            per = (int64_t *)calloc((size_t)(ng * nr), 8);
            base = (int64_t *)calloc((size_t)ng + 1, 8);
            bad = (uint8_t *)calloc((size_t)ng, 1);
            if (!per || !base || !bad) oom = 1;
        }
        if (fits && !oom) {
            for (int64_t i = 0; i < n; i++) {
                int64_t k = g[i] - 1;
                per[k * nr + (rk[i] - rlo)]++;
                if (sq[i] + 1 > base[k + 1]) base[k + 1] = sq[i] + 1;
            }
            for (int64_t k = 0; k < ng && fits; k++) {
                base[k + 1] += base[k];
                if (base[k + 1] > 4 * n + 4096) fits = 0; /* sparse coll_seq */
            }
        }
        if (fits && !oom) {
            S = base[ng];
            last = (int64_t *)malloc((size_t)(S + 1) * 8);
            opmin = (int64_t *)malloc((size_t)(S + 1) * 8);
            opmax = (int64_t *)malloc((size_t)(S + 1) * 8);
            if (!last || !opmin || !opmax) oom = 1;
        }
        if (fits && !oom) {
            for (int64_t q = 0; q < S; q++) last[q] = INT64_MIN, opmin[q] = INT64_MAX, opmax[q] = INT64_MIN;
            for (int64_t i = 0; i < n; i++) {
                int64_t q = base[g[i] - 1] + sq[i];
                if (st[i] > last[q]) last[q] = st[i];
                if (op[i] < opmin[q]) opmin[q] = op[i];
                if (op[i] > opmax[q]) opmax[q] = op[i];
            }
            for (int64_t k = 0; k < ng; k++) { /* the ranks hold different numbers of the group's collectives */
                int64_t lo_c = INT64_MAX, hi_c = 0;
                for (int64_t r = 0; r < nr; r++) {
                    int64_t c = per[k * nr + r];
                    if (c > 0 && c < lo_c) lo_c = c;
                    if (c > hi_c) hi_c = c;
                }
                if (hi_c > 0 && lo_c != hi_c) bad[k] = 1;
                for (int64_t q = base[k]; q < base[k + 1] && !bad[k]; q++) /* the k-th collective's op differs */
                    if (opmin[q] != INT64_MAX && opmin[q] != opmax[q]) bad[k] = 1;
            }
            for (int64_t i = 0; i < n; i++) {
                int64_t w = last[base[g[i] - 1] + sq[i]] - st[i];
                if (w < 0) w = 0;
                if (w > du[i]) w = du[i];
                wait[i] = w;
                ok[i] = !bad[g[i] - 1];
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    ret = Py_NewRef(fits ? Py_True : Py_False);
done:
    free(per), free(base), free(bad), free(last), free(opmin), free(opmax);
    for (int i = 0; i < 8; i++) rel_buf(&b[i]);
    return ret;
}

/* take(stream, src, head_vals, head_ok, fill, out_vals, out_ok): an integer or boolean column read
 * through the index src without a copy of the column: where src[j] >= 0, out_vals[j] = row src[j]
 * of the column (fill where null) and out_ok[j] = 1 if it is not null; where src[j] < 0,
 * head_vals / head_ok[-1 - src[j]] (rows prepended by the caller: the export layout's phase slices).
 * out_vals, head_vals: int64; out_ok, head_ok: one byte per row. */
static PyObject *py_take(PyObject *self, PyObject *args) {
    PyObject *cap, *osrc, *ohv, *oho, *oov, *ooo, *ret = NULL;
    long long fill;
    Col c;
    Buf b[5];
    (void)self;
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OOOOLOO", &cap, &osrc, &ohv, &oho, &fill, &oov, &ooo)) return NULL;
    memset(&c, 0, sizeof(c));
    if (col_import(cap, &c, "take") < 0) goto done;
    if (get_buf(osrc, &b[0], 8, 0, "src") < 0 || get_buf(ohv, &b[1], 8, 0, "head_vals") < 0 ||
        get_buf(oho, &b[2], 1, 0, "head_ok") < 0 || get_buf(oov, &b[3], 8, 1, "out_vals") < 0 ||
        get_buf(ooo, &b[4], 1, 1, "out_ok") < 0)
        goto done;
    if (c.is_dict || !(c.type == C_NULL || (c.type >= C_I8 && c.type <= C_BOOL))) {
        PyErr_SetString(PyExc_ValueError, "take: not an integer or boolean column");
        goto done;
    }
    {
        int64_t n = b[0].view.len / 8, nh = b[1].view.len / 8;
        const int64_t *S = (const int64_t *)b[0].view.buf, *HV = (const int64_t *)b[1].view.buf;
        const uint8_t *HO = (const uint8_t *)b[2].view.buf;
        int64_t *OV = (int64_t *)b[3].view.buf;
        uint8_t *OO = (uint8_t *)b[4].view.buf;
        if (b[2].view.len != nh || b[3].view.len / 8 != n || b[4].view.len != n) {
            PyErr_SetString(PyExc_ValueError, "take: inconsistent lengths");
            goto done;
        }
        for (int64_t j = 0; j < n; j++)
            if (S[j] < -nh || S[j] >= c.n) {
                PyErr_SetString(PyExc_IndexError, "take: index out of range");
                goto done;
            }
        Py_BEGIN_ALLOW_THREADS
        if (c.type == C_I64 && !c.valid) { /* the common case: no nulls, int64 */
            const int64_t *V = (const int64_t *)c.vals + c.off;
            for (int64_t j = 0; j < n; j++) {
                int64_t k = S[j];
                if (k < 0) OV[j] = HV[-1 - k], OO[j] = HO[-1 - k];
                else OV[j] = V[k], OO[j] = 1;
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                int64_t k = S[j];
                if (k < 0) OV[j] = HV[-1 - k], OO[j] = HO[-1 - k];
                else if (col_valid(&c, k)) OV[j] = col_raw(&c, k), OO[j] = 1;
                else OV[j] = (int64_t)fill, OO[j] = 0;
            }
        }
        Py_END_ALLOW_THREADS
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (int i = 0; i < 5; i++) rel_buf(&b[i]);
    col_free(&c);
    return ret;
}

/* configure(nb, n_work, memory, n_event_codes, launch, idle): the bucket codes (keywords) */
static PyObject *py_configure(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"nb", "n_work", "memory", "n_event_codes", "launch", "idle", NULL};
    BucketCodes b = {0};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iiiiii", kwlist, &b.nb, &b.n_work, &b.memory, &b.n_event, &b.launch,
                                     &b.idle))
        return NULL;
    if (!(0 < b.n_work && b.n_work <= b.n_event && b.n_event <= b.nb && b.nb <= MAX_CODES && 0 <= b.memory &&
          b.memory < b.n_work && b.launch >= b.n_event && b.launch < b.nb && b.idle >= b.n_event && b.idle < b.nb &&
          b.launch != b.idle)) {
        PyErr_SetString(PyExc_ValueError, "configure: inconsistent bucket codes");
        return NULL;
    }
    b.ok = 1;
    BC = b;
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(nb, n_work, memory, n_event_codes, launch, idle): the bucket codes walk_rank uses."},
    {"codes", py_codes, METH_VARARGS, "codes(stream, names, values, out): int8 code per row of a string column."},
    {"walk_rank", (PyCFunction)(void (*)(void))py_walk_rank, METH_VARARGS | METH_KEYWORDS,
     "walk_rank(columns=, ...): the attribution walk of one rank."},
    {"intern", py_intern, METH_VARARGS, "intern(stream, rows, null_as, out) -> distinct strings: dense codes."},
    {"match", py_match, METH_VARARGS, "match(g, op, seqn, rk, start, dur, wait, ok) -> bool: collectives matched by order."},
    {"take", py_take, METH_VARARGS, "take(stream, src, head_vals, head_ok, fill, out_vals, out_ok): an integer column through an index."},
    {"trim", py_trim, METH_NOARGS, "trim(): free the work memory kept between walk_rank calls."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "tracekit._walk", "tracekit's compiled attribution walk.", -1,
                                    METHODS};

PyMODINIT_FUNC PyInit__walk(void) {
    PyObject *m;
    if (!pool_lock && !(pool_lock = PyThread_allocate_lock())) return PyErr_NoMemory();
    m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "K_KERNEL", K_KERNEL) < 0 || PyModule_AddIntConstant(m, "K_MEMCPY", K_MEMCPY) < 0 ||
        PyModule_AddIntConstant(m, "K_MEMSET", K_MEMSET) < 0 || PyModule_AddIntConstant(m, "K_LAUNCH", K_LAUNCH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
