/* The compile log (see compiles.h). */
#include "base/compiles.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "base/strbuf.h"

enum { KEPT = 16, DEFAULT_LIMIT = 8 };

typedef struct owner {
  char *name;
  uint64_t hash;
  uint64_t *sigs; /* hashes of its distinct signatures */
  int64_t num_sigs, cap_sigs, compiled, loaded;
  double seconds;
  char *kept[KEPT];
  bool warned;
} owner;

typedef struct alias {
  char *prefix, *owner;
} alias;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static owner *g_owners;
static size_t g_num_owners, g_cap_owners;
static alias *g_aliases;
static size_t g_num_aliases, g_cap_aliases;
static char **g_warnings; /* pending, oldest first */
static size_t g_num_warnings, g_cap_warnings;
static int g_limit;
static tpu_compiles_listener g_listener;

static char *dup_or_null(const char *s) {
  char *copy = NULL;
  tpu_status_free(tpu_strdup(s, &copy));
  return copy;
}

static bool grow(void **items, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return true;
  size_t n = *cap ? 2 * *cap : 16;
  void *p = tpu_realloc_or_null(*items, n * size);
  if (p == NULL) return false;
  *items = p;
  *cap = n;
  return true;
}

void tpu_compiles_set_limit(int n) {
  pthread_mutex_lock(&g_lock);
  g_limit = n;
  pthread_mutex_unlock(&g_lock);
}

static int limit_locked(void) {
  return g_limit > 0 ? g_limit : DEFAULT_LIMIT;
}

int tpu_compiles_limit(void) {
  pthread_mutex_lock(&g_lock);
  int n = limit_locked();
  pthread_mutex_unlock(&g_lock);
  return n;
}

void tpu_compiles_set_listener(tpu_compiles_listener fn) {
  pthread_mutex_lock(&g_lock);
  g_listener = fn;
  pthread_mutex_unlock(&g_lock);
}

void tpu_compiles_set_owner(const char *prefix, const char *name) {
  char *p = dup_or_null(prefix), *o = dup_or_null(name);
  if (p == NULL || o == NULL) {
    free(p); /* out of memory: the programs keep their own names */
    free(o);
    return;
  }
  pthread_mutex_lock(&g_lock);
  if (grow((void **)&g_aliases, &g_cap_aliases, g_num_aliases + 1, sizeof *g_aliases)) {
    g_aliases[g_num_aliases++] = (alias){p, o};
    p = o = NULL;
  }
  pthread_mutex_unlock(&g_lock);
  free(p);
  free(o);
}

/* The owner of programs named |name|. Lock held. */
static const char *owner_name_locked(const char *name) {
  for (size_t i = 0; i < g_num_aliases; i++) {
    size_t n = strlen(g_aliases[i].prefix);
    if (strncmp(name, g_aliases[i].prefix, n) == 0 && (name[n] == '\0' || name[n] == '_')) return g_aliases[i].owner;
  }
  return name;
}

static owner *find_locked(const char *name) {
  uint64_t h = tpu_hash64(name, strlen(name), 0);
  for (size_t i = 0; i < g_num_owners; i++)
    if (g_owners[i].hash == h && strcmp(g_owners[i].name, name) == 0) return &g_owners[i];
  if (!grow((void **)&g_owners, &g_cap_owners, g_num_owners + 1, sizeof *g_owners)) return NULL;
  owner *o = &g_owners[g_num_owners];
  memset(o, 0, sizeof *o);
  if ((o->name = dup_or_null(name)) == NULL) return NULL;
  o->hash = h;
  g_num_owners++;
  return o;
}

/* The |i|th argument of a signature ("a; b; c"), as [*out, *out + *len). */
static bool arg_at(const char *sig, int i, const char **out, size_t *len) {
  for (; i > 0; i--) {
    sig = strstr(sig, "; ");
    if (sig == NULL) return false;
    sig += 2;
  }
  const char *end = strstr(sig, "; ");
  *out = sig;
  *len = end != NULL ? (size_t)(end - sig) : strlen(sig);
  return true;
}

enum { CHANGE_SHAPE = 1, CHANGE_DTYPE = 2, CHANGE_LAYOUT = 4, CHANGE_NUMBER = 8, CHANGE_OTHER = 16 };

/* What differs between two arguments: a tensor's "float32[4,8]{strides}+offset"
 * (dtype, shape, layout) or a number baked into the program. */
static int classify(const char *a, size_t na, const char *b, size_t nb) {
  const char *sa = memchr(a, '[', na), *sb = memchr(b, '[', nb);
  if (sa != NULL && sb != NULL) {
    const char *ea = memchr(sa, ']', na - (size_t)(sa - a)), *eb = memchr(sb, ']', nb - (size_t)(sb - b));
    if (ea == NULL || eb == NULL) return CHANGE_OTHER;
    int kind = 0;
    if (sa - a != sb - b || memcmp(a, b, (size_t)(sa - a)) != 0) kind |= CHANGE_DTYPE;
    if (ea - sa != eb - sb || memcmp(sa, sb, (size_t)(ea - sa)) != 0) kind |= CHANGE_SHAPE;
    size_t ra = na - (size_t)(ea - a), rb = nb - (size_t)(eb - b);
    if (ra != rb || memcmp(ea, eb, ra) != 0) kind |= CHANGE_LAYOUT;
    return kind ? kind : CHANGE_OTHER;
  }
  bool num_a = na > 0 && strchr("-0123456789.", a[0]) != NULL, num_b = nb > 0 && strchr("-0123456789.", b[0]) != NULL;
  return num_a && num_b ? CHANGE_NUMBER : CHANGE_OTHER;
}

static const char *const kChangeNames[] = {"shape", "dtype", "layout (strides or storage offset)",
                                           "a Python number baked into the program", "argument"};

/* How many arguments of |a| and |b| differ (a different count: all). */
static int differences(const char *a, const char *b) {
  int n = 0;
  for (int i = 0;; i++) {
    const char *x, *y;
    size_t nx, ny;
    bool hx = arg_at(a, i, &x, &nx), hy = arg_at(b, i, &y, &ny);
    if (!hx && !hy) return n;
    if (hx != hy) return 1 << 20;
    n += nx != ny || memcmp(x, y, nx) != 0;
  }
}

/* The warning of |o|, whose newest signature |sig| passed |limit|: what
 * changed from the kept signature nearest to it (the fewest arguments
 * apart; the first of those), and the remedy. */
static char *warning_text(const owner *o, const char *sig, int limit) {
  const char *near = "";
  int best = -1;
  for (int k = 0; k < KEPT && k < o->num_sigs - 1 && o->kept[k] != NULL; k++) {
    int d = differences(o->kept[k], sig);
    if (best < 0 || d < best) {
      best = d;
      near = o->kept[k];
    }
  }
  tpu_strbuf sb = TPU_STRBUF_INIT;
  tpu_strbuf_printf(&sb,
                    "torchtpu: '%s' hit the compile limit (%d signatures; torchtpu.set_compile_limit or "
                    "TORCHTPU_COMPILE_LIMIT): each new signature compiles its own XLA program.\n"
                    "   last signature:    %s\n   nearest before it: %s\n   what changed:",
                    o->name, limit, sig, near);
  int kinds = 0, shown = 0;
  for (int i = 0;; i++) {
    const char *a, *b;
    size_t na, nb;
    bool ha = arg_at(near, i, &a, &na), hb = arg_at(sig, i, &b, &nb);
    if (!ha && !hb) break;
    if (ha != hb) {
      tpu_strbuf_printf(&sb, "%s the number of arguments", shown++ ? ";" : "");
      kinds |= CHANGE_OTHER;
      break;
    }
    if (na == nb && memcmp(a, b, na) == 0) continue;
    int k = classify(a, na, b, nb);
    kinds |= k;
    if (shown++ >= 4) continue;
    tpu_strbuf_printf(&sb, "%s", shown > 1 ? ";" : "");
    for (int bit = 0, first = 1; bit < 5; bit++)
      if (k & (1 << bit)) {
        tpu_strbuf_printf(&sb, "%s %s", first ? "" : " and", kChangeNames[bit]);
        first = 0;
      }
    tpu_strbuf_printf(&sb, " of argument %d (%.*s -> %.*s)", i, (int)na, a, (int)nb, b);
  }
  if (shown == 0) tpu_strbuf_puts(&sb, " the tensors' storages (their buffer types)");
  tpu_strbuf_puts(&sb, "\nTo compile once:");
  if (kinds & CHANGE_SHAPE)
    tpu_strbuf_puts(&sb,
                    " Pad inputs to a few fixed sizes (buckets); for generate(), use "
                    "cache_implementation=\"static\". Under torch.compile, dynamic=True or "
                    "torch._dynamo.mark_dynamic stop Dynamo's retracing, but every shape is still its own XLA "
                    "program.");
  if (kinds & CHANGE_DTYPE) tpu_strbuf_puts(&sb, " Convert inputs to one dtype before the call.");
  if (kinds & CHANGE_LAYOUT) tpu_strbuf_puts(&sb, " Make inputs contiguous (.contiguous()) before the call.");
  if (kinds & CHANGE_NUMBER)
    tpu_strbuf_puts(&sb, " Pass a number that changes as a 0-dim tpu tensor, a runtime operand.");
  if (kinds == 0 || kinds == CHANGE_OTHER) tpu_strbuf_puts(&sb, " Keep the call's arguments the same.");
  tpu_strbuf_puts(&sb, "\nTo log every compile: TORCHTPU_LOG=compiles; torchtpu.compiles() reports them.");
  return tpu_strbuf_take(&sb);
}

void tpu_compiles_note(const char *name, const char *signature, tpu_compile_event ev, double seconds) {
  if (signature == NULL) signature = "";
  pthread_mutex_lock(&g_lock);
  owner *o = find_locked(owner_name_locked(name));
  tpu_compiles_listener listener = g_listener;
  char *owner_copy = NULL;
  if (o != NULL) {
    if (ev == TPU_COMPILE_COMPILED) o->compiled++;
    if (ev == TPU_COMPILE_LOADED) o->loaded++;
    o->seconds += seconds;
    uint64_t h = tpu_hash64(signature, strlen(signature), 0);
    bool seen = false;
    for (int64_t i = 0; i < o->num_sigs && !seen; i++) seen = o->sigs[i] == h;
    size_t cap = (size_t)o->cap_sigs;
    if (!seen && grow((void **)&o->sigs, &cap, (size_t)o->num_sigs + 1, sizeof *o->sigs)) {
      o->cap_sigs = (int64_t)cap;
      if (o->num_sigs < KEPT) o->kept[o->num_sigs] = dup_or_null(signature);
      o->sigs[o->num_sigs++] = h;
      int limit = limit_locked();
      if (o->num_sigs > limit && !o->warned &&
          grow((void **)&g_warnings, &g_cap_warnings, g_num_warnings + 1, sizeof *g_warnings)) {
        o->warned = true;
        char *text = warning_text(o, signature, limit);
        if (text != NULL) g_warnings[g_num_warnings++] = text;
      }
    }
    if (listener != NULL) owner_copy = dup_or_null(o->name);
  }
  pthread_mutex_unlock(&g_lock);
  if (listener != NULL) listener(owner_copy != NULL ? owner_copy : name, signature, ev, seconds);
  free(owner_copy);
}

char *tpu_compiles_take_warning(void) {
  pthread_mutex_lock(&g_lock);
  char *w = NULL;
  if (g_num_warnings > 0) {
    w = g_warnings[0];
    memmove(g_warnings, g_warnings + 1, (g_num_warnings - 1) * sizeof *g_warnings);
    g_num_warnings--;
  }
  pthread_mutex_unlock(&g_lock);
  return w;
}

void tpu_compiles_each(void (*fn)(void *ctx, const tpu_compiles_entry *e), void *ctx) {
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_num_owners; i++) {
    const owner *o = &g_owners[i];
    if (o->num_sigs == 0 && o->compiled == 0 && o->loaded == 0) continue;
    int kept = 0;
    while (kept < KEPT && kept < o->num_sigs && o->kept[kept] != NULL) kept++;
    tpu_compiles_entry e = {.owner = o->name, .num_signatures = o->num_sigs, .compiled = o->compiled,
                            .loaded = o->loaded, .seconds = o->seconds,
                            .signatures = (const char *const *)o->kept, .num_kept = kept};
    fn(ctx, &e);
  }
  pthread_mutex_unlock(&g_lock);
}

void tpu_compiles_reset(void) {
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_num_owners; i++) {
    owner *o = &g_owners[i];
    for (int k = 0; k < KEPT; k++) free(o->kept[k]);
    free(o->sigs);
    char *name = o->name;
    uint64_t h = o->hash;
    memset(o, 0, sizeof *o);
    o->name = name;
    o->hash = h;
  }
  for (size_t i = 0; i < g_num_warnings; i++) free(g_warnings[i]);
  g_num_warnings = 0;
  pthread_mutex_unlock(&g_lock);
}
