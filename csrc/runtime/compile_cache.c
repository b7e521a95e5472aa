/* The persistent compile cache (see compile_cache.h). */
#include "runtime/compile_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "base/alloc.h"
#include "base/progress.h"
#include "base/stats.h"
#include "base/strbuf.h"
#include "base/profile.h"

#define DEFAULT_MAX_BYTES ((int64_t)2 << 30)
static const char kMagic[8] = {'T', 'P', 'U', 'X', 'E', 'X', 'E', '2'};

/* An entry: the header, its key (the program text), the serialized
 * executable. The name is a hash of the key; the key itself proves the entry
 * is this program's: a collision of names, a keying bug or a copied cache
 * gives a mismatch, a miss, and the entry is replaced. */
typedef struct header {
  char magic[8];
  uint64_t salt; /* the compile options' hash where they are not the directory's, else 0 */
  uint64_t key_size;
  uint64_t payload_size;
  uint64_t checksum; /* of the payload */
} header;

/* What an entry is looked up by. */
typedef struct entry_key {
  const char *text;
  size_t size;
  uint64_t salt;
} entry_key;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_dir[PATH_MAX];
static int64_t g_max_bytes;
static int64_t g_total = -1; /* bytes in the directory, -1: not counted yet */
static _Atomic unsigned g_tmp_counter;

const char *tpu_compile_cache_dir(void) { return g_dir; }

static int make_dirs(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

tpu_status_t tpu_compile_cache_configure(tpu_runtime *rt, const char *dir, int64_t max_bytes, const char *xla_flags) {
  pthread_mutex_lock(&g_lock);
  g_dir[0] = '\0';
  g_total = -1;
  g_max_bytes = max_bytes > 0 ? max_bytes : DEFAULT_MAX_BYTES;
  tpu_status_t st = NULL;
  if (dir != NULL && *dir != '\0') {
    /* One subdirectory per plugin build, compile options and XLA_FLAGS (XLA
     * reads its defaults from it): executables are not portable across XLA
     * versions, and options change what a program computes. */
    struct stat sb = {0};
    stat(tpu_runtime_plugin_path(rt), &sb);
    int major = 0, minor = 0;
    tpu_runtime_api_version(rt, &major, &minor);
    tpu_strbuf id = TPU_STRBUF_INIT;
    size_t options_size = 0;
    const char *options = tpu_runtime_compile_options(rt, &options_size);
    tpu_strbuf_printf(&id, "%s|%s|%d.%d|%lld|%lld|", tpu_runtime_platform_name(rt), tpu_runtime_platform_version(rt),
                      major, minor, (long long)sb.st_size, (long long)sb.st_mtime);
    tpu_strbuf_append(&id, options, options_size);
    if (xla_flags != NULL) tpu_strbuf_printf(&id, "|XLA_FLAGS=%s", xla_flags);
    uint64_t h = tpu_hash64(id.data, id.len, 17);
    tpu_strbuf_release(&id);
    snprintf(g_dir, sizeof g_dir, "%s/%s-%016llx", dir, tpu_runtime_platform_name(rt), (unsigned long long)h);
    if (make_dirs(g_dir) != 0) {
      st = tpu_status_new(TPU_ERR_RUNTIME, "cannot create the compile cache directory '%s': %s", g_dir,
                          strerror(errno));
      g_dir[0] = '\0';
    }
  }
  pthread_mutex_unlock(&g_lock);
  return st;
}

/* An entry is named by its program's text, and by the compile options where
 * they are not the directory's (a program the runtime compiles without its
 * XLA option overrides: |salt| their hash, else 0). */
static void entry_path(char *out, size_t cap, const char *dir, const entry_key *key) {
  uint64_t a = tpu_hash64(key->text, key->size, 0x5bd1e995 ^ key->salt);
  uint64_t b = tpu_hash64(key->text, key->size, 0x27d4eb2f165667c5ULL ^ key->salt);
  snprintf(out, cap, "%s/%016llx%016llx.xla", dir, (unsigned long long)a, (unsigned long long)b);
}

static bool read_full(int fd, void *buf, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = read(fd, (char *)buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += (size_t)r;
  }
  return true;
}

/* Whether the next |key->size| bytes of |fd| are |key|'s text. */
static bool key_matches(int fd, const entry_key *key) {
  char chunk[16384];
  for (size_t at = 0; at < key->size; at += sizeof chunk) {
    size_t n = key->size - at < sizeof chunk ? key->size - at : sizeof chunk;
    if (!read_full(fd, chunk, n) || memcmp(chunk, key->text + at, n) != 0) return false;
  }
  return true;
}

/* Takes away what stands at |path| and is no entry, so that the entry can be
 * written there: a symlink, a FIFO, a device node or an empty directory (a
 * directory with files in it stays, and the program is simply not cached). */
static void remove_non_entry(const char *path) {
  if (unlink(path) != 0 && (errno == EISDIR || errno == EPERM)) rmdir(path);
}

/* Reads and checks |key|'s entry at |path|; NULL if there is none or it is
 * unusable (removed, so that it is rewritten). Opened without following a
 * symlink and without blocking (a FIFO), and read only if it is a regular
 * file. */
static char *read_entry(const char *path, const entry_key *key, size_t *out_size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) remove_non_entry(path); /* a symlink */
    return NULL;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    remove_non_entry(path);
    return NULL;
  }
  header h;
  char *payload = NULL;
  bool ok = read_full(fd, &h, sizeof h) && memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.payload_size > 0 &&
            h.key_size <= (uint64_t)sb.st_size && h.payload_size <= (uint64_t)sb.st_size &&
            (uint64_t)sb.st_size == sizeof h + h.key_size + h.payload_size &&
            h.salt == key->salt && h.key_size == key->size && key_matches(fd, key);
  if (ok && (payload = tpu_alloc_or_null(h.payload_size)) == NULL) {
    close(fd); /* out of memory: a miss, the entry stays */
    return NULL;
  }
  ok = ok && read_full(fd, payload, h.payload_size) && tpu_hash64(payload, h.payload_size, 0) == h.checksum;
  close(fd);
  if (!ok) {
    free(payload);
    unlink(path); /* corrupt, truncated or another program's: a miss, rewritten below */
    return NULL;
  }
  *out_size = h.payload_size;
  utime(path, NULL); /* recently used: evicted last */
  return payload;
}

typedef struct file_age {
  char name[300];
  time_t mtime;
  int64_t size;
} file_age;

static int by_age(const void *a, const void *b) {
  const file_age *x = a, *y = b;
  return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Sums the directory; with |evict|, deletes the oldest entries until it is
 * under 90% of the cap. Lock held. */
static void scan_locked(bool evict) {
  DIR *d = opendir(g_dir);
  if (d == NULL) return;
  file_age *files = NULL;
  size_t n = 0, cap = 0;
  int64_t total = 0;
  struct dirent *de;
  char path[PATH_MAX + 300];
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len < 5 || strcmp(de->d_name + len - 4, ".xla") != 0 || len >= sizeof files->name) continue;
    snprintf(path, sizeof path, "%s/%s", g_dir, de->d_name);
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    total += sb.st_size;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      file_age *nf = tpu_realloc_or_null(files, cap * sizeof *nf);
      if (nf == NULL) break;
      files = nf;
    }
    snprintf(files[n].name, sizeof files[n].name, "%s", de->d_name);
    files[n].mtime = sb.st_mtime;
    files[n].size = sb.st_size;
    n++;
  }
  closedir(d);
  if (evict && total > g_max_bytes && files != NULL) {
    qsort(files, n, sizeof *files, by_age);
    for (size_t i = 0; i < n && total > g_max_bytes * 9 / 10; i++) {
      snprintf(path, sizeof path, "%s/%s", g_dir, files[i].name);
      if (unlink(path) == 0) total -= files[i].size;
    }
  }
  free(files);
  g_total = total;
}

/* Writes an entry atomically; failures only cost the cache a file. */
static void write_entry(const char *path, const entry_key *key, const char *bytes, size_t size) {
  char tmp[PATH_MAX + 128];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
  FILE *f = fopen(tmp, "wb");
  if (f == NULL) return;
  header h = {.salt = key->salt, .key_size = key->size, .payload_size = size, .checksum = tpu_hash64(bytes, size, 0)};
  memcpy(h.magic, kMagic, sizeof kMagic);
  bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(key->text, 1, key->size, f) == key->size &&
            fwrite(bytes, 1, size, f) == size;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, path) != 0) {
    remove_non_entry(path); /* an empty directory in its place */
    ok = rename(tmp, path) == 0;
  }
  if (!ok) {
    unlink(tmp);
    return;
  }
  pthread_mutex_lock(&g_lock);
  if (g_total < 0) scan_locked(false);
  else g_total += (int64_t)(sizeof h + key->size + size);
  if (g_total > g_max_bytes) scan_locked(true);
  pthread_mutex_unlock(&g_lock);
}

static tpu_status_t compile_cached(tpu_runtime *rt, const char *mlir, size_t size, const tpu_compile_options *options,
                                   tpu_executable **out_exe, bool *out_loaded) {
  *out_exe = NULL;
  *out_loaded = false;
  /* In a forked child every load would fail and remove a good entry. */
  TPU_RETURN_IF_ERROR(tpu_runtime_check_fork());
  char dir[PATH_MAX];
  pthread_mutex_lock(&g_lock);
  snprintf(dir, sizeof dir, "%s", g_dir);
  pthread_mutex_unlock(&g_lock);
  if (dir[0] == '\0') return tpu_executable_compile(rt, mlir, size, options, out_exe);

  tpu_strbuf used = TPU_STRBUF_INIT;
  tpu_status_t st = tpu_runtime_compile_options_for(rt, options, &used);
  if (st != NULL) {
    tpu_strbuf_release(&used);
    return st;
  }
  size_t dir_size = 0;
  const char *dir_options = tpu_runtime_compile_options(rt, &dir_size);
  bool same = used.len == dir_size && memcmp(used.data, dir_options, dir_size) == 0;
  entry_key key = {.text = mlir, .size = size, .salt = same ? 0 : tpu_hash64(used.data, used.len, 17)};
  tpu_strbuf_release(&used);
  char path[PATH_MAX + 48];
  entry_path(path, sizeof path, dir, &key);
  size_t n = 0;
  int64_t trace_start = tpu_profile_enabled() ? tpu_profile_now_ns() : 0;
  char *bytes = read_entry(path, &key, &n);
  if (bytes != NULL) {
    tpu_status_t st = tpu_executable_deserialize(rt, bytes, n, out_exe);
    free(bytes);
    if (st == NULL) {
      const char *name = options != NULL && options->name != NULL ? options->name : "program";
      tpu_executable_set_name(*out_exe, name);
      if (trace_start != 0) tpu_profile_span(TPU_PROFILE_COMPILE, name, "disk load", -1, trace_start, tpu_profile_now_ns());
      *out_loaded = true;
      return NULL;
    }
    tpu_status_free(st); /* unloadable (another build, another CPU): recompile and replace */
    unlink(path);
  }
  TPU_RETURN_IF_ERROR(tpu_executable_compile(rt, mlir, size, options, out_exe));
  char *ser = NULL;
  st = tpu_executable_serialize(rt, *out_exe, &ser, &n);
  if (st == NULL) write_entry(path, &key, ser, n);
  else tpu_status_free(st); /* a plugin that cannot serialize: no disk cache */
  free(ser);
  return NULL;
}

tpu_status_t tpu_compile_cached(tpu_runtime *rt, const char *mlir, size_t size, const tpu_compile_options *options,
                                tpu_executable **out_exe, bool *out_loaded) {
  tpu_progress_compile_begin();
  tpu_status_t st = compile_cached(rt, mlir, size, options, out_exe, out_loaded);
  tpu_progress_compile_end(*out_loaded);
  return st;
}
