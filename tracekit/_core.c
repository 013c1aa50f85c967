/* tracekit._core: the compiled loops of tracekit (export lanes, record merge, packet encoding).
 *
 * Plain CPython C API over the buffer protocol (numpy arrays are passed as buffers; no numpy
 * headers are needed to build). Every function has a pure numpy/Python reference in the
 * package that the tests compare byte for byte; the Python side falls back to it when this
 * module is not built (tracekit/_native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

/* ---- buffers ----------------------------------------------------------------------------- */

#include "buf.h" /* Buf, get_buf, rel_buf */

#define N64(b) ((b).view.len / 8)
#define P64(b) ((int64_t *)(b).view.buf)
#define PU8(b) ((uint8_t *)(b).view.buf)
#define PF64(b) ((double *)(b).view.buf)

/* ---- lanes ------------------------------------------------------------------------------- */

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Stack;

static int push(Stack *s, int64_t x) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 16;
        int64_t *v = (int64_t *)realloc(s->v, (size_t)cap * sizeof(int64_t));
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

/* assign_lanes_grouped(starts, ends, bounds, lanes_out, lane_max_out)
 * starts/ends: int64, slices in nesting order inside each group; groups are the ranges
 * [bounds[g], bounds[g+1]). Greedy: the first lane where the slice nests (touching slices do
 * not overlap; a zero-length slice at a slice's end does not nest in it). */
static PyObject *assign_lanes_grouped(PyObject *self, PyObject *args) {
    PyObject *os, *oe, *ob, *ol, *om;
    Buf s = {0}, e = {0}, b = {0}, l = {0}, m = {0};
    Stack *stacks = NULL;
    Py_ssize_t n_stacks = 0, cap_stacks = 0;
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "OOOOO", &os, &oe, &ob, &ol, &om)) return NULL;
    if (get_buf(os, &s, 8, 0, "starts") || get_buf(oe, &e, 8, 0, "ends") || get_buf(ob, &b, 8, 0, "bounds") ||
        get_buf(ol, &l, 8, 1, "lanes") || get_buf(om, &m, 8, 1, "lane_max"))
        goto done;
    Py_ssize_t n = N64(s), ng = N64(b) - 1;
    if (N64(e) != n || N64(l) != n || ng < 0 || N64(m) != ng) {
        PyErr_SetString(PyExc_ValueError, "assign_lanes_grouped: inconsistent lengths");
        goto done;
    }
    const int64_t *S = P64(s), *E = P64(e), *B = P64(b);
    int64_t *L = P64(l), *M = P64(m);
    for (Py_ssize_t g = 0; g < ng; g++) {
        int64_t lo = B[g], hi = B[g + 1], mx = 0;
        if (lo < 0 || hi > n || lo > hi) {
            PyErr_SetString(PyExc_ValueError, "assign_lanes_grouped: bad bounds");
            goto done;
        }
        for (Py_ssize_t k = 0; k < n_stacks; k++) stacks[k].n = 0;
        Py_ssize_t used = 0;
        for (int64_t i = lo; i < hi; i++) {
            int64_t si = S[i], ei = E[i];
            Py_ssize_t placed = -1;
            for (Py_ssize_t k = 0; k < used; k++) {
                Stack *st = &stacks[k];
                while (st->n && st->v[st->n - 1] <= si) st->n--;
                if (!st->n || ei <= st->v[st->n - 1]) {
                    placed = k;
                    break;
                }
            }
            if (placed < 0) {
                if (used == n_stacks) {
                    if (n_stacks == cap_stacks) {
                        Py_ssize_t cap = cap_stacks ? 2 * cap_stacks : 8;
                        Stack *ns = (Stack *)realloc(stacks, (size_t)cap * sizeof(Stack));
                        if (!ns) { PyErr_NoMemory(); goto done; }
                        memset(ns + cap_stacks, 0, (size_t)(cap - cap_stacks) * sizeof(Stack));
                        stacks = ns;
                        cap_stacks = cap;
                    }
                    n_stacks++;
                }
                stacks[used].n = 0;
                placed = used++;
            }
            if (push(&stacks[placed], ei) < 0) { PyErr_NoMemory(); goto done; }
            L[i] = placed;
            if (placed > mx) mx = placed;
        }
        M[g] = mx;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (Py_ssize_t k = 0; k < n_stacks; k++) free(stacks[k].v);
    free(stacks);
    rel_buf(&s); rel_buf(&e); rel_buf(&b); rel_buf(&l); rel_buf(&m);
    return ret;
}

/* ---- record merge ------------------------------------------------------------------------ */

/* merge_records(start, dur, end_idx, c_ts, ts_out, typ_out, idx_out)
 * Write order of all events: at one timestamp, slice ends (latest opened first), counter
 * values, then slice opens in slice order. start: slices sorted by start; end_idx: the slices
 * with dur > 0 sorted by (end, -index); c_ts: counter samples sorted by ts. */
static PyObject *merge_records(PyObject *self, PyObject *args) {
    PyObject *o[7];
    Buf b[7];
    PyObject *ret = NULL;
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    const char *names[7] = {"start", "dur", "end_idx", "c_ts", "ts_out", "typ_out", "idx_out"};
    for (int k = 0; k < 7; k++)
        if (get_buf(o[k], &b[k], 8, k >= 4, names[k])) goto done;
    {
        const int64_t *st = P64(b[0]), *du = P64(b[1]), *ei = P64(b[2]), *ct = P64(b[3]);
        int64_t *ts = P64(b[4]), *ty = P64(b[5]), *ix = P64(b[6]);
        Py_ssize_t ns = N64(b[0]), ne = N64(b[2]), nc = N64(b[3]);
        if (N64(b[1]) != ns || N64(b[4]) != ns + ne + nc || N64(b[5]) != ns + ne + nc || N64(b[6]) != ns + ne + nc) {
            PyErr_SetString(PyExc_ValueError, "merge_records: inconsistent lengths");
            goto done;
        }
        Py_ssize_t i = 0, j = 0, k = 0, w = 0;
        while (i < ns || j < ne || k < nc) {
            int64_t te = INT64_MAX, tc = INT64_MAX, to = INT64_MAX;
            int have_e = j < ne, have_c = k < nc, have_o = i < ns;
            if (have_e) {
                int64_t s = ei[j];
                if (s < 0 || s >= ns) { PyErr_SetString(PyExc_ValueError, "merge_records: bad end index"); goto done; }
                te = st[s] + du[s];
            }
            if (have_c) tc = ct[k];
            if (have_o) to = st[i];
            if (have_e && (te <= tc || !have_c) && (te <= to || !have_o)) {
                ts[w] = te; ty[w] = 2; ix[w] = ei[j]; j++;
            } else if (have_c && (tc <= to || !have_o)) {
                ts[w] = tc; ty[w] = 4; ix[w] = k; k++;
            } else {
                ts[w] = to; ty[w] = du[i] == 0 ? 3 : 1; ix[w] = i; i++;
            }
            w++;
        }
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (int k = 0; k < 7; k++) rel_buf(&b[k]);
    return ret;
}

/* ---- protobuf encoding ------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    Py_ssize_t n, cap;
} Out;

static int reserve(Out *o, Py_ssize_t extra) {
    if (o->n + extra <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->n + extra) cap *= 2;
    uint8_t *p = (uint8_t *)realloc(o->p, (size_t)cap);
    if (!p) return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

static inline int vlen(uint64_t v) {
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

static inline uint8_t *put_v(uint8_t *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint8_t *put_le64(uint8_t *p, uint64_t v) {
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(v >> (8 * k));
    return p + 8;
}

#define N_INTS 6

enum {
    R_TS, R_TYP, R_IDX,
    S_TRACK, S_NAME, S_CAT, S_ARGSET, BL_FLAT, BL_OFF, BL_SIZE,
    I_VALS, I_VALS_END = I_VALS + N_INTS - 1, I_OK, I_OK_END = I_OK + N_INTS - 1, I_PLEN,
    FO_C, FO_O, FO_F, FI_C, FI_O, FI_F,
    C_TRACK, C_VALUE, C_INT,
    N_FLAT, N_OFF, N_SIZE, N_DONE,
    D_C, D_O, D_F, ST_FLAT, ST_OFF, ST_SIZE, ST_DONE,
    NB
};

static const char *BUF_NAMES[NB] = {
    "rec_ts", "rec_typ", "rec_idx", "track", "name_id", "cat_id", "argset", "blob_flat", "blob_off",
    "blob_size", "ints_vals0", "ints_vals1", "ints_vals2", "ints_vals3", "ints_vals4", "ints_vals5",
    "ints_ok0", "ints_ok1", "ints_ok2", "ints_ok3", "ints_ok4", "ints_ok5", "ann_plen", "out_c", "out_o", "out_f", "in_c", "in_o", "in_f",
    "c_track", "c_value", "c_is_int", "name_flat", "name_off", "name_size", "name_done",
    "dep_c", "dep_o", "dep_f", "str_flat", "str_off", "str_size", "str_done"};

static int item_size(int k) {
    switch (k) {
    case I_OK: case I_OK + 1: case I_OK + 2: case I_OK + 3: case I_OK + 4: case I_OK + 5:
    case BL_FLAT: case C_INT: case N_FLAT: case N_DONE: case ST_FLAT: case ST_DONE:
        return 1;
    default:
        return 8;
    }
}

static int blob_ok(const Buf *flat, const int64_t *off, const int64_t *size, int64_t n, int64_t i) {
    return i >= 0 && i < n && off[i] >= 0 && size[i] >= 0 && off[i] + size[i] <= flat->view.len;
}

/* encode_batch(arrays, ann_prefix) -> bytes. ``arrays``: a tuple of NB buffers in the order of
 * the enum above (int64 unless noted):
 *   rec_ts, rec_typ, rec_idx: the batch's records (perfetto.records order);
 *   track, name_id, cat_id, argset: per slice; blob_flat (uint8), blob_off, blob_size: the
 *   encoded arg sets; six ints_vals arrays then six ints_ok arrays (uint8): the integer
 *   annotations; ann_plen[6]: byte length of each annotation's prefix in
 *   ``ann_prefix`` (name_iid field + int_value key);
 *   out_c/out_o/out_f, in_c/in_o/in_f: flow ids leaving / entering each slice (CSR);
 *   c_track, c_value (float64), c_is_int (uint8): per counter sample;
 *   name_flat/off/size: each name's encoded InternedData entry, name_done (uint8, updated);
 *   dep_c/dep_o/dep_f: string ids each arg set uses; str_flat/off/size: each string's encoded
 *   entry (index = string id), str_done (uint8, updated).
 * Output: a packet interning the names and strings first used in the batch (ascending ids),
 * then one framed TracePacket per record (shapes: tracekit/export/perfetto.py). ``seq_head``
 * (optional): the bytes of each packet's trusted_packet_sequence_id and sequence_flags fields
 * (default: sequence 1, SEQ_NEEDS_INCREMENTAL_STATE). */
static PyObject *encode_batch(PyObject *self, PyObject *args) {
    PyObject *tup;
    Py_buffer pre = {0}, seqh = {0};
    static const uint8_t seq_default[4] = {0x50, 0x01, 0x68, 0x02};
    const uint8_t *sh = seq_default;
    uint64_t hl = 4;
    Buf b[NB];
    PyObject *ret = NULL;
    int64_t *newn = NULL, *news = NULL;
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "O!y*|y*", &PyTuple_Type, &tup, &pre, &seqh)) return NULL;
    if (seqh.buf != NULL) {
        if (seqh.len < 1 || seqh.len > 32) {
            PyErr_SetString(PyExc_ValueError, "encode_batch: bad sequence head");
            goto done;
        }
        sh = (const uint8_t *)seqh.buf;
        hl = (uint64_t)seqh.len;
    }
    if (PyTuple_GET_SIZE(tup) != NB) {
        PyErr_Format(PyExc_ValueError, "encode_batch: %d arrays expected", (int)NB);
        goto done;
    }
    for (int k = 0; k < NB; k++)
        if (get_buf(PyTuple_GET_ITEM(tup, k), &b[k], item_size(k), k == N_DONE || k == ST_DONE, BUF_NAMES[k]))
            goto done;
    {
        const int64_t *rts = P64(b[R_TS]), *rty = P64(b[R_TYP]), *rix = P64(b[R_IDX]);
        Py_ssize_t nr = N64(b[R_TS]);
        const int64_t *track = P64(b[S_TRACK]), *name = P64(b[S_NAME]), *cat = P64(b[S_CAT]), *aset = P64(b[S_ARGSET]);
        Py_ssize_t ns = N64(b[S_TRACK]);
        const uint8_t *bflat = PU8(b[BL_FLAT]);
        const int64_t *boff = P64(b[BL_OFF]), *bsize = P64(b[BL_SIZE]);
        int64_t nblob = N64(b[BL_OFF]);
        const int64_t *plen = P64(b[I_PLEN]);
        const int64_t *ival[N_INTS];
        const uint8_t *iok[N_INTS];
        for (int k = 0; k < N_INTS; k++) {
            ival[k] = P64(b[I_VALS + k]);
            iok[k] = PU8(b[I_OK + k]);
            if (N64(b[I_VALS + k]) != N64(b[S_TRACK]) || b[I_OK + k].view.len != N64(b[S_TRACK])) {
                PyErr_SetString(PyExc_ValueError, "encode_batch: inconsistent annotation lengths");
                goto done;
            }
        }
        const int64_t *foc = P64(b[FO_C]), *foo = P64(b[FO_O]), *fof = P64(b[FO_F]);
        const int64_t *fic = P64(b[FI_C]), *fio = P64(b[FI_O]), *fif = P64(b[FI_F]);
        Py_ssize_t nfo = N64(b[FO_F]), nfi = N64(b[FI_F]);
        const int64_t *ctrack = P64(b[C_TRACK]);
        const double *cval = PF64(b[C_VALUE]);
        const uint8_t *cint = PU8(b[C_INT]);
        Py_ssize_t ncs = N64(b[C_TRACK]);
        const uint8_t *nflat = PU8(b[N_FLAT]);
        const int64_t *noff = P64(b[N_OFF]), *nsize = P64(b[N_SIZE]);
        uint8_t *ndone = PU8(b[N_DONE]);
        int64_t nnames = N64(b[N_OFF]);
        const int64_t *dc = P64(b[D_C]), *dof = P64(b[D_O]), *df = P64(b[D_F]);
        Py_ssize_t ndf = N64(b[D_F]);
        const uint8_t *sflat = PU8(b[ST_FLAT]);
        const int64_t *soff = P64(b[ST_OFF]), *ssize = P64(b[ST_SIZE]);
        uint8_t *sdone = PU8(b[ST_DONE]);
        int64_t nstr = N64(b[ST_OFF]);
        const uint8_t *prefix[N_INTS];
        Py_ssize_t pos = 0;
        if (N64(b[R_TYP]) != nr || N64(b[R_IDX]) != nr || N64(b[S_NAME]) != ns || N64(b[S_CAT]) != ns ||
            N64(b[S_ARGSET]) != ns || N64(b[I_PLEN]) != N_INTS || N64(b[FO_C]) != ns || N64(b[FO_O]) != ns || N64(b[FI_C]) != ns ||
            N64(b[FI_O]) != ns || N64(b[C_VALUE]) != ncs || b[C_INT].view.len != ncs ||
            N64(b[BL_SIZE]) != nblob || N64(b[N_SIZE]) != nnames || b[N_DONE].view.len != nnames ||
            N64(b[D_C]) != nblob || N64(b[D_O]) != nblob || N64(b[ST_SIZE]) != nstr ||
            b[ST_DONE].view.len != nstr) {
            PyErr_SetString(PyExc_ValueError, "encode_batch: inconsistent lengths");
            goto done;
        }
        for (int k = 0; k < N_INTS; k++) {
            if (plen[k] < 0 || plen[k] > 100 || pos + plen[k] > pre.len) {
                PyErr_SetString(PyExc_ValueError, "encode_batch: bad annotation prefixes");
                goto done;
            }
            prefix[k] = (const uint8_t *)pre.buf + pos;
            pos += plen[k];
        }
        /* the records in two passes: (0) each record checked, the names and strings it uses for
           the first time noted, its size summed; (1) the interning packet, then the records written
           straight into a bytes object of the exact total size (no growth, no copy) */
        newn = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nr + 1));
        news = (int64_t *)malloc(sizeof(int64_t) * (size_t)(ndf + 1));
        if (!newn || !news) { PyErr_NoMemory(); goto done; }
        Py_ssize_t nn = 0, nsn = 0;
        uint64_t total = 0;
        uint8_t *p = NULL, *p0 = NULL;
        for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (Py_ssize_t q = 0; q < nn; q++)
                if (!blob_ok(&b[N_FLAT], noff, nsize, nnames, newn[q])) {
                    PyErr_SetString(PyExc_ValueError, "encode_batch: bad name entry");
                    goto done;
                }
            /* ascending order (np.unique): the few new ids sorted */
            for (Py_ssize_t a = 1; a < nn; a++) {
                int64_t x = newn[a]; Py_ssize_t c = a - 1;
                while (c >= 0 && newn[c] > x) { newn[c + 1] = newn[c]; c--; }
                newn[c + 1] = x;
            }
            for (Py_ssize_t a = 1; a < nsn; a++) {
                int64_t x = news[a]; Py_ssize_t c = a - 1;
                while (c >= 0 && news[c] > x) { news[c + 1] = news[c]; c--; }
                news[c + 1] = x;
            }
            uint64_t body = 0, pk = 0, t0 = nr ? (uint64_t)rts[0] : 0;
            if (nn || nsn) {
                for (Py_ssize_t q = 0; q < nn; q++) body += (uint64_t)nsize[newn[q]];
                for (Py_ssize_t q = 0; q < nsn; q++) body += (uint64_t)ssize[news[q]];
                pk = 1 + vlen(t0) + hl + 1 + vlen(body) + body;
                total += 1 + vlen(pk) + pk;
            }
            if (!(ret = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total))) goto done;
            p = p0 = (uint8_t *)PyBytes_AS_STRING(ret);
            if (nn || nsn) {
                *p++ = 0x0A;
                p = put_v(p, pk);
                *p++ = 0x40; p = put_v(p, t0);
                memcpy(p, sh, (size_t)hl); p += hl;
                *p++ = 0x62; p = put_v(p, body);
                for (Py_ssize_t q = 0; q < nn; q++) { memcpy(p, nflat + noff[newn[q]], (size_t)nsize[newn[q]]); p += nsize[newn[q]]; }
                for (Py_ssize_t q = 0; q < nsn; q++) { memcpy(p, sflat + soff[news[q]], (size_t)ssize[news[q]]); p += ssize[news[q]]; }
            }
        }
        for (Py_ssize_t r = 0; r < nr; r++) {
            int64_t t = rty[r], i = rix[r];
            uint64_t ts = (uint64_t)rts[r];
            uint64_t te;
            if (!pass) {
                if (t < 1 || t > 4 || i < 0 || (t == 4 ? i >= ncs : i >= ns)) {
                    PyErr_SetString(PyExc_ValueError, "encode_batch: bad record");
                    goto done;
                }
                if (t == 1 || t == 3) {
                    int64_t nm = name[i], as = aset[i];
                    if (nm < 0 || nm >= nnames || (as >= 0 && !blob_ok(&b[BL_FLAT], boff, bsize, nblob, as)) ||
                        foc[i] < 0 || foo[i] < 0 || foo[i] + foc[i] > nfo || fic[i] < 0 || fio[i] < 0 || fio[i] + fic[i] > nfi) {
                        PyErr_SetString(PyExc_ValueError, "encode_batch: bad slice reference");
                        goto done;
                    }
                    if (as >= 0 && (dc[as] < 0 || dof[as] < 0 || dof[as] + dc[as] > ndf)) {
                        PyErr_SetString(PyExc_ValueError, "encode_batch: bad string dependencies");
                        goto done;
                    }
                    if (!ndone[nm]) { ndone[nm] = 1; newn[nn++] = nm; }
                    for (int64_t q = as >= 0 ? dof[as] : 0; as >= 0 && q < dof[as] + dc[as]; q++) {
                        int64_t sid = df[q];
                        if (sid < 0 || sid >= nstr || !blob_ok(&b[ST_FLAT], soff, ssize, nstr, sid)) {
                            PyErr_SetString(PyExc_ValueError, "encode_batch: bad string id");
                            goto done;
                        }
                        if (!sdone[sid]) { sdone[sid] = 1; news[nsn++] = sid; }
                    }
                }
            }
            if (t == 1 || t == 3) {
                uint64_t tr = (uint64_t)track[i], nm = (uint64_t)(name[i] + 1), ct = (uint64_t)(cat[i] + 1);
                te = 1 + vlen((uint64_t)t) + 1 + vlen(tr) + 1 + vlen(nm) + 1 + vlen(ct);
                if (aset[i] >= 0) te += (uint64_t)bsize[aset[i]];
                for (int k = 0; k < N_INTS; k++)
                    if (iok[k][i]) te += 2 + (uint64_t)plen[k] + vlen((uint64_t)ival[k][i]);
                te += (uint64_t)(foc[i] + fic[i]) * 10;
                uint64_t pk = 1 + vlen(ts) + hl + 1 + vlen(te) + te;
                if (!pass) { total += 1 + vlen(pk) + pk; continue; }
                *p++ = 0x0A; p = put_v(p, pk);
                *p++ = 0x40; p = put_v(p, ts);
                memcpy(p, sh, (size_t)hl); p += hl;
                *p++ = 0x5A; p = put_v(p, te);
                *p++ = 0x48; p = put_v(p, (uint64_t)t);
                *p++ = 0x58; p = put_v(p, tr);
                *p++ = 0x50; p = put_v(p, nm);
                *p++ = 0x18; p = put_v(p, ct);
                if (aset[i] >= 0) { memcpy(p, bflat + boff[aset[i]], (size_t)bsize[aset[i]]); p += bsize[aset[i]]; }
                for (int k = 0; k < N_INTS; k++) {
                    if (!iok[k][i]) continue;
                    uint64_t v = (uint64_t)ival[k][i];
                    *p++ = 0x22;
                    *p++ = (uint8_t)(plen[k] + vlen(v));
                    memcpy(p, prefix[k], (size_t)plen[k]); p += plen[k];
                    p = put_v(p, v);
                }
                for (int64_t q = foo[i]; q < foo[i] + foc[i]; q++) { *p++ = 0xF9; *p++ = 0x02; p = put_le64(p, (uint64_t)fof[q]); }
                for (int64_t q = fio[i]; q < fio[i] + fic[i]; q++) { *p++ = 0x81; *p++ = 0x03; p = put_le64(p, (uint64_t)fif[q]); }
            } else if (t == 2) {
                uint64_t tr = (uint64_t)track[i];
                te = 2 + 1 + vlen(tr);
                uint64_t pk = 1 + vlen(ts) + hl + 1 + vlen(te) + te;
                if (!pass) { total += 1 + vlen(pk) + pk; continue; }
                *p++ = 0x0A; p = put_v(p, pk);
                *p++ = 0x40; p = put_v(p, ts);
                memcpy(p, sh, (size_t)hl); p += hl;
                *p++ = 0x5A; p = put_v(p, te);
                *p++ = 0x48; *p++ = 0x02;
                *p++ = 0x58; p = put_v(p, tr);
            } else {
                uint64_t tr = (uint64_t)ctrack[i];
                int is_int = cint[i] != 0;
                uint64_t iv = 0, dv = 0;
                if (is_int) iv = (uint64_t)(int64_t)cval[i];
                else memcpy(&dv, &cval[i], 8);
                te = 2 + 1 + vlen(tr) + (is_int ? 2 + vlen(iv) : 2 + 8);
                uint64_t pk = 1 + vlen(ts) + hl + 1 + vlen(te) + te;
                if (!pass) { total += 1 + vlen(pk) + pk; continue; }
                *p++ = 0x0A; p = put_v(p, pk);
                *p++ = 0x40; p = put_v(p, ts);
                memcpy(p, sh, (size_t)hl); p += hl;
                *p++ = 0x5A; p = put_v(p, te);
                *p++ = 0x48; *p++ = 0x04;
                *p++ = 0x58; p = put_v(p, tr);
                if (is_int) { *p++ = 0xF0; *p++ = 0x01; p = put_v(p, iv); }
                else { *p++ = 0xE1; *p++ = 0x02; p = put_le64(p, dv); }
            }
        }
        }
        if ((uint64_t)(p - p0) != total) {
            Py_CLEAR(ret);
            PyErr_SetString(PyExc_SystemError, "encode_batch: size pass and write pass disagree");
            goto done;
        }
    }
done:
    free(newn);
    free(news);
    for (int k = 0; k < NB; k++) rel_buf(&b[k]);
    PyBuffer_Release(&pre);
    if (seqh.buf != NULL) PyBuffer_Release(&seqh);
    return ret;
}

/* ---- arg sets ---------------------------------------------------------------------------- */

/* One DebugAnnotation (field 4 of TrackEvent) of a (name, value) pair; returns the string id
 * it uses (0 for none) or -1 on error. Values: bool, int (int64 or uint64 range), float,
 * anything else as str(value) interned in ``strings`` (id = its number of entries + 1). */
static int64_t encode_pair(Out *o, PyObject *k, PyObject *v, PyObject *ann_iid, PyObject *strings) {
    uint8_t body[32];
    uint8_t *p = body;
    int64_t sid = 0;
    PyObject *iid = PyDict_GetItemWithError(ann_iid, k);
    if (!iid) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, k);
        return -1;
    }
    long long ii = PyLong_AsLongLong(iid);
    if (ii == -1 && PyErr_Occurred()) return -1;
    *p++ = 0x08; p = put_v(p, (uint64_t)ii);
    if (PyBool_Check(v)) {
        *p++ = 0x10; *p++ = v == Py_True ? 1 : 0;
    } else if (PyLong_Check(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        uint64_t u;
        if (overflow > 0) {
            u = PyLong_AsUnsignedLongLong(v);
            if (u == (uint64_t)-1 && PyErr_Occurred()) return -1;
        } else if (overflow < 0) {
            PyErr_SetString(PyExc_OverflowError, "integer annotation below int64");
            return -1;
        } else {
            if (x == -1 && PyErr_Occurred()) return -1;
            u = (uint64_t)x;
        }
        *p++ = 0x20; p = put_v(p, u);
    } else if (PyFloat_Check(v)) {
        double d = PyFloat_AsDouble(v);
        uint64_t u;
        memcpy(&u, &d, 8);
        *p++ = 0x29; p = put_le64(p, u);
    } else {
        PyObject *str = PyUnicode_Check(v) ? (Py_INCREF(v), v) : PyObject_Str(v);
        if (!str) return -1;
        PyObject *got = PyDict_GetItemWithError(strings, str);
        if (got) {
            sid = PyLong_AsLongLong(got);
        } else if (PyErr_Occurred()) {
            Py_DECREF(str);
            return -1;
        } else {
            sid = (int64_t)PyDict_GET_SIZE(strings) + 1;
            PyObject *num = PyLong_FromLongLong(sid);
            if (!num || PyDict_SetItem(strings, str, num) < 0) { Py_XDECREF(num); Py_DECREF(str); return -1; }
            Py_DECREF(num);
        }
        Py_DECREF(str);
        if (sid == -1 && PyErr_Occurred()) return -1;
        *p++ = 0x88; *p++ = 0x01; p = put_v(p, (uint64_t)sid);
    }
    Py_ssize_t blen = p - body;
    if (reserve(o, 1 + 10 + blen)) { PyErr_NoMemory(); return -1; }
    uint8_t *q = o->p + o->n;
    *q++ = 0x22;
    q = put_v(q, (uint64_t)blen);
    memcpy(q, body, (size_t)blen);
    o->n = (q + blen) - o->p;
    return sid;
}

/* encode_argsets(argsets, ann_iid, strings) -> (flat, sizes, dep_counts, dep_flat)
 * argsets: a list of tuples of (name, value) pairs; ann_iid: name -> interned id; strings:
 * str -> id, extended in place with the string values first seen. Returns the encoded
 * DebugAnnotations of each set (concatenated, and each set's byte size as int64 bytes) and
 * the string ids each set uses (count per set, then all ids; int64 bytes). */
static PyObject *encode_argsets(PyObject *self, PyObject *args) {
    PyObject *sets, *ann_iid, *strings;
    Out flat = {0}, sizes = {0}, dcount = {0}, dflat = {0};
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &sets, &PyDict_Type, &ann_iid, &PyDict_Type, &strings)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(sets);
    if (reserve(&sizes, 8 * n + 8) || reserve(&dcount, 8 * n + 8)) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t a = 0; a < n; a++) {
        PyObject *set = PyList_GET_ITEM(sets, a);
        if (!PyTuple_Check(set)) { PyErr_SetString(PyExc_TypeError, "arg set is not a tuple"); goto done; }
        Py_ssize_t before = flat.n;
        int64_t nd = 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(set); j++) {
            PyObject *pair = PyTuple_GET_ITEM(set, j);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "arg set item is not a (name, value) pair");
                goto done;
            }
            int64_t sid = encode_pair(&flat, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), ann_iid, strings);
            if (sid < 0) goto done;
            if (sid) {
                if (reserve(&dflat, 8)) { PyErr_NoMemory(); goto done; }
                memcpy(dflat.p + dflat.n, &sid, 8);
                dflat.n += 8;
                nd++;
            }
        }
        int64_t sz = flat.n - before;
        memcpy(sizes.p + 8 * a, &sz, 8);
        memcpy(dcount.p + 8 * a, &nd, 8);
    }
    ret = Py_BuildValue("(y#y#y#y#)", flat.p ? (char *)flat.p : "", flat.n, sizes.p, (Py_ssize_t)(8 * n),
                        dcount.p, (Py_ssize_t)(8 * n), dflat.p ? (char *)dflat.p : "", dflat.n);
done:
    free(flat.p); free(sizes.p); free(dcount.p); free(dflat.p);
    return ret;
}


/* encode_bucket_sets(base_flat, base_off, base_size, ext_base, ext_row, values, iids) -> (flat, sizes)
 * The extended arg sets of export/buckets.ArgSets: set e is the encoded base set ext_base[e]
 * (base_flat[base_off[a]:+base_size[a]]) followed by one integer DebugAnnotation (name iid
 * iids[j], int_value values[ext_row[e], j]) per nonzero column j, in column order: the bytes
 * encode_argsets gives for the same (name, int) pairs. values: int64, rows x len(iids). */
static PyObject *encode_bucket_sets(PyObject *self, PyObject *args) {
    PyObject *o[7];
    Buf b[7];
    Out flat = {0}, sizes = {0};
    PyObject *ret = NULL;
    const char *names[7] = {"base_flat", "base_off", "base_size", "ext_base", "ext_row", "values", "iids"};
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    for (int k = 0; k < 7; k++)
        if (get_buf(o[k], &b[k], k == 0 ? 1 : 8, 0, names[k])) goto done;
    {
        const uint8_t *bf = PU8(b[0]);
        const int64_t *boff = P64(b[1]), *bsz = P64(b[2]), *eb = P64(b[3]), *er = P64(b[4]), *val = P64(b[5]), *iid = P64(b[6]);
        int64_t nbase = N64(b[1]), ne = N64(b[3]), nc = N64(b[6]);
        if (N64(b[2]) != nbase || N64(b[4]) != ne || (nc && N64(b[5]) % nc)) {
            PyErr_SetString(PyExc_ValueError, "encode_bucket_sets: inconsistent lengths");
            goto done;
        }
        int64_t nrow = nc ? N64(b[5]) / nc : 0;
        if (reserve(&sizes, 8 * ne + 8)) { PyErr_NoMemory(); goto done; }
        for (int64_t e = 0; e < ne; e++) {
            int64_t a = eb[e], r = er[e];
            if (!blob_ok(&b[0], boff, bsz, nbase, a) || r < 0 || (nc && r >= nrow)) {
                PyErr_SetString(PyExc_ValueError, "encode_bucket_sets: bad set reference");
                goto done;
            }
            Py_ssize_t before = flat.n;
            if (reserve(&flat, (Py_ssize_t)bsz[a] + 24 * (Py_ssize_t)nc)) { PyErr_NoMemory(); goto done; }
            memcpy(flat.p + flat.n, bf + boff[a], (size_t)bsz[a]);
            uint8_t *p = flat.p + flat.n + bsz[a];
            for (int64_t j = 0; j < nc; j++) {
                uint64_t v = (uint64_t)val[r * nc + j], ii = (uint64_t)iid[j];
                if (!v) continue;
                *p++ = 0x22;
                *p++ = (uint8_t)(2 + vlen(ii) + vlen(v));
                *p++ = 0x08; p = put_v(p, ii);
                *p++ = 0x20; p = put_v(p, v);
            }
            flat.n = p - flat.p;
            int64_t sz = flat.n - before;
            memcpy(sizes.p + 8 * e, &sz, 8);
        }
        ret = Py_BuildValue("(y#y#)", flat.p ? (char *)flat.p : "", flat.n, sizes.p, (Py_ssize_t)(8 * ne));
    }
done:
    free(flat.p); free(sizes.p);
    for (int k = 0; k < 7; k++) rel_buf(&b[k]);
    return ret;
}

/* ---- first-seen ids of row tuples (export layout: names, arg sets, groups, launch joins) -- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* A tuple of K int64 columns of one length: their buffers (*cb) and data (*cv), *n = the length
 * (n_want if >= 0, else the first column's). Returns -1 with an exception set; cols_rel frees. */
static int cols_get(PyObject *cols, Py_ssize_t k, Buf **cb, const int64_t ***cv, Py_ssize_t n_want, Py_ssize_t *n,
                    const char *what) {
    *cb = (Buf *)calloc((size_t)(k ? k : 1), sizeof(Buf));
    *cv = (const int64_t **)calloc((size_t)(k ? k : 1), sizeof(int64_t *));
    if (!*cb || !*cv) { PyErr_NoMemory(); return -1; }
    *n = n_want;
    for (Py_ssize_t j = 0; j < k; j++) {
        if (get_buf(PyTuple_GET_ITEM(cols, j), &(*cb)[j], 8, 0, "column") < 0) return -1;
        if (*n < 0) *n = N64((*cb)[j]);
        if (N64((*cb)[j]) != *n) { PyErr_Format(PyExc_ValueError, "%s: columns of different lengths", what); return -1; }
        (*cv)[j] = P64((*cb)[j]);
    }
    return 0;
}

static void cols_rel(Buf *cb, const int64_t **cv, Py_ssize_t k) {
    for (Py_ssize_t j = 0; cb && j < k; j++) rel_buf(&cb[j]);
    free(cb);
    free((void *)cv);
}

/* col_ranges(cols, lo_out, hi_out): the least and greatest value of each of K int64 columns of one
 * length n >= 1, in one pass over each column (numpy: two). The GIL is released. */
static PyObject *col_ranges(PyObject *self, PyObject *args) {
    PyObject *cols, *lo_o, *hi_o, *ret = NULL;
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &cols, &lo_o, &hi_o)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(cols), n = -1;
    Buf lo = {0}, hi = {0}, *cb = NULL;
    const int64_t **cv = NULL;
    if (get_buf(lo_o, &lo, 8, 1, "lo") < 0 || get_buf(hi_o, &hi, 8, 1, "hi") < 0) goto done;
    if (k < 1 || N64(lo) != k || N64(hi) != k) { PyErr_SetString(PyExc_ValueError, "col_ranges: one lo and hi per column"); goto done; }
    if (cols_get(cols, k, &cb, &cv, -1, &n, "col_ranges") < 0) goto done;
    if (n < 1) { PyErr_SetString(PyExc_ValueError, "col_ranges: empty columns"); goto done; }
    {
        int64_t *l = P64(lo), *h = P64(hi);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < k; j++) {
            const int64_t *v = cv[j];
            int64_t a = v[0], b = v[0];
            for (Py_ssize_t i = 1; i < n; i++) {
                a = v[i] < a ? v[i] : a;
                b = v[i] > b ? v[i] : b;
            }
            l[j] = a;
            h[j] = b;
        }
        Py_END_ALLOW_THREADS
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    cols_rel(cb, cv, k);
    rel_buf(&lo); rel_buf(&hi);
    return ret;
}

/* pack_rows(cols, lo, radix, out): out[i] = the mixed-radix number of row i's tuple,
 * ((cols[0][i] - lo[0]) * radix[1] + cols[1][i] - lo[1]) * radix[2] + ... in one pass over the K
 * columns (numpy would make a temporary array and a pass per column and operation). The caller
 * (export.fastlayout._pack) gives each column's range lo..lo+radix-1 and keeps the product of the
 * radixes below 2^62; values outside their range are an error. The GIL is released. */
static PyObject *pack_rows(PyObject *self, PyObject *args) {
    PyObject *cols, *lo_o, *rad_o, *out_o, *ret = NULL;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyTuple_Type, &cols, &lo_o, &rad_o, &out_o)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(cols), n = 0;
    Buf lo = {0}, rad = {0}, out = {0}, *cb = NULL;
    const int64_t **cv = NULL;
    if (get_buf(lo_o, &lo, 8, 0, "lo") < 0 || get_buf(rad_o, &rad, 8, 0, "radix") < 0 || get_buf(out_o, &out, 8, 1, "out") < 0)
        goto done;
    if (k < 1 || N64(lo) != k || N64(rad) != k) { PyErr_SetString(PyExc_ValueError, "pack_rows: one lo and radix per column"); goto done; }
    const int64_t *l = P64(lo), *r = P64(rad);
    for (Py_ssize_t j = 0; j < k; j++)
        if (r[j] < 1) { PyErr_SetString(PyExc_ValueError, "pack_rows: radix < 1"); goto done; }
    if (cols_get(cols, k, &cb, &cv, N64(out), &n, "pack_rows (and out)") < 0) goto done;
    {
        int64_t *o = P64(out);
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t acc = 0;
            for (Py_ssize_t j = 0; j < k; j++) {
                uint64_t x = (uint64_t)cv[j][i] - (uint64_t)l[j];
                bad |= x >= (uint64_t)r[j];
                acc = acc * (uint64_t)r[j] + x;
            }
            o[i] = (int64_t)acc;
        }
        Py_END_ALLOW_THREADS
        if (bad) { PyErr_SetString(PyExc_ValueError, "pack_rows: a value outside its column's range"); goto done; }
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    cols_rel(cb, cv, k);
    rel_buf(&lo); rel_buf(&rad); rel_buf(&out);
    return ret;
}

/* first_seen(cols, ids_out, first_out, order=None) -> number of distinct rows
 * cols: tuple of K int64 buffers (a row = the K values at one index; the caller encodes nulls as
 * a further column). Row i is cols[.][order[i]] when `order` (int64 indices) is given, else
 * cols[.][i]; n = len(ids_out) rows. ids_out[i]: the id of row i's tuple, ids numbered in order of
 * first appearance; first_out[id]: the first i with that tuple (first_out has n items, the first
 * `distinct` are written). One column of small non-negative values uses a direct table; otherwise
 * one open-addressing hash table, equality checked on the values. The GIL is released. */
static PyObject *first_seen(PyObject *self, PyObject *args) {
    PyObject *cols, *ids_o, *first_o, *order_o = Py_None;
    if (!PyArg_ParseTuple(args, "O!OO|O", &PyTuple_Type, &cols, &ids_o, &first_o, &order_o)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(cols);
    Buf ids = {0}, first = {0}, ord = {0}, *cb = NULL;
    const int64_t **cv = NULL;
    int64_t *table = NULL;
    const int64_t *op = NULL;
    PyObject *ret = NULL;
    Py_ssize_t n = -1, distinct = 0, m = -1;
    if (k < 1) { PyErr_SetString(PyExc_ValueError, "first_seen: no columns"); goto done; }
    if (get_buf(ids_o, &ids, 8, 1, "ids") < 0 || get_buf(first_o, &first, 8, 1, "first") < 0) goto done;
    n = N64(ids);
    if (N64(first) != n) { PyErr_SetString(PyExc_ValueError, "first: not as long as ids"); goto done; }
    if (cols_get(cols, k, &cb, &cv, -1, &m, "first_seen") < 0) goto done;
    if (order_o != Py_None) {
        if (get_buf(order_o, &ord, 8, 0, "order") < 0) goto done;
        if (N64(ord) != n) { PyErr_SetString(PyExc_ValueError, "order: not as long as ids"); goto done; }
        op = P64(ord);
        for (Py_ssize_t i = 0; i < n; i++)
            if (op[i] < 0 || op[i] >= m) { PyErr_SetString(PyExc_IndexError, "order: index out of range"); goto done; }
    } else if (m != n) { PyErr_SetString(PyExc_ValueError, "columns not as long as ids"); goto done; }
#define ROW(i) (op ? op[i] : (i))
    if (k == 1 && n > 0) {  /* one column of small non-negative values: a direct table, no hashing */
        const int64_t *v = cv[0];
        int64_t lo = v[ROW(0)], hi = lo;
        for (Py_ssize_t i = 1; i < n; i++) { int64_t x = v[ROW(i)]; if (x < lo) lo = x; if (x > hi) hi = x; }
        if (lo >= 0 && hi < (int64_t)1 << 24 && hi <= 4 * (int64_t)n + 1024) {
            table = (int64_t *)malloc((size_t)(hi + 1) * sizeof(int64_t));
            if (!table) { PyErr_NoMemory(); goto done; }
            memset(table, 0xff, (size_t)(hi + 1) * sizeof(int64_t));
            int64_t *io = P64(ids), *fo = P64(first);
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t x = v[ROW(i)];
                int64_t id = table[x];
                if (id < 0) { id = table[x] = distinct; fo[distinct++] = i; }
                io[i] = id;
            }
            Py_END_ALLOW_THREADS
            ret = PyLong_FromSsize_t(distinct);
            goto done;
        }
    }
    {
        /* the table grows with the distinct rows (usually few: it stays in cache); a row equal to
           the previous one (runs are common) takes the previous id without a lookup */
        size_t cap = 1024;
        table = (int64_t *)malloc(cap * sizeof(int64_t));
        if (!table) { PyErr_NoMemory(); goto done; }
        memset(table, 0xff, cap * sizeof(int64_t));  /* -1: empty */
        int64_t *io = P64(ids), *fo = P64(first);
        size_t mask = cap - 1;
        int oom = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t ri = ROW(i);
            if (i > 0) {
                Py_ssize_t rp = ROW(i - 1), j = 0;
                while (j < k && cv[j][rp] == cv[j][ri]) j++;
                if (j == k) { io[i] = io[i - 1]; continue; }
            }
            uint64_t h = 0x9e3779b97f4a7c15ULL;
            for (Py_ssize_t j = 0; j < k; j++) h = mix64(h ^ (uint64_t)cv[j][ri]) + (uint64_t)j;
            size_t slot = (size_t)h & mask;
            for (;;) {
                int64_t id = table[slot];
                if (id < 0) {
                    table[slot] = distinct;
                    fo[distinct] = i;
                    io[i] = distinct++;
                    break;
                }
                Py_ssize_t r = ROW(fo[id]);
                Py_ssize_t j = 0;
                while (j < k && cv[j][r] == cv[j][ri]) j++;
                if (j == k) { io[i] = id; break; }
                slot = (slot + 1) & mask;
            }
            if ((size_t)distinct * 2 > cap) {  /* grow x4 and re-insert every id (hash of its first row) */
                size_t ncap = cap * 4;
                int64_t *nt = (int64_t *)malloc(ncap * sizeof(int64_t));
                if (!nt) { oom = 1; break; }
                memset(nt, 0xff, ncap * sizeof(int64_t));
                for (Py_ssize_t d = 0; d < distinct; d++) {
                    Py_ssize_t r = ROW(fo[d]);
                    uint64_t h2 = 0x9e3779b97f4a7c15ULL;
                    for (Py_ssize_t j = 0; j < k; j++) h2 = mix64(h2 ^ (uint64_t)cv[j][r]) + (uint64_t)j;
                    size_t sl = (size_t)h2 & (ncap - 1);
                    while (nt[sl] >= 0) sl = (sl + 1) & (ncap - 1);
                    nt[sl] = d;
                }
                free(table);
                table = nt;
                cap = ncap;
                mask = cap - 1;
            }
        }
        Py_END_ALLOW_THREADS
        if (oom) { PyErr_NoMemory(); goto done; }
    }
#undef ROW
    ret = PyLong_FromSsize_t(distinct);
done:
    cols_rel(cb, cv, k);
    rel_buf(&ids); rel_buf(&first); rel_buf(&ord);
    free(table);
    return ret;
}

/* ---- the launch join of the export layout ------------------------------------------------ */

/* launch_join(rank, corr, launch, gpu, src_out, dst_out) -> number of edges
 * rank, corr: int64 per slice; launch, gpu: one byte per slice (the launch slices and the GPU
 * slices with a correlation). Each GPU slice is joined to the first launch slice (lowest index)
 * of the same (rank, correlation); the edges (launch, GPU slice) are written sorted by launch,
 * then GPU slice (a counting sort over the launches). src_out / dst_out: int64, at least as long
 * as the GPU slices. One hash table of the launches; the GIL is released. */
static PyObject *launch_join(PyObject *self, PyObject *args) {
    PyObject *o[6];
    Buf b[6];
    const char *names[6] = {"rank", "corr", "launch", "gpu", "src_out", "dst_out"};
    PyObject *ret = NULL;
    int64_t *lrow = NULL, *table = NULL, *lof = NULL, *cnt = NULL;
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    for (int k = 0; k < 6; k++)
        if (get_buf(o[k], &b[k], (k == 2 || k == 3) ? 1 : 8, k >= 4, names[k]) < 0) goto done;
    Py_ssize_t n = N64(b[0]);
    if (N64(b[1]) != n || b[2].view.len != n || b[3].view.len != n || N64(b[5]) != N64(b[4])) {
        PyErr_SetString(PyExc_ValueError, "launch_join: inconsistent lengths");
        goto done;
    }
    const int64_t *R = P64(b[0]), *C = P64(b[1]);
    const uint8_t *L = PU8(b[2]), *G = PU8(b[3]);
    int64_t *S = P64(b[4]), *D = P64(b[5]);
    Py_ssize_t nl = 0, ng = 0, cap_out = N64(b[4]);
    for (Py_ssize_t i = 0; i < n; i++) { nl += L[i] != 0; ng += G[i] != 0; }
    if (cap_out < ng) { PyErr_SetString(PyExc_ValueError, "launch_join: outputs shorter than the GPU slices"); goto done; }
    size_t cap = 16;
    while (cap < 2 * (size_t)nl + 16) cap <<= 1;
    lrow = (int64_t *)malloc(((size_t)nl + 1) * sizeof(int64_t));
    table = (int64_t *)malloc(3 * cap * sizeof(int64_t));  /* (rank, corr, launch ordinal or -1) inline */
    lof = (int64_t *)malloc(((size_t)ng + 1) * sizeof(int64_t));
    cnt = (int64_t *)calloc((size_t)nl + 1, sizeof(int64_t));
    if (!lrow || !table || !lof || !cnt) { PyErr_NoMemory(); goto done; }
    Py_ssize_t m = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t s = 0; s < cap; s++) table[3 * s + 2] = -1;
    size_t mask = cap - 1;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {  /* launches in slice order: the first of a key wins */
        if (!L[i]) continue;
        size_t s = (size_t)mix64(mix64(0x9e3779b97f4a7c15ULL ^ (uint64_t)R[i]) ^ (uint64_t)C[i]) & mask;
        for (;;) {
            int64_t *t = table + 3 * s;
            if (t[2] < 0) { t[0] = R[i]; t[1] = C[i]; t[2] = k; break; }
            if (t[0] == R[i] && t[1] == C[i]) break;
            s = (s + 1) & mask;
        }
        lrow[k++] = i;
    }
    Py_ssize_t e = 0;
    int64_t pr = 0, pc = 0, pt = -2;  /* the previous GPU slice's key and launch (graph launches repeat) */
    for (Py_ssize_t i = 0; i < n && nl; i++) {  /* GPU slices in slice order: their launch ordinal */
        if (!G[i]) continue;
        int64_t hit = -1;
        if (pt != -2 && R[i] == pr && C[i] == pc) hit = pt;
        else {
            size_t s = (size_t)mix64(mix64(0x9e3779b97f4a7c15ULL ^ (uint64_t)R[i]) ^ (uint64_t)C[i]) & mask;
            for (;;) {
                const int64_t *t = table + 3 * s;
                if (t[2] < 0) break;
                if (t[0] == R[i] && t[1] == C[i]) { hit = t[2]; break; }
                s = (s + 1) & mask;
            }
            pr = R[i]; pc = C[i]; pt = hit;
        }
        if (hit >= 0) { lof[e] = hit; D[e] = i; e++; cnt[hit]++; }
    }
    /* counting sort by launch ordinal (= by launch slice), stable: GPU slices stay ascending */
    int64_t acc = 0;
    for (Py_ssize_t t = 0; t < nl; t++) { int64_t c = cnt[t]; cnt[t] = acc; acc += c; }
    for (Py_ssize_t j = 0; j < e; j++) S[cnt[lof[j]]++] = j;  /* S: positions, then rewritten below */
    for (Py_ssize_t j = 0; j < e; j++) lof[j] = D[S[j]];
    for (Py_ssize_t j = 0; j < e; j++) D[j] = lof[j];
    /* the launch of each sorted edge: walk the launch ordinals' ranges */
    {
        Py_ssize_t j = 0;
        for (Py_ssize_t t = 0; t < nl; t++)
            for (; j < cnt[t]; j++) S[j] = lrow[t];
    }
    m = e;
    Py_END_ALLOW_THREADS
    ret = PyLong_FromSsize_t(m);
done:
    for (int k2 = 0; k2 < 6; k2++) rel_buf(&b[k2]);
    free(lrow); free(table); free(lof); free(cnt);
    return ret;
}

/* ---- tie runs of the export's slice order ------------------------------------------------- */

typedef struct {
    int64_t k, r;
} KeyRow;

static int keyrow_cmp(const void *a, const void *b) {
    const KeyRow *x = (const KeyRow *)a, *y = (const KeyRow *)b;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

/* sort_ties(order, start, dur, key=None) -> None
 * order: int64 row numbers (written in place); start, dur, key: int64 per row. Without key, order is
 * sorted by start (stable) and each run of equal start is sorted to (longer first, row); with key,
 * order is sorted by (start, longer first, row) and each run of equal (start, dur) is sorted to
 * (key, row). So a stable argsort by start, then sort_ties(o, start, dur), then
 * sort_ties(o, start, dur, key) give the order of np.lexsort((rows, key, -dur, start)). Runs are
 * short in traces: insertion sort, qsort past 16 rows. The GIL is released. Every row number is
 * checked before anything is written; out of memory part way leaves the runs before it sorted. */
static PyObject *sort_ties(PyObject *self, PyObject *args) {
    PyObject *oo, *os, *od, *ok = Py_None;
    Buf bo = {0}, bs = {0}, bd = {0}, bk = {0};
    PyObject *ret = NULL;
    KeyRow *tmp = NULL;
    size_t cap = 0;
    if (!PyArg_ParseTuple(args, "OOO|O", &oo, &os, &od, &ok)) return NULL;
    if (get_buf(oo, &bo, 8, 1, "order") || get_buf(os, &bs, 8, 0, "start") || get_buf(od, &bd, 8, 0, "dur") ||
        (ok != Py_None && get_buf(ok, &bk, 8, 0, "key")))
        goto done;
    Py_ssize_t n = N64(bo), m = N64(bs);
    if (N64(bd) != m || (ok != Py_None && N64(bk) != m)) {
        PyErr_SetString(PyExc_ValueError, "sort_ties: start, dur and key differ in length");
        goto done;
    }
    int64_t *O = P64(bo);
    const int64_t *S = P64(bs), *D = P64(bd), *K = ok != Py_None ? P64(bk) : NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (O[i] < 0 || O[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "sort_ties: a row number out of range");
            goto done;
        }
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i + 1;
        const int64_t s0 = S[O[i]], d0 = D[O[i]];
        while (j < n && S[O[j]] == s0 && (!K || D[O[j]] == d0)) j++;
        Py_ssize_t len = j - i;
        if (len > 1) {
            if ((size_t)len > cap) {
                size_t c = cap ? cap : 64;
                while (c < (size_t)len) c <<= 1;
                KeyRow *t = (KeyRow *)realloc(tmp, c * sizeof(KeyRow));
                if (!t) { oom = 1; break; }
                tmp = t;
                cap = c;
            }
            for (Py_ssize_t t = 0; t < len; t++) {
                int64_t r = O[i + t];
                /* without key: longer first, as the key -dur without its overflow: dur's complement */
                tmp[t].k = K ? K[r] : ~D[r];
                tmp[t].r = r;
            }
            if (len <= 16) {
                for (Py_ssize_t a = 1; a < len; a++) {
                    KeyRow x = tmp[a];
                    Py_ssize_t b = a;
                    while (b > 0 && keyrow_cmp(&tmp[b - 1], &x) > 0) { tmp[b] = tmp[b - 1]; b--; }
                    tmp[b] = x;
                }
            } else {
                qsort(tmp, (size_t)len, sizeof(KeyRow), keyrow_cmp);
            }
            for (Py_ssize_t t = 0; t < len; t++) O[i + t] = tmp[t].r;
        }
        i = j;
    }
    Py_END_ALLOW_THREADS
    if (oom) { PyErr_NoMemory(); goto done; }
    ret = Py_None;
    Py_INCREF(ret);
done:
    free(tmp);
    rel_buf(&bo); rel_buf(&bs); rel_buf(&bd); rel_buf(&bk);
    return ret;
}

static PyMethodDef METHODS[] = {
    {"sort_ties", sort_ties, METH_VARARGS, "Sorts the tie runs of the export's slice order (see export/fastlayout.py)."},
    {"launch_join", launch_join, METH_VARARGS, "Launch -> GPU slice edges on (rank, correlation) (see export/fastlayout.py)."},
    {"first_seen", first_seen, METH_VARARGS, "First-seen ids of row tuples (reference: export/fastlayout.py first_seen)."},
    {"col_ranges", col_ranges, METH_VARARGS, "Least and greatest value of each column (see export/fastlayout.py)."},
    {"pack_rows", pack_rows, METH_VARARGS, "Mixed-radix numbers of row tuples (see export/fastlayout.py)."},
    {"assign_lanes_grouped", assign_lanes_grouped, METH_VARARGS, "Greedy lanes per group (see lanes.py)."},
    {"merge_records", merge_records, METH_VARARGS, "Write order of slice ends, counters and opens."},
    {"encode_batch", encode_batch, METH_VARARGS, "One batch of TracePackets (see perfetto.py)."},
    {"encode_argsets", encode_argsets, METH_VARARGS, "DebugAnnotations of arg sets (see perfetto.py)."},
    {"encode_bucket_sets", encode_bucket_sets, METH_VARARGS, "DebugAnnotations of bucket arg sets (see export/buckets.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "tracekit._core", "tracekit's compiled loops.", -1, METHODS};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&MODULE); }
