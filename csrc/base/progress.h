/* Compile progress: how many programs are being compiled (or loaded from the
 * disk cache) now and how many have been since the current burst of compiles
 * began, for the progress line a user sees while a first run compiles
 * (torch/progress.cpp prints it; this module only counts). A burst begins
 * with a compile when none is under way and ends when tpu_progress_end_burst
 * finds the compiles idle. Thread-safe. */
#ifndef TPU_BASE_PROGRESS_H_
#define TPU_BASE_PROGRESS_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_progress {
  bool active;          /* a burst is under way */
  int64_t in_flight;    /* compiles and loads running now */
  int64_t done;         /* finished in this burst, loads included */
  int64_t loaded;       /* of |done|, loaded from the disk cache */
  double seconds;       /* since the burst's first compile began */
  double idle_seconds;  /* since the last one finished (0 while any runs) */
} tpu_progress;

void tpu_progress_compile_begin(void);
/* |loaded|: the program came from the disk cache. */
void tpu_progress_compile_end(bool loaded);
/* The current burst's numbers (all zero when none is under way). */
void tpu_progress_read(tpu_progress *out);
/* Ends the burst when nothing has run for |idle_seconds| (0 with nothing in
 * flight: now); returns true and its final numbers in |out| if it ended one. */
bool tpu_progress_end_burst(double idle_seconds, tpu_progress *out);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_PROGRESS_H_ */
