// The compile progress line: a first run compiles tens to hundreds of
// programs in silence (a cold torch.compile, a model's first step), so while
// a burst of compiles (base/progress.c counts them) lasts longer than the
// delay, a watcher thread writes "torchtpu: compiling programs: 87 done, 1
// running, 12.1 s" to stderr (on a terminal one line, rewritten at most
// twice a second; elsewhere a line every 5 s), and when the burst ends one
// summary line. Python's torchtpu/__init__.py decides whether it runs
// (TORCHTPU_PROGRESS, or stderr being a terminal).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "torch/tpu_torch.h"

extern "C" {
#include "base/progress.h"
}

namespace torchtpu {
namespace {

constexpr double kIdleEndsBurst = 0.5;  // seconds without a compile that end a burst

std::mutex g_print_lock;  // one writer at a time; held while |g_stopped| changes
bool g_started = false, g_stopped = false, g_tty = false;
pid_t g_pid;  // the process whose thread watches: a forked child has none (and maybe a held lock)
double g_delay = 1.0;
std::chrono::steady_clock::time_point g_last_note;
bool g_noted = false;

void write_line(const std::string& text, bool final_line) {
  std::string line = g_tty ? "\r\033[K" + text + (final_line ? "\n" : "") : text + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

std::string summary(const tpu_progress& p) {
  char text[160];
  std::snprintf(text, sizeof text, "torchtpu: compiled %lld program%s in %.1f s", static_cast<long long>(p.done),
                p.done == 1 ? "" : "s", p.seconds);
  std::string s = text;
  if (p.loaded > 0) s += " (" + std::to_string(p.loaded) + " loaded from the disk cache)";
  return s;
}

// Ends an idle burst (caller holds g_print_lock): its summary line when it
// ran past the delay.
void end_burst(double idle) {
  tpu_progress done;
  if (!tpu_progress_end_burst(idle, &done)) return;
  if (g_noted || done.seconds >= g_delay) write_line(summary(done), true);
  g_noted = false;
}

void note(const tpu_progress& p) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - g_last_note).count();
  if (p.seconds < g_delay || (g_noted && since < (g_tty ? 0.5 : 5.0))) return;
  char text[160];
  std::snprintf(text, sizeof text, "torchtpu: compiling programs: %lld done, %lld running, %.1f s",
                static_cast<long long>(p.done), static_cast<long long>(p.in_flight), p.seconds);
  write_line(text, false);
  g_last_note = now;
  g_noted = true;
}

void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> hold(g_print_lock);
    if (g_stopped) return;
    tpu_progress p;
    tpu_progress_read(&p);
    if (!p.active) continue;
    if (p.in_flight == 0 && p.idle_seconds >= kIdleEndsBurst) end_burst(kIdleEndsBurst);
    else note(p);
  }
}

}  // namespace

void progress_start(double delay, bool tty) {
  std::lock_guard<std::mutex> hold(g_print_lock);
  g_delay = delay;
  g_tty = tty;
  if (g_started) return;
  g_started = true;
  g_pid = ::getpid();
  std::thread(watch).detach();
}

void progress_finish() {
  if (!g_started || ::getpid() != g_pid) return;
  std::lock_guard<std::mutex> hold(g_print_lock);
  if (!g_started || g_stopped) return;
  g_stopped = true;
  end_burst(0.0);
}

}  // namespace torchtpu
