// The tpu random generator: a host-side (seed, offset) pair. Each random op
// takes the pair as a runtime operand and advances the offset, so a
// torch.manual_seed() run is reproducible and no state lives on the device.
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>
#include <vector>

#include "torch/tpu_torch.h"
#include "torch/generator.h"

namespace torchtpu {

namespace {
constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // CUDA's default too
}

TpuGenerator::TpuGenerator(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(kDefaultSeed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void TpuGenerator::set_offset(uint64_t offset) { offset_ = offset; }
uint64_t TpuGenerator::get_offset() const { return offset_; }
uint64_t TpuGenerator::current_seed() const { return seed_; }

uint64_t TpuGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom(true);
  set_current_seed(s);
  return s;
}

// State: 16 bytes, seed then offset, in a CPU uint8 tensor (as CUDA's).
c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  uint64_t words[2] = {seed_, offset_};
  std::memcpy(state.data_ptr(), words, sizeof words);
  return state.getIntrusivePtr();
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == at::kByte && new_state.device().is_cpu(),
              "RNG state must be a torch.ByteTensor of 16 bytes");
  uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof words);
  seed_ = words[0];
  offset_ = words[1];
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* g = new TpuGenerator(device().index());
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

std::pair<uint64_t, uint64_t> TpuGenerator::next(uint64_t increment) {
  uint64_t off = offset_;
  offset_ += increment;
  return {seed_, off};
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> gens;
  std::call_once(once, [] {
    int n = device_count_or_zero();
    for (int i = 0; i < (n > 0 ? n : 1); i++)
      gens.push_back(at::make_generator<TpuGenerator>(static_cast<c10::DeviceIndex>(i)));
  });
  if (device < 0) device = current_device();
  TORCH_CHECK(device < static_cast<c10::DeviceIndex>(gens.size()), "invalid tpu device index ", static_cast<int>(device));
  return gens[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  return at::make_generator<TpuGenerator>(device < 0 ? current_device() : device);
}

}  // namespace torchtpu
