/* tracekit/intern.h: the string interner the compiled modules share (_kineto.c's scanner table,
 * _walk.c's column interner): distinct strings in order of first appearance, one open-addressing
 * hash table of their indices, a word-at-a-time hash. Codes depend on first appearance only,
 * never on the hash.
 *
 * A string is kept as a pointer into memory that outlives the table (the input), or as an
 * offset into a buffer that may move while strings are added (``*base``: _kineto's arena of
 * decoded escapes): strtable_intern(t, s, n, off) with off >= 0 says s is at *base + off.
 * Include after Python.h. */
#ifndef TRACEKIT_INTERN_H
#define TRACEKIT_INTERN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p; /* the string, when off < 0 */
    int64_t len;
    uint64_t h;
    int64_t off; /* >= 0: the string is at *base + off */
} IStr;

typedef struct {
    IStr *items;
    int64_t n, cap;
    int64_t *slots; /* index + 1, 0 = empty */
    int64_t nslots;
    int64_t min_slots; /* the first table's size (a power of two; 0: 64) */
    char *const *base; /* where offsets point (NULL: no string is kept by offset) */
} StrTable;

/* 8 bytes at p as one little-endian word (memcpy: any alignment) */
static inline uint64_t load64(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static inline uint64_t hash_bytes(const char *s, int64_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ load64(s + i)) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    if (i < n) {
        uint64_t w = 0;
        for (int64_t k = 0; i + k < n; k++) w |= (uint64_t)(uint8_t)s[i + k] << (8 * k);
        h = (h ^ w) * 0x94D049BB133111EBULL;
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 32);
}

static inline const char *istr_ptr(const StrTable *t, const IStr *x) { return x->off >= 0 ? *t->base + x->off : x->p; }

static int strtable_grow(StrTable *t) {
    int64_t ns = t->nslots ? 2 * t->nslots : (t->min_slots ? t->min_slots : 64);
    int64_t *slots = (int64_t *)calloc((size_t)ns, sizeof(int64_t));
    if (!slots) return -1;
    for (int64_t i = 0; i < t->n; i++) {
        int64_t j = (int64_t)(t->items[i].h & (uint64_t)(ns - 1));
        while (slots[j]) j = (j + 1) & (ns - 1);
        slots[j] = i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = ns;
    return 0;
}

/* the index (0-based, order of first appearance) of the string s[0:n]; -1: no memory.
 * off >= 0: s is at *base + off (kept by offset: the buffer may move). */
static int64_t strtable_intern(StrTable *t, const char *s, int64_t n, int64_t off) {
    if (2 * (t->n + 1) > t->nslots && strtable_grow(t)) return -1;
    uint64_t h = hash_bytes(s, n);
    int64_t j = (int64_t)(h & (uint64_t)(t->nslots - 1));
    while (t->slots[j]) {
        const IStr *x = &t->items[t->slots[j] - 1];
        if (x->h == h && x->len == n && memcmp(istr_ptr(t, x), s, (size_t)n) == 0) return t->slots[j] - 1;
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 64;
        IStr *it = (IStr *)realloc(t->items, (size_t)cap * sizeof(IStr));
        if (!it) return -1;
        t->items = it;
        t->cap = cap;
    }
    IStr *x = &t->items[t->n];
    x->p = off >= 0 ? NULL : s;
    x->len = n;
    x->h = h;
    x->off = off;
    t->slots[j] = t->n + 1;
    return t->n++;
}

static void strtable_free(StrTable *t) {
    free(t->items);
    free(t->slots);
    t->items = NULL;
    t->slots = NULL;
    t->n = t->cap = t->nslots = 0;
}

#endif
