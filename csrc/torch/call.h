// What the eager kernel (dispatch.cpp) and compiled graphs (graph.cpp) do
// alike around a program: the matmul precision they build it with, the key
// of the inputs a graph program is built for, and running a program's entry
// (random numbers, new outputs, execute).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "torch/tpu_torch.h"

namespace torchtpu {

// The precision float32 matmuls are built with
// (torch.set_float32_matmul_precision): part of every key.
tpu_hlo_precision_t matmul_precision();

// The key of a program over |call|'s arguments (eager.c's key builder, the
// one eager lookups use), after settling their storages: a compiled graph's
// input signature.
std::string call_key(const tpu_eager_call& call);

// How a program's entry runs: tpu_eager_run (the thread's eager mode: an
// eager call) or tpu_eager_execute (at once: a compiled graph).
enum class RunMode { kEager, kExecute };

// Runs |entry| for |call|: draws the call's random numbers from |gen|
// (undefined: the device's default generator) when |rng| says the program
// uses them, makes its |num_outputs| new outputs from the entry's metadata
// (undefined where the metadata says none, or |aliased|(o) says output o
// writes an argument), and runs it. Returns the outputs.
template <typename Aliased>
std::vector<at::Tensor> run_entry(tpu_eager_entry* entry, tpu_eager_call& call, int num_outputs, bool rng,
                                  at::Generator gen, Aliased aliased, RunMode mode);

// The pieces run_entry is made of.
void draw_rng(tpu_eager_call& call, at::Generator gen);
at::Tensor new_output(const tpu_eager_entry* entry, int o);
void execute_entry(tpu_eager_entry* entry, const tpu_eager_call& call, tpu_storage* const* storages, RunMode mode);

template <typename Aliased>
std::vector<at::Tensor> run_entry(tpu_eager_entry* entry, tpu_eager_call& call, int num_outputs, bool rng,
                                  at::Generator gen, Aliased aliased, RunMode mode) {
  if (rng) draw_rng(call, std::move(gen));
  std::vector<at::Tensor> outs(num_outputs);
  c10::SmallVector<tpu_storage*, TPU_EAGER_MAX_RETURNS> storages(num_outputs, nullptr);
  for (int o = 0; o < num_outputs; o++) {
    if (aliased(o)) continue;
    outs[o] = new_output(entry, o);
    if (outs[o].defined()) storages[o] = storage_of(outs[o]);
  }
  execute_entry(entry, call, storages.data(), mode);
  return outs;
}

}  // namespace torchtpu
