/* tracekit._kineto: a one-pass scanner of Kineto (torch.profiler) Chrome-trace JSON into columns.
 *
 * scan(data) -> tuple | None. It accepts only the common shape of Kineto's files and returns
 * None for anything else (the caller then runs the msgspec decoder, tracekit.ingest.kineto,
 * which also names any error): every byte is checked as JSON (strings UTF-8 and escapes,
 * numbers, nesting), and on the kept events (ph X / i / I) every field must have its usual
 * type (cat/name strings; pid/tid integers or strings; ts/dur integers or decimals with at
 * most three decimals, converted exactly to integer ns from the literal text; args integers /
 * strings), every ph must be one of Chrome's phase letters, no key may repeat in an object.
 * Strings are interned while scanning (one table, codes per row).
 *
 * Result: (n_all, top_spans, strings, cols, coll) where n_all counts every traceEvents element,
 * top_spans is a list of (key, start, end) byte spans of the other top-level values (None for
 * a bare event list), strings the interned table (list of str), cols a tuple of bytes (int64
 * arrays, then uint8 masks, see COLS), coll the rows with a "Collective name" (bytes arrays).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include "arrow_c.h"
#include "intern.h" /* StrTable: the scanner's string table */

typedef struct {
    void *p;
    Py_ssize_t n, cap, item;
} Vec;

static int vgrow(Vec *v) {
    Py_ssize_t cap = v->cap ? 2 * v->cap : 1024;
    void *p = realloc(v->p, (size_t)(cap * v->item));
    if (!p) return -1;
    v->p = p;
    v->cap = cap;
    return 0;
}

static inline int vpush(Vec *v, const void *x) {
    if (v->n == v->cap && vgrow(v)) return -1;
    memcpy((char *)v->p + v->n * v->item, x, (size_t)v->item);
    v->n++;
    return 0;
}

static inline int vpush64(Vec *v, int64_t x) {
    if (v->n == v->cap && vgrow(v)) return -1;
    ((int64_t *)v->p)[v->n++] = x;
    return 0;
}

static inline int vpush8(Vec *v, uint8_t x) {
    if (v->n == v->cap && vgrow(v)) return -1;
    ((uint8_t *)v->p)[v->n++] = x;
    return 0;
}

/* ---- string table -------------------------------------------------------------------------- */

typedef struct {
    StrTable st; /* the distinct strings; decoded escapes are kept by offset into the arena */
    char *arena;
    Py_ssize_t arena_n, arena_cap;
} Table;

/* code of the string s[0:n] (is_arena: s is at arena offset off) */
static inline int64_t intern(Table *t, const char *s, Py_ssize_t n, int is_arena, Py_ssize_t off) {
    return strtable_intern(&t->st, s, n, is_arena ? off : -1);
}

/* ---- scanner ------------------------------------------------------------------------------- */

typedef struct {
    const char *p, *end, *base;
    Table *tab;
    int depth;
} Sc;

#define FAIL (-1)

static inline void ws(Sc *s) {
    if (s->p < s->end && (unsigned char)*s->p > ' ') return; /* the usual case: no whitespace */
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static inline int lit(Sc *s, const char *w, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, w, (size_t)n)) return FAIL;
    s->p += n;
    return 0;
}

/* validate one UTF-8 sequence starting at p (p[0] >= 0x80); returns its length or 0 */
static inline int utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(const char *p, const char *end, unsigned *u) {
    if (end - p < 4) return FAIL;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return FAIL;
        v = v * 16 + (unsigned)h;
    }
    *u = v;
    return 0;
}

/* A string at s->p (on the opening quote). With want: its interned code in *code. Without:
 * only validated. Escapes are decoded into the table's arena. */
static int string_esc(Sc *s, int want, int64_t *code, int *esc) {
    const char *start = ++s->p;
    int escaped = 0;
    while (1) {
        /* eight plain bytes at a time: none of '"', '\\', a control byte or a non-ASCII byte */
        while (s->end - s->p >= 8) {
            uint64_t w = load64(s->p);
            uint64_t q = w ^ 0x2222222222222222ULL, b = w ^ 0x5C5C5C5C5C5C5C5CULL;
            uint64_t m = ((q - 0x0101010101010101ULL) & ~q) | ((b - 0x0101010101010101ULL) & ~b) |
                         ((w - 0x2020202020202020ULL) & ~w) | w;
            m &= 0x8080808080808080ULL;
            if (m) { s->p += __builtin_ctzll(m) >> 3; break; }
            s->p += 8;
        }
        if (s->p >= s->end) return FAIL;
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') break;
        if (c < 0x20) return FAIL;
        if (c == '\\') {
            escaped = 1;
            s->p++;
            if (s->p >= s->end) return FAIL;
            char e = *s->p;
            if (e == 'u') {
                unsigned u;
                if (read_u4(s->p + 1, s->end, &u)) return FAIL;
                s->p += 5;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' || read_u4(s->p + 2, s->end, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return FAIL;
                    s->p += 6;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return FAIL;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return FAIL;
            s->p++;
            continue;
        }
        if (c >= 0x80) {
            int k = utf8_seq((const unsigned char *)s->p, (const unsigned char *)s->end);
            if (!k) return FAIL;
            s->p += k;
            continue;
        }
        s->p++;
    }
    const char *stop = s->p++;
    if (esc) *esc = escaped;
    if (!want) return 0;
    Table *t = s->tab;
    if (!escaped) {
        *code = intern(t, start, stop - start, 0, 0);
        return *code < 0 ? FAIL : 0;
    }
    /* decode into the arena (at most as long as the source) */
    Py_ssize_t need = stop - start;
    if (t->arena_n + need > t->arena_cap) {
        Py_ssize_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_n + need) cap *= 2;
        char *a = (char *)realloc(t->arena, (size_t)cap);
        if (!a) return FAIL;
        t->arena = a;
        t->arena_cap = cap;
    }
    char *o = t->arena + t->arena_n;
    const char *q = start;
    while (q < stop) {
        if (*q != '\\') { *o++ = *q++; continue; }
        q++;
        char e = *q++;
        unsigned u;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        default: /* u */
            read_u4(q, stop, &u);
            q += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo;
                read_u4(q + 2, stop, &lo);
                q += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u < 0x80) *o++ = (char)u;
            else if (u < 0x800) { *o++ = (char)(0xC0 | (u >> 6)); *o++ = (char)(0x80 | (u & 0x3F)); }
            else if (u < 0x10000) {
                *o++ = (char)(0xE0 | (u >> 12)); *o++ = (char)(0x80 | ((u >> 6) & 0x3F)); *o++ = (char)(0x80 | (u & 0x3F));
            } else {
                *o++ = (char)(0xF0 | (u >> 18)); *o++ = (char)(0x80 | ((u >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((u >> 6) & 0x3F)); *o++ = (char)(0x80 | (u & 0x3F));
            }
        }
    }
    Py_ssize_t off = t->arena_n, len = o - (t->arena + t->arena_n);
    int64_t c = intern(t, t->arena + off, len, 1, off);
    if (c < 0) return FAIL;
    if (c == t->st.n - 1 && t->st.items[c].off == off) t->arena_n += len; /* new: keep its bytes */
    *code = c;
    return 0;
}

static inline int string(Sc *s, int want, int64_t *code) { return string_esc(s, want, code, NULL); }

/* A JSON number at s->p. kind: 0 integer, 1 decimal (digits[.digits]) , 2 with exponent.
 * For kind 0 / 1: the integer part in *ip (FAIL on int64 overflow), fraction digits in *fp,
 * their count in *nf (counting at most 18; more -> *nf = 19). */
static int number(Sc *s, int *kind, int64_t *ip, int64_t *fp, int *nf) {
    const char *p = s->p;
    int neg = 0;
    if (p < s->end && *p == '-') { neg = 1; p++; }
    if (p >= s->end || *p < '0' || *p > '9') return FAIL;
    uint64_t v = 0;
    int big = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < s->end && *p >= '0' && *p <= '9') {
            if (v > (UINT64_MAX - 9) / 10) big = 1;
            else v = v * 10 + (uint64_t)(*p - '0');
            p++;
        }
    }
    *kind = 0;
    int64_t f = 0;
    int n = 0;
    if (p < s->end && *p == '.') {
        p++;
        if (p >= s->end || *p < '0' || *p > '9') return FAIL;
        while (p < s->end && *p >= '0' && *p <= '9') {
            if (n < 18) f = f * 10 + (*p - '0');
            n++;
            p++;
        }
        *kind = 1;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < s->end && (*p == '+' || *p == '-')) p++;
        if (p >= s->end || *p < '0' || *p > '9') return FAIL;
        while (p < s->end && *p >= '0' && *p <= '9') p++;
        *kind = 2;
    }
    s->p = p;
    if (*kind == 2) return 0;
    if (big || v > (uint64_t)INT64_MAX + (uint64_t)neg) return 1; /* valid JSON, too big for us */
    *ip = neg ? (int64_t)(0 - v) : (int64_t)v;
    if (neg && v == 0) *ip = 0;
    *fp = neg ? -f : f;
    *nf = n > 18 ? 19 : n;
    return 0;
}

static int skip(Sc *s);

static int skip_container(Sc *s, char close) {
    if (++s->depth > 256) return FAIL;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; s->depth--; return 0; }
    while (1) {
        ws(s);
        if (close == '}') {
            if (s->p >= s->end || *s->p != '"' || string(s, 0, NULL)) return FAIL;
            ws(s);
            if (s->p >= s->end || *s->p != ':') return FAIL;
            s->p++;
            ws(s);
        }
        if (skip(s)) return FAIL;
        ws(s);
        if (s->p >= s->end) return FAIL;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == close) { s->p++; s->depth--; return 0; }
        return FAIL;
    }
}

static int skip(Sc *s) {
    if (s->p >= s->end) return FAIL;
    switch (*s->p) {
    case '"': return string(s, 0, NULL);
    case '{': return skip_container(s, '}');
    case '[': return skip_container(s, ']');
    case 't': return lit(s, "true", 4);
    case 'f': return lit(s, "false", 5);
    case 'n': return lit(s, "null", 4);
    default: {
        int kind, nf;
        int64_t ip, fp;
        int r = number(s, &kind, &ip, &fp, &nf);
        return r == FAIL ? FAIL : 0;
    }
    }
}

/* ---- the events ---------------------------------------------------------------------------- */

enum { C_TS, C_DUR, C_PID, C_TID, C_CORR, C_EXT, C_DEV, C_STREAM, C_BYTES, C_CAT, C_NAME, N_I64 };
enum { M_INSTANT, M_DUR, M_PID, M_TID, M_CORR, M_EXT, M_DEV, M_STREAM, M_BYTES, N_U8 };
enum { K_ROW, K_NAME, K_DTYPE, K_PG, K_IN, K_OUT, K_GSIZE, K_IN_OK, K_OUT_OK, K_GSIZE_OK, N_COLL };

typedef struct {
    Vec i64[N_I64];
    Vec u8[N_U8];
    Vec coll[N_COLL];
} Cols;

static const int64_t MAX_MAG = INT64_MAX / 1000;

/* a "ts"/"dur" value -> exact ns; 1 = ok, 0 = null, FAIL = not ours */
static int us_value(Sc *s, int64_t *ns) {
    if (s->p < s->end && *s->p == 'n') return lit(s, "null", 4) ? FAIL : 0;
    int kind, nf;
    int64_t ip, fp;
    int r = number(s, &kind, &ip, &fp, &nf);
    if (r != 0 || kind == 2) return FAIL;
    if (ip > MAX_MAG || ip < -MAX_MAG) return FAIL;
    if (kind == 0) { *ns = ip * 1000; return 1; }
    if (nf < 1 || nf > 3) return FAIL;
    static const int64_t scale[4] = {1000, 100, 10, 1};
    /* -0.5: ip = 0 with a negative fraction; the sign is the literal's */
    *ns = ip * 1000 + fp * scale[nf];
    return 1;
}

/* an integer value (or null): 1 ok, 0 null, FAIL otherwise */
static int int_value(Sc *s, int64_t *v) {
    if (s->p >= s->end) return FAIL;
    if (*s->p == 'n') return lit(s, "null", 4) ? FAIL : 0;
    if (*s->p != '-' && (*s->p < '0' || *s->p > '9')) return FAIL;
    int kind, nf;
    int64_t ip, fp;
    if (number(s, &kind, &ip, &fp, &nf) != 0 || kind != 0) return FAIL;
    *v = ip;
    return 1;
}

/* a string value (or null): 1 ok (code), 0 null, FAIL otherwise */
static int str_value(Sc *s, int64_t *code) {
    if (s->p >= s->end) return FAIL;
    if (*s->p == 'n') return lit(s, "null", 4) ? FAIL : 0;
    if (*s->p != '"') return FAIL;
    return string(s, 1, code) ? FAIL : 1;
}

/* pid / tid: 1 int, 2 string (code), 0 null, FAIL otherwise */
static int id_value(Sc *s, int64_t *v) {
    if (s->p < s->end && *s->p == '"') return string(s, 1, v) ? FAIL : 2;
    return int_value(s, v);
}

static inline int key_is(const char *k, Py_ssize_t n, const char *w) {
    return (Py_ssize_t)strlen(w) == n && memcmp(k, w, (size_t)n) == 0;
}

/* read a key (no escapes needed for the ones we keep: a key with an escape is compared as
 * written, so it never matches one of ours, but it is still validated) */
static int key(Sc *s, const char **k, Py_ssize_t *n) {
    if (s->p >= s->end || *s->p != '"') return FAIL;
    const char *start = s->p + 1;
    /* the usual key: plain ASCII, its closing quote within the next 16 bytes (two word tests,
     * the same as string_esc's; anything else, or too near the end, goes through string_esc) */
    if (s->end - start >= 16) {
        for (int h = 0; h < 16; h += 8) {
            uint64_t w = load64(start + h);
            uint64_t q = w ^ 0x2222222222222222ULL, b = w ^ 0x5C5C5C5C5C5C5C5CULL;
            uint64_t m = (((q - 0x0101010101010101ULL) & ~q) | ((b - 0x0101010101010101ULL) & ~b) |
                          ((w - 0x2020202020202020ULL) & ~w) | w) & 0x8080808080808080ULL;
            if (!m) continue;
            const char *e = start + h + (__builtin_ctzll(m) >> 3);
            if (*e != '"') break; /* an escape, a control or non-ASCII byte first: the full check */
            *k = start;
            *n = e - start;
            s->p = e + 1;
            goto colon;
        }
    }
    {
        int esc;
        if (string_esc(s, 0, NULL, &esc)) return FAIL;
        *k = start;
        *n = (s->p - 1) - start;
        if (esc) return FAIL; /* an escaped key may spell one of ours */
    }
colon:
    ws(s);
    if (s->p >= s->end || *s->p != ':') return FAIL;
    s->p++;
    ws(s);
    return 0;
}

typedef struct {
    int64_t v[11];
    int ok[11];
} Args;

static const char *ARG_KEYS[11] = {"External id", "device", "stream", "correlation", "bytes", "Collective name",
                                   "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name"};
static const Py_ssize_t ARG_LEN[11] = {11, 6, 6, 11, 5, 15, 13, 14, 10, 5, 18};
static const int ARG_STR[11] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1};

static int args_obj(Sc *s, Args *a) {
    memset(a, 0, sizeof(*a));
    unsigned seen = 0;
    if (s->p >= s->end || *s->p != '{') return FAIL;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
    while (1) {
        ws(s);
        const char *k;
        Py_ssize_t n;
        if (key(s, &k, &n)) return FAIL;
        int which = -1;
        if (n >= 5 && n <= 18) /* the lengths of ARG_KEYS: most keys of other lengths skip the loop */
            for (int j = 0; j < 11; j++)
                if (ARG_LEN[j] == n && k[0] == ARG_KEYS[j][0] && memcmp(k, ARG_KEYS[j], (size_t)n) == 0) {
                    which = j;
                    break;
                }
        if (which < 0) {
            if (skip(s)) return FAIL; /* incl. "name" (metadata events): unused here */
        } else {
            if (seen & (1u << which)) return FAIL;
            seen |= 1u << which;
            int r;
            if (ARG_STR[which]) r = str_value(s, &a->v[which]);
            else if (s->p < s->end && *s->p == '"') r = skip(s) ? FAIL : 0; /* a string where an integer
                is kept (ROCm's hipMemcpy* calls: "bytes": "1"): null, as the decoder path makes it */
            else r = int_value(s, &a->v[which]);
            if (r == FAIL) return FAIL;
            a->ok[which] = r;
        }
        ws(s);
        if (s->p >= s->end) return FAIL;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == '}') { s->p++; return 0; }
        return FAIL;
    }
}

static const char *OTHER_PH = "stfMCBEbnePONDRSTpcVv";

/* one element of traceEvents: 1 kept (columns appended), 0 skipped, FAIL not ours */
static int event(Sc *s, Cols *c) {
    if (s->p >= s->end || *s->p != '{') return FAIL;
    s->p++;
    enum { F_PH, F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS };
    unsigned seen = 0;
    int64_t cat = -1, name = -1, pid = 0, tid = 0, ts = 0, dur = 0;
    int pid_k = 0, tid_k = 0, ts_ok = 0, dur_ok = 0, r;
    char ph = 0;
    Args a;
    memset(&a, 0, sizeof(a));
    ws(s);
    if (s->p < s->end && *s->p == '}') return FAIL; /* no ph */
    while (1) {
        ws(s);
        const char *k;
        Py_ssize_t n;
        if (key(s, &k, &n)) return FAIL;
        int f = -1;
        if (n == 2 && k[0] == 'p' && k[1] == 'h') f = F_PH;
        else if (n == 3 && !memcmp(k, "cat", 3)) f = F_CAT;
        else if (n == 4 && !memcmp(k, "name", 4)) f = F_NAME;
        else if (n == 3 && !memcmp(k, "pid", 3)) f = F_PID;
        else if (n == 3 && !memcmp(k, "tid", 3)) f = F_TID;
        else if (n == 2 && k[0] == 't' && k[1] == 's') f = F_TS;
        else if (n == 3 && !memcmp(k, "dur", 3)) f = F_DUR;
        else if (n == 4 && !memcmp(k, "args", 4)) f = F_ARGS;
        if (f >= 0) {
            if (seen & (1u << f)) return FAIL;
            seen |= 1u << f;
        }
        switch (f) {
        case F_PH:
            /* a one-letter string (the tags the decoder knows) */
            if (s->end - s->p < 3 || s->p[0] != '"' || s->p[2] != '"') return FAIL;
            ph = s->p[1];
            if (!(ph == 'X' || ph == 'i' || ph == 'I' || (ph && strchr(OTHER_PH, ph)))) return FAIL;
            s->p += 3;
            break;
        case F_CAT: if ((r = str_value(s, &cat)) == FAIL) return FAIL; if (!r) cat = -1; break;
        case F_NAME: if ((r = str_value(s, &name)) == FAIL) return FAIL; if (!r) name = -1; break;
        case F_PID: if ((pid_k = id_value(s, &pid)) == FAIL) return FAIL; break;
        case F_TID: if ((tid_k = id_value(s, &tid)) == FAIL) return FAIL; break;
        case F_TS: if ((ts_ok = us_value(s, &ts)) == FAIL) return FAIL; break;
        case F_DUR: if ((dur_ok = us_value(s, &dur)) == FAIL) return FAIL; break;
        case F_ARGS:
            if (s->p < s->end && *s->p == '{') { if (args_obj(s, &a)) return FAIL; }
            else return FAIL;
            break;
        default:
            if (skip(s)) return FAIL;
        }
        ws(s);
        if (s->p >= s->end) return FAIL;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == '}') { s->p++; break; }
        return FAIL;
    }
    if (!ph) return FAIL;
    if (!(ph == 'X' || ph == 'i' || ph == 'I')) return 0;
    if (!ts_ok) return FAIL; /* missing or null ts: the decoder path names the error */
    int64_t i64[N_I64] = {ts, dur_ok ? dur : 0, pid, tid, a.v[3], a.v[0], a.v[1], a.v[2], a.v[4], cat, name};
    uint8_t u8[N_U8] = {(uint8_t)(ph != 'X'), (uint8_t)dur_ok, (uint8_t)pid_k, (uint8_t)tid_k,
                        (uint8_t)a.ok[3], (uint8_t)a.ok[0], (uint8_t)a.ok[1], (uint8_t)a.ok[2], (uint8_t)a.ok[4]};
    int64_t row = c->i64[0].n;
    for (int k = 0; k < N_I64; k++) if (vpush64(&c->i64[k], i64[k])) return FAIL;
    for (int k = 0; k < N_U8; k++) if (vpush8(&c->u8[k], u8[k])) return FAIL;
    if (a.ok[5]) {
        int64_t cv[N_COLL] = {row, a.v[5], a.ok[9] ? a.v[9] : -1, a.ok[10] ? a.v[10] : -1, a.v[6], a.v[7], a.v[8],
                              a.ok[6], a.ok[7], a.ok[8]};
        for (int k = 0; k < N_COLL; k++) if (vpush64(&c->coll[k], cv[k])) return FAIL;
    }
    return 1;
}

static int event_list(Sc *s, Cols *c, Py_ssize_t *n_all) {
    if (s->p >= s->end || *s->p != '[') return FAIL;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']') { s->p++; return 0; }
    while (1) {
        ws(s);
        if (event(s, c) == FAIL) return FAIL;
        (*n_all)++;
        ws(s);
        if (s->p >= s->end) return FAIL;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == ']') { s->p++; return 0; }
        return FAIL;
    }
}

static PyObject *bytes_of(Vec *v) { return PyBytes_FromStringAndSize(v->p ? (const char *)v->p : "", v->n * v->item); }

/* the whole document; 1 ours, 0 not ours. Top-level (key, value) spans go to ``spans``
 * (four int64 each: key start, key length, value start, value end); *bare for a bare list. */
static int document(Sc *s, Cols *c, Py_ssize_t *n_all, Vec *spans, int *bare) {
    ws(s);
    *bare = 0;
    if (s->p < s->end && *s->p == '[') {
        *bare = 1;
        if (event_list(s, c, n_all)) return 0;
    } else if (s->p < s->end && *s->p == '{') {
        s->p++;
        ws(s);
        int have_events = 0;
        if (s->p < s->end && *s->p == '}') return 0;
        while (1) {
            ws(s);
            const char *k;
            Py_ssize_t n;
            if (key(s, &k, &n)) return 0;
            if (key_is(k, n, "traceEvents")) {
                if (have_events || event_list(s, c, n_all)) return 0;
                have_events = 1;
            } else {
                const char *v0 = s->p;
                if (skip(s)) return 0;
                int64_t sp[4] = {k - s->base, n, v0 - s->base, s->p - s->base};
                for (int q = 0; q < 4; q++) if (vpush(spans, &sp[q])) return 0;
            }
            ws(s);
            if (s->p >= s->end) return 0;
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == '}') { s->p++; break; }
            return 0;
        }
        if (!have_events) return 0;
    } else {
        return 0;
    }
    ws(s);
    return s->p == s->end;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    Table tab = {0};
    tab.st.min_slots = 4096;
    tab.st.base = &tab.arena;
    Cols c;
    Vec spans = {0};
    spans.item = 8;
    memset(&c, 0, sizeof(c));
    for (int k = 0; k < N_I64; k++) c.i64[k].item = 8;
    for (int k = 0; k < N_U8; k++) c.u8[k].item = 1;
    for (int k = 0; k < N_COLL; k++) c.coll[k].item = 8;
    Sc s = {(const char *)buf.buf, (const char *)buf.buf + buf.len, (const char *)buf.buf, &tab, 0};
    Py_ssize_t n_all = 0;
    PyObject *ret = NULL;
    int ok = 0, bare = 0;
    /* the pass holds no Python object: other threads (other rank files) run meanwhile */
    Py_BEGIN_ALLOW_THREADS
    ok = document(&s, &c, &n_all, &spans, &bare);
    Py_END_ALLOW_THREADS
    if (!ok) {
        ret = Py_None;
        Py_INCREF(ret);
        goto done;
    }
    {
        PyObject *sp = NULL;
        if (bare) {
            sp = Py_None;
            Py_INCREF(sp);
        } else {
            sp = PyList_New(0);
            if (!sp) goto done;
            const int64_t *v = (const int64_t *)spans.p;
            for (Py_ssize_t q = 0; q + 3 < spans.n; q += 4) {
                PyObject *item = Py_BuildValue("(s#nn)", s.base + v[q], (Py_ssize_t)v[q + 1], (Py_ssize_t)v[q + 2],
                                               (Py_ssize_t)v[q + 3]);
                if (!item || PyList_Append(sp, item) < 0) { Py_XDECREF(item); Py_DECREF(sp); goto done; }
                Py_DECREF(item);
            }
        }
        PyObject *strs = PyList_New((Py_ssize_t)tab.st.n);
        if (!strs) { Py_DECREF(sp); goto done; }
        for (Py_ssize_t i = 0; i < tab.st.n; i++) {
            PyObject *u = PyUnicode_DecodeUTF8(istr_ptr(&tab.st, &tab.st.items[i]), (Py_ssize_t)tab.st.items[i].len, "strict");
            if (!u) { Py_DECREF(strs); Py_DECREF(sp); goto done; }
            PyList_SET_ITEM(strs, i, u);
        }
        PyObject *cols = PyTuple_New(N_I64 + N_U8), *coll = PyTuple_New(N_COLL);
        if (!cols || !coll) { Py_XDECREF(cols); Py_XDECREF(coll); Py_DECREF(strs); Py_DECREF(sp); goto done; }
        for (int k = 0; k < N_I64; k++) PyTuple_SET_ITEM(cols, k, bytes_of(&c.i64[k]));
        for (int k = 0; k < N_U8; k++) PyTuple_SET_ITEM(cols, N_I64 + k, bytes_of(&c.u8[k]));
        for (int k = 0; k < N_COLL; k++) PyTuple_SET_ITEM(coll, k, bytes_of(&c.coll[k]));
        ret = Py_BuildValue("(nNNNN)", n_all, sp, strs, cols, coll);
    }
done:
    for (int k = 0; k < N_I64; k++) free(c.i64[k].p);
    for (int k = 0; k < N_U8; k++) free(c.u8[k].p);
    for (int k = 0; k < N_COLL; k++) free(c.coll[k].p);
    free(spans.p);
    strtable_free(&tab.st);
    free(tab.arena);
    PyBuffer_Release(&buf);
    return ret;
}


/* ---- one numeric column as an Arrow C array (the Arrow C data interface) ----------------------
 * arrow_array(buffer, format) -> (schema capsule, array capsule) of a contiguous buffer of
 * fixed-width numbers ("l" int64, "i" int32, "s" int16, "c" int8, "C" uint8, "I" uint32,
 * "L" uint64, "g" float64), without a copy: the array holds the buffer (a numpy array) until its
 * consumer releases it; or of bytes 0/1 packed into Arrow's bit-packed booleans ("b", a copy).
 * No validity bitmap (no nulls). Polars imports it through __arrow_c_array__
 * (tracekit._native.series): a numpy array becomes a polars Series without polars' numpy
 * constructor, whose first use imports numpy.ma (~20 ms of a short ingest).
 * The release callback may run on a thread of polars' pool: it takes the GIL to let go of the
 * buffer, and leaves it alone once the interpreter is finalizing. */

static void arrow_schema_release(struct ArrowSchema *sc) { free(sc->private_data); sc->release = NULL; }
#if PY_VERSION_HEX >= 0x030D0000
#define TK_FINALIZING() Py_IsFinalizing()
#else
#define TK_FINALIZING() _Py_IsFinalizing()
#endif

struct arrow_owned {
    const void *buffers[2];
    Py_buffer view; /* the exported buffer (view.obj set), or none for a packed copy */
    int has_view;
};

static void arrow_array_release(struct ArrowArray *ar) {
    struct arrow_owned *own = (struct arrow_owned *)ar->private_data;
    if (own->has_view) {
        if (Py_IsInitialized() && !TK_FINALIZING()) {
            PyGILState_STATE g = PyGILState_Ensure();
            PyBuffer_Release(&own->view);
            PyGILState_Release(g);
        } /* else: the process is ending; the buffer goes with it */
    } else {
        free((void *)own->buffers[1]);
    }
    free(own);
    ar->release = NULL;
}

static void schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *sc = (struct ArrowSchema *)PyCapsule_GetPointer(cap, "arrow_schema");
    if (sc == NULL) { PyErr_Clear(); return; }
    if (sc->release != NULL) sc->release(sc);
    free(sc);
}

static void array_capsule_free(PyObject *cap) {
    struct ArrowArray *ar = (struct ArrowArray *)PyCapsule_GetPointer(cap, "arrow_array");
    if (ar == NULL) { PyErr_Clear(); return; }
    if (ar->release != NULL) ar->release(ar);
    free(ar);
}

static PyObject *arrow_array(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    const char *fmt;
    if (!PyArg_ParseTuple(args, "y*s", &view, &fmt)) return NULL;
    Py_ssize_t width;
    switch (fmt[0] != '\0' && fmt[1] == '\0' ? fmt[0] : '?') {
    case 'l': case 'L': case 'g': width = 8; break;
    case 'i': case 'I': width = 4; break;
    case 's': width = 2; break;
    case 'c': case 'C': case 'b': width = 1; break;
    default:
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "unsupported Arrow format %s", fmt);
        return NULL;
    }
    if (view.len % width != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "buffer length is not a multiple of the item width");
        return NULL;
    }
    int64_t n = (int64_t)(view.len / width);
    struct arrow_owned *own = (struct arrow_owned *)calloc(1, sizeof(struct arrow_owned));
    if (own == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    own->buffers[0] = NULL; /* no validity bitmap: no nulls */
    if (fmt[0] == 'b') { /* bytes 0/1 -> bits (least significant first), a copy */
        size_t bytes = (size_t)((n + 7) / 8);
        char *bits = NULL;
        if (posix_memalign((void **)&bits, 64, bytes ? bytes : 1) != 0) {
            free(own);
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        const unsigned char *src = (const unsigned char *)view.buf;
        memset(bits, 0, bytes);
        for (int64_t i = 0; i < n; i++)
            if (src[i]) bits[i >> 3] |= (char)(1u << (i & 7));
        PyBuffer_Release(&view);
        own->buffers[1] = bits;
    } else { /* the values in place: the array keeps the buffer until it is released */
        own->view = view;
        own->has_view = 1;
        own->buffers[1] = view.buf;
    }
    struct ArrowSchema *sc = (struct ArrowSchema *)calloc(1, sizeof(struct ArrowSchema));
    struct ArrowArray *ar = (struct ArrowArray *)calloc(1, sizeof(struct ArrowArray));
    char *fmt_copy = (char *)malloc(2);
    if (sc == NULL || ar == NULL || fmt_copy == NULL) {
        free(sc); free(fmt_copy);
        if (ar != NULL) { ar->private_data = own; arrow_array_release(ar); free(ar); }
        else { struct ArrowArray tmp; tmp.private_data = own; arrow_array_release(&tmp); }
        return PyErr_NoMemory();
    }
    fmt_copy[0] = fmt[0]; fmt_copy[1] = '\0';
    sc->format = fmt_copy; sc->name = ""; sc->metadata = NULL; sc->flags = ARROW_FLAG_NULLABLE;
    sc->release = arrow_schema_release; sc->private_data = fmt_copy;
    ar->length = n; ar->null_count = 0; ar->offset = 0; ar->n_buffers = 2; ar->n_children = 0;
    ar->buffers = own->buffers; ar->release = arrow_array_release; ar->private_data = own;
    PyObject *sc_cap = PyCapsule_New(sc, "arrow_schema", schema_capsule_free);
    if (sc_cap == NULL) { sc->release(sc); free(sc); ar->release(ar); free(ar); return NULL; }
    PyObject *ar_cap = PyCapsule_New(ar, "arrow_array", array_capsule_free);
    if (ar_cap == NULL) { Py_DECREF(sc_cap); ar->release(ar); free(ar); return NULL; }
    PyObject *out = PyTuple_Pack(2, sc_cap, ar_cap);
    Py_DECREF(sc_cap);
    Py_DECREF(ar_cap);
    return out;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS, "Kineto JSON -> columns, or None when the file needs the full decoder."},
    {"arrow_array", arrow_array, METH_VARARGS, "A copy of a buffer of numbers as an Arrow C array: (schema capsule, array capsule)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "tracekit._kineto", "Kineto JSON scanner.", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto(void) { return PyModule_Create(&MODULE); }
