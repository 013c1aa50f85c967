/* tracekit's own CUPTI activity client (profile mode lite without torch.profiler).
 *
 * A plain shared library (no Python API), loaded with ctypes by collectors/cupti_client.py and
 * built there with the CUPTI headers (`cc -shared -fPIC -O2 -I<cupti include> cupti_client.c -ldl
 * -lpthread`). It never links libcupti: tk_open(path) dlopens the libcupti the process already
 * has (torch's) and resolves every entry point by name, so one CUPTI serves the process.
 *
 * What it records (tk_start flags):
 *   TK_KERNELS   CONCURRENT_KERNEL activity records
 *   TK_COPIES    MEMCPY + MEMSET activity records
 *   TK_API_SOME  RUNTIME / DRIVER activity records, with every callback id in the given lists
 *                switched off (cuptiActivityEnableRuntimeApi / ...DriverApi after enabling the kinds;
 *                enabling single ids without the kinds recorded nothing on H200, CUPTI 13.0)
 *   TK_API_ALL   the RUNTIME and DRIVER kinds whole (what Kineto enables)
 *   TK_API_CB    no API activity records: a callback (CUPTI callback API) on the given ids writes
 *                one row per call (enter / exit time, thread, correlation id); a driver call made
 *                inside a traced runtime call (cudaLaunchKernel -> cuLaunchKernel) is not written,
 *                as CUPTI's activity records do not show it either
 * Every time stamp is CLOCK_REALTIME ns (cuptiActivityRegisterTimestampCallback for CUPTI's
 * records; clock_gettime in the callback): the clock of Python's time.time_ns(), which the
 * phase ranges of lite use. Thread ids are the kernel's (SYS_gettid; cuptiSetThreadIdType SYSTEM).
 *
 * Rows (tk_row, 40 bytes) are parsed out of each completed buffer on CUPTI's worker thread and
 * appended to one growing array; kernel names are demangled (__cxa_demangle, as Kineto does)
 * and interned once per distinct name pointer.
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TK_KERNELS 1
#define TK_COPIES 2
#define TK_API_SOME 4
#define TK_API_ALL 8
#define TK_API_CB 16

enum { CAT_KERNEL = 0, CAT_MEMCPY = 1, CAT_MEMSET = 2, CAT_RUNTIME = 3, CAT_DRIVER = 4 };

typedef struct {
  int64_t start, end;
  uint32_t corr, cat, device, stream; /* stream: the thread id for an API row */
  uint32_t name;                      /* interned name id; the callback id for an API row */
  uint32_t pid;
} tk_row;

typedef CUptiResult (*f_reg)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*f_kind)(CUpti_ActivityKind);
typedef CUptiResult (*f_next)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*f_flush)(uint32_t);
typedef CUptiResult (*f_api)(CUpti_CallbackId, uint8_t);
typedef CUptiResult (*f_ts)(CUpti_TimestampCallbackFunc);
typedef CUptiResult (*f_tid)(CUpti_ActivityThreadIdType);
typedef CUptiResult (*f_name)(CUpti_CallbackDomain, uint32_t, const char **);
typedef CUptiResult (*f_sub)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
typedef CUptiResult (*f_unsub)(CUpti_SubscriberHandle);
typedef CUptiResult (*f_cb)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
typedef CUptiResult (*f_dropped)(CUcontext, uint32_t, size_t *);

static struct {
  void *lib;
  f_reg reg;
  f_kind enable, disable;
  f_next next;
  f_flush flush;
  f_api rt_api, dr_api;
  f_ts ts;
  f_tid tid;
  f_name cbname;
  f_sub sub;
  f_unsub unsub;
  f_cb enable_cb;
  f_dropped dropped;
} C;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tk_row *rows;
static size_t n_rows, cap_rows;
static uint64_t n_dropped;    /* records CUPTI reported dropped */
static uint64_t n_other;      /* records of a kind this client does not keep */
static int flags_on;          /* flags of the running window, 0 when stopped */
static CUpti_SubscriberHandle subscriber; /* held from tk_start to tk_stop, every mode */
static uint32_t my_pid;
static int api_first_error;   /* first CUPTI error code seen (0 none) */

/* interned names: distinct name pointers (kernels) or strings (copies) -> id */
static char **names;
static const void **name_keys;
static size_t n_names, cap_names;
static uint32_t *slots; /* open addressing: id + 1 of the name with that key, 0 empty */
static size_t n_slots;

extern char *__cxa_demangle(const char *, char *, size_t *, int *);

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t CUPTIAPI ts_cb(void) { return (uint64_t)now_ns(); }

static void push(const tk_row *r) {
  if (n_rows == cap_rows) {
    size_t nc = cap_rows ? cap_rows * 2 : 65536;
    tk_row *nr = realloc(rows, nc * sizeof(tk_row));
    if (!nr) { n_dropped++; return; }
    rows = nr;
    cap_rows = nc;
  }
  rows[n_rows++] = *r;
}

/* caller holds mu */
static size_t slot_of(const void *key) {
  uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h >> 32) & (n_slots - 1);
  while (slots[i] && name_keys[slots[i] - 1] != key) i = (i + 1) & (n_slots - 1);
  return i;
}

static uint32_t intern(const void *key, const char *text, int demangle) {
  if (n_slots && slots[slot_of(key)]) return slots[slot_of(key)] - 1;
  if (2 * (n_names + 1) > n_slots) { /* grow the table, then re-insert every key */
    size_t ns = n_slots ? 2 * n_slots : 1024;
    free(slots);
    slots = calloc(ns, sizeof(uint32_t));
    n_slots = ns;
    for (size_t j = 0; j < n_names; j++) slots[slot_of(name_keys[j])] = (uint32_t)j + 1;
  }
  if (n_names == cap_names) {
    size_t nc = cap_names ? cap_names * 2 : 256;
    names = realloc(names, nc * sizeof(char *));
    name_keys = realloc(name_keys, nc * sizeof(void *));
    cap_names = nc;
  }
  char *s = NULL;
  if (demangle && text && text[0] == '_' && text[1] == 'Z') {
    int st = 0;
    s = __cxa_demangle(text, NULL, NULL, &st);
    if (st != 0) { free(s); s = NULL; }
  }
  names[n_names] = s ? s : strdup(text ? text : "");
  name_keys[n_names] = key;
  slots[slot_of(key)] = (uint32_t)n_names + 1;
  return (uint32_t)n_names++;
}

static const char *mem_kind(uint8_t k) {
  static const char *t[] = {"Unknown", "Pageable", "Pinned", "Device", "Array", "Managed", "Device Static",
                            "Managed Static"};
  return k < 8 ? t[k] : "Unknown";
}

static const char *copy_kind(uint8_t k) {
  static const char *t[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH",
                            "PtoP"};
  return k < 11 ? t[k] : "Unknown";
}

/* a copy's name as Kineto spells it, interned under a key made of its three kinds */
static uint32_t copy_name(uint8_t ck, uint8_t src, uint8_t dst) {
  char buf[96];
  uintptr_t key = 0x10000u | ((uintptr_t)ck << 16) | ((uintptr_t)src << 8) | dst;
  snprintf(buf, sizeof buf, "Memcpy %s (%s -> %s)", copy_kind(ck), mem_kind(src), mem_kind(dst));
  return intern((const void *)key, buf, 0);
}

static uint32_t set_name(uint16_t mk) {
  char buf[64];
  uintptr_t key = 0x20000u | mk;
  snprintf(buf, sizeof buf, "Memset (%s)", mem_kind((uint8_t)mk));
  return intern((const void *)key, buf, 0);
}

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  size_t sz = 8u << 20;
  void *p = NULL;
  if (posix_memalign(&p, 8, sz) != 0) p = NULL;
  *buffer = p;
  *size = p ? sz : 0;
  *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  CUpti_Activity *rec = NULL;
  pthread_mutex_lock(&mu);
  while (valid > 0 && C.next(buffer, valid, &rec) == CUPTI_SUCCESS) {
    tk_row r;
    memset(&r, 0, sizeof r);
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        r.start = (int64_t)k->start; r.end = (int64_t)k->end; r.corr = k->correlationId;
        r.cat = CAT_KERNEL; r.device = k->deviceId; r.stream = k->streamId;
        r.name = intern(k->name, k->name, 1); r.pid = my_pid;
        push(&r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
        r.start = (int64_t)m->start; r.end = (int64_t)m->end; r.corr = m->correlationId;
        r.cat = CAT_MEMCPY; r.device = m->deviceId; r.stream = m->streamId;
        r.name = copy_name(m->copyKind, m->srcKind, m->dstKind); r.pid = my_pid;
        push(&r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
        r.start = (int64_t)m->start; r.end = (int64_t)m->end; r.corr = m->correlationId;
        r.cat = CAT_MEMSET; r.device = m->deviceId; r.stream = m->streamId;
        r.name = set_name(m->memoryKind); r.pid = my_pid;
        push(&r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        r.start = (int64_t)a->start; r.end = (int64_t)a->end; r.corr = a->correlationId;
        r.cat = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CAT_RUNTIME : CAT_DRIVER;
        r.device = UINT32_MAX; r.stream = a->threadId; r.name = a->cbid; r.pid = a->processId;
        push(&r);
        break;
      }
      default:
        n_other++;
    }
  }
  size_t dropped = 0;
  if (C.dropped && C.dropped(ctx, stream, &dropped) == CUPTI_SUCCESS) n_dropped += dropped;
  pthread_mutex_unlock(&mu);
  free(buffer);
}

/* TK_API_CB: one row per traced API call, written at its exit */
static __thread int64_t cb_enter_ns;
static __thread uint32_t cb_tid;
static __thread int cb_depth; /* traced runtime calls open on this thread */

static void CUPTIAPI api_cb(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data) {
  (void)ud;
  const CUpti_CallbackData *d = (const CUpti_CallbackData *)data;
  int rt = dom == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (d->callbackSite == CUPTI_API_ENTER) {
    if (rt) cb_depth++;
    if (rt || cb_depth == 0) cb_enter_ns = now_ns();
    return;
  }
  if (rt) cb_depth--;
  else if (cb_depth > 0) return; /* the driver call under a traced runtime call */
  if (!cb_tid) cb_tid = (uint32_t)syscall(SYS_gettid);
  tk_row r;
  r.start = cb_enter_ns; r.end = now_ns(); r.corr = d->correlationId;
  r.cat = rt ? CAT_RUNTIME : CAT_DRIVER;
  r.device = UINT32_MAX; r.stream = cb_tid; r.name = cbid; r.pid = my_pid;
  pthread_mutex_lock(&mu);
  push(&r);
  pthread_mutex_unlock(&mu);
}

#define RESOLVE(field, sym) C.field = (void *)dlsym(C.lib, sym)

/* Open the libcupti at `path` (the one already mapped into the process). 0 ok, else -1 (tk_error). */
static char err_text[512];
const char *tk_error(void) { return err_text; }

int tk_open(const char *path) {
  if (C.lib) return 0;
  C.lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!C.lib) { snprintf(err_text, sizeof err_text, "dlopen %s: %s", path, dlerror()); return -1; }
  RESOLVE(reg, "cuptiActivityRegisterCallbacks"); RESOLVE(enable, "cuptiActivityEnable");
  RESOLVE(disable, "cuptiActivityDisable"); RESOLVE(next, "cuptiActivityGetNextRecord");
  RESOLVE(flush, "cuptiActivityFlushAll"); RESOLVE(rt_api, "cuptiActivityEnableRuntimeApi");
  RESOLVE(dr_api, "cuptiActivityEnableDriverApi"); RESOLVE(ts, "cuptiActivityRegisterTimestampCallback");
  RESOLVE(tid, "cuptiSetThreadIdType"); RESOLVE(cbname, "cuptiGetCallbackName");
  RESOLVE(sub, "cuptiSubscribe"); RESOLVE(unsub, "cuptiUnsubscribe"); RESOLVE(enable_cb, "cuptiEnableCallback");
  RESOLVE(dropped, "cuptiActivityGetNumDroppedRecords");
  if (!C.reg || !C.enable || !C.disable || !C.next || !C.flush) {
    snprintf(err_text, sizeof err_text, "%s lacks the CUPTI activity API", path);
    dlclose(C.lib);
    C.lib = NULL;
    return -1;
  }
  my_pid = (uint32_t)getpid();
  return 0;
}

/* a failed CUPTI call: its error kept (the first one also in api_first_error), its code returned */
static int cupti_failed(CUptiResult r, const char *what) {
  if (!api_first_error) api_first_error = (int)r;
  snprintf(err_text, sizeof err_text, "%s: CUPTI error %d", what, (int)r);
  return (int)r;
}


/* Start recording. rt_ids / dr_ids: the runtime / driver callback ids switched off (TK_API_SOME) or
 * traced (TK_API_CB). What the flags need is checked before anything is switched on. CUPTI allows one
 * callback subscriber per process and asks every client to subscribe before its session and keep the
 * subscriber (cupti_callbacks.h); a client that has one (torch.profiler's Kineto keeps its own once it
 * has profiled; Nsight Systems / Compute, cuda-gdb) also has its activity buffer callbacks registered,
 * and registering ours then takes its buffers (seen on H200: a segmentation fault at exit after a
 * start tried while torch.profiler ran). So every mode takes the subscriber first, before any
 * registration, and keeps it until tk_stop: a start refused there changes nothing, and no other client
 * can take over during the window. The activity buffer, time stamp and thread id callbacks are then
 * registered on every start (another client may have registered its own since the last one). The
 * callback ids (TK_API_CB) are enabled last, once the activity kinds are on (no API row without its
 * GPU record's kind on). A CUPTI call that fails part way switches off again the kinds, callbacks and
 * subscriber this start switched on; registrations made by it stay (CUPTI has no way to take them
 * back), harmless once the subscriber is given back, as the next client registers its own. */
#define TRY(call, what)                                                               \
  do {                                                                                \
    CUptiResult _r = (call);                                                          \
    if (_r != CUPTI_SUCCESS) {                                                        \
      rc = cupti_failed(_r, what);                                                    \
      goto undo;                                                                      \
    }                                                                                 \
  } while (0)
#define KIND_ON(kind, what)                                                           \
  do {                                                                                \
    TRY(C.enable(kind), what);                                                        \
    on[n_on++] = kind;                                                                \
  } while (0)

/* the callback mode: API rows from CUPTI callbacks, not activity records */
static int callback_mode(int flags) { return !(flags & (TK_API_ALL | TK_API_SOME)) && (flags & TK_API_CB); }

int tk_start(int flags, const uint32_t *rt_ids, int n_rt, const uint32_t *dr_ids, int n_dr) {
  CUpti_ActivityKind on[6];
  int n_on = 0, rc = 0;
  const int cb = callback_mode(flags);
  if (!C.lib) { snprintf(err_text, sizeof err_text, "tk_open was not called"); return -1; }
  if (flags_on) { snprintf(err_text, sizeof err_text, "already recording"); return -1; }
  if (!(flags & TK_API_ALL) && (flags & TK_API_SOME) && (!C.rt_api || !C.dr_api)) {
    snprintf(err_text, sizeof err_text, "CUPTI older than 12.5");
    return -1;
  }
  if (!C.sub || !C.unsub || (cb && !C.enable_cb)) {
    snprintf(err_text, sizeof err_text, "no CUPTI callback API (cuptiSubscribe / cuptiUnsubscribe%s)",
             cb ? " / cuptiEnableCallback" : "");
    return -1;
  }
  { /* another CUPTI client in the process: refused here, before any registration; every later failure
     * (TRY) gives the subscriber back */
    CUptiResult r = C.sub(&subscriber, (CUpti_CallbackFunc)api_cb, NULL);
    if (r != CUPTI_SUCCESS)
      return cupti_failed(r, r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                                 ? "cuptiSubscribe (another CUPTI client holds CUPTI in this process: torch.profiler, "
                                   "Nsight Systems / Compute or cuda-gdb)"
                                 : "cuptiSubscribe");
  }
  if (C.ts) TRY(C.ts(ts_cb), "cuptiActivityRegisterTimestampCallback");
  if (C.tid) TRY(C.tid(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType");
  TRY(C.reg(buf_requested, buf_completed), "cuptiActivityRegisterCallbacks");
  if (flags & TK_KERNELS) KIND_ON(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "enable CONCURRENT_KERNEL");
  if (flags & TK_COPIES) {
    KIND_ON(CUPTI_ACTIVITY_KIND_MEMCPY, "enable MEMCPY");
    KIND_ON(CUPTI_ACTIVITY_KIND_MEMSET, "enable MEMSET");
  }
  if (flags & (TK_API_ALL | TK_API_SOME)) {
    KIND_ON(CUPTI_ACTIVITY_KIND_RUNTIME, "enable RUNTIME");
    KIND_ON(CUPTI_ACTIVITY_KIND_DRIVER, "enable DRIVER");
  }
  if (!(flags & TK_API_ALL) && (flags & TK_API_SOME)) {
    for (int i = 0; i < n_rt; i++) TRY(C.rt_api(rt_ids[i], 0), "cuptiActivityEnableRuntimeApi off");
    for (int i = 0; i < n_dr; i++) TRY(C.dr_api(dr_ids[i], 0), "cuptiActivityEnableDriverApi off");
  }
  if (cb) { /* unsubscribing (undo) drops the callbacks enabled here */
    for (int i = 0; i < n_rt; i++)
      TRY(C.enable_cb(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, rt_ids[i]), "cuptiEnableCallback runtime");
    for (int i = 0; i < n_dr; i++)
      TRY(C.enable_cb(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, dr_ids[i]), "cuptiEnableCallback driver");
  }
  flags_on = flags;
  return 0;
undo: /* the first error's text stays; disabling a kind resets its per-id settings too */
  while (n_on > 0) C.disable(on[--n_on]);
  C.unsub(subscriber);
  return rc;
}
#undef KIND_ON
#undef TRY

/* Stop recording and flush every buffer into the rows; the subscriber is given back last (the callback
 * mode's first: no API row from a callback after the window). Every step is tried even when one
 * fails (the subscriber is given back whatever happened); the first failure is returned. */
#define STEP(call, what)                                                              \
  do {                                                                                \
    CUptiResult _r = (call);                                                          \
    if (_r != CUPTI_SUCCESS && !rc) rc = cupti_failed(_r, what);                      \
  } while (0)

int tk_stop(void) {
  int f = flags_on, rc = 0;
  const int cb = callback_mode(f);
  if (!f) return 0;
  flags_on = 0;
  if (cb) STEP(C.unsub(subscriber), "cuptiUnsubscribe");
  if (f & (TK_API_ALL | TK_API_SOME)) { /* disabling the kinds resets the per-id settings too */
    STEP(C.disable(CUPTI_ACTIVITY_KIND_RUNTIME), "disable RUNTIME");
    STEP(C.disable(CUPTI_ACTIVITY_KIND_DRIVER), "disable DRIVER");
  }
  if (f & TK_COPIES) {
    STEP(C.disable(CUPTI_ACTIVITY_KIND_MEMCPY), "disable MEMCPY");
    STEP(C.disable(CUPTI_ACTIVITY_KIND_MEMSET), "disable MEMSET");
  }
  if (f & TK_KERNELS) STEP(C.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable CONCURRENT_KERNEL");
  STEP(C.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  if (!cb) STEP(C.unsub(subscriber), "cuptiUnsubscribe");
  return rc;
}
#undef STEP

/* The rows so far: tk_rows() points at tk_count() rows, valid until the next tk_clear / tk_start. */
size_t tk_count(void) { return n_rows; }
const tk_row *tk_rows(void) { return rows; }
size_t tk_row_size(void) { return sizeof(tk_row); }
size_t tk_name_count(void) { return n_names; }
const char *tk_name(size_t i) { return i < n_names ? names[i] : NULL; }
uint64_t tk_dropped(void) { return n_dropped; }
uint64_t tk_other(void) { return n_other; }
int64_t tk_now(void) { return now_ns(); }

/* The CUDA API's name of a callback id (domain 1 driver, 2 runtime), or NULL. */
const char *tk_api_name(int domain, uint32_t cbid) {
  const char *s = NULL;
  if (!C.cbname || C.cbname((CUpti_CallbackDomain)domain, cbid, &s) != CUPTI_SUCCESS) return NULL;
  return s;
}

void tk_clear(void) {
  pthread_mutex_lock(&mu);
  n_rows = 0;
  n_dropped = 0;
  n_other = 0;
  pthread_mutex_unlock(&mu);
}
