// The c10d backend "tpu_dist": collectives on tpu tensors. On the CPU plugin a
// PJRT buffer's bytes are host memory, so the work is PyTorch's own gloo
// running on those bytes in place: an input is a CPU view of its storage's
// buffer (after its producer finished), an output gets a fresh buffer (PJRT
// buffers are immutable once read) that gloo writes and that replaces the
// storage's buffer when the call is issued. The buffers an output replaced are
// kept until the work completes (an input may read them: FSDP2 gathers from a
// slice of its output), then released. CPU tensors of the same group go to
// the inner gloo unchanged. What gloo lacks is supplied here: PREMUL_SUM (the
// factor applied on the host, then SUM), an agreement check before each
// collective (gloo aborts the process on a size mismatch), a DDP timer for
// tpu. Users must not write a tensor of an async collective before wait(), as
// with gloo.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#include <torch/csrc/utils/pybind.h>

#include <ATen/core/ivalue.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "torch/tpu_torch.h"

namespace torchtpu {
namespace {

namespace py = pybind11;
using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; }

struct Retired {
  tpu_buffer* buf;
  tpu_hlo_type type;
  int64_t nbytes;
  int device;
};

bool same_type(const tpu_hlo_type& a, const tpu_hlo_type& b) {
  if (a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; i++)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

// Large retired buffers, kept for the next output of the same type and device:
// a fresh 64 MiB buffer is a new mapping whose pages the kernel zeroes on first
// write, which made an in-place all_reduce of 64 MiB 0.39x gloo's on CPU tensors.
// A pooled buffer is written only after every launch on its device has finished
// (tpu_runtime_synchronize), so no program still reads it: the same reuse of
// memory as an allocation that gets a freed buffer's address back.
constexpr int64_t kPoolMinBytes = int64_t{1} << 20;
constexpr int64_t kPoolMaxBytes = int64_t{256} << 20;
struct Pool {
  std::mutex mu;
  std::vector<Retired> items;
  int64_t bytes = 0;
};
Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: buffers may be retired during exit
  return *p;
}

void retire(const Retired& r) {
  if (r.nbytes >= kPoolMinBytes) {
    Pool& p = pool();
    std::lock_guard<std::mutex> g(p.mu);
    if (p.bytes + r.nbytes <= kPoolMaxBytes) {
      p.items.push_back(r);
      p.bytes += r.nbytes;
      return;
    }
  }
  tpu_buffer_destroy(runtime(), r.buf);
}

tpu_buffer* pool_take(const tpu_hlo_type& type, int device) {
  Pool& p = pool();
  tpu_buffer* found = nullptr;
  {
    std::lock_guard<std::mutex> g(p.mu);
    for (size_t i = 0; i < p.items.size(); i++) {
      if (p.items[i].device == device && same_type(p.items[i].type, type)) {
        found = p.items[i].buf;
        p.bytes -= p.items[i].nbytes;
        p.items.erase(p.items.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  if (found == nullptr) return nullptr;
  tpu_status_t st = tpu_runtime_synchronize(runtime(), device);
  if (st != nullptr) {
    tpu_buffer_destroy(runtime(), found);
    TPU_CHECK(st);
  }
  return found;
}

// What one issued call holds until gloo is done with the host memory.
struct Staged {
  std::vector<at::Tensor> keep;        // tpu tensors whose buffers gloo reads or writes
  std::vector<at::Tensor> temps;       // host temporaries (PREMUL_SUM's scaled inputs)
  std::vector<Retired> retired;        // buffers outputs replaced, released (or pooled) at completion
  std::unordered_map<tpu_storage*, char*> fresh;  // storages given a new buffer by this call
  std::once_flag done;
  std::once_flag completed;  // the work's future: by gloo's callback or by wait()

  void release() {
    std::call_once(done, [this] {
      for (const Retired& r : retired) retire(r);
      retired.clear();
      keep.clear();
      temps.clear();
    });
  }
  ~Staged() { release(); }
};
using StagedPtr = std::shared_ptr<Staged>;

char* host_address(tpu_buffer* buf) {
  void* p = nullptr;
  TPU_CHECK(tpu_buffer_host_pointer(runtime(), buf, &p));
  return static_cast<char*>(p);
}

at::Tensor view_at(char* base, const at::Tensor& t) {
  return at::from_blob(base + t.storage_offset() * t.element_size(), t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
}

at::Tensor plain(const at::Tensor& t) {
  return (t.is_conj() || t.is_neg()) ? t.resolve_conj().resolve_neg() : t;
}

// A CPU tensor over the bytes |t| (a tpu tensor) reads, no copy; CPU tensors
// pass through.
at::Tensor host_in(const at::Tensor& t0, Staged& s) {
  if (!is_tpu(t0)) return t0;
  at::Tensor t = plain(t0);
  tpu_storage* box = storage_of(t);
  if (box == nullptr) return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  s.keep.push_back(t);
  auto it = s.fresh.find(box);
  if (it != s.fresh.end()) return view_at(it->second, t);
  TPU_CHECK(tpu_storage_settle(box, TPU_CUT_HOST_READ));  // fused eager's recorded ops on it run first
  if (box->buf == nullptr) TPU_CHECK(tpu_storage_materialize(box, to_tpu(t.scalar_type())));
  TPU_CHECK(tpu_buffer_await(runtime(), box->buf));
  return view_at(host_address(box->buf), t);
}

// A CPU tensor over the bytes gloo writes for |t| (a tpu tensor): |t|'s
// storage gets a fresh buffer now, holding the old contents unless |t|
// covers the whole storage (or |keep| is false); CPU tensors pass through.
// Inputs must be mapped (host_in) before outputs that may share their storage.
at::Tensor host_out(const at::Tensor& t, Staged& s, bool keep = true) {
  if (!is_tpu(t)) return t;
  TORCH_CHECK(!t.is_conj() && !t.is_neg(), "tpu_dist: an output with a lazy conjugate or negative bit");
  tpu_storage* box = storage_of(t);
  if (box == nullptr) return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  s.keep.push_back(t);
  auto it = s.fresh.find(box);
  if (it != s.fresh.end()) return view_at(it->second, t);
  TPU_CHECK(tpu_storage_settle(box, TPU_CUT_HOST_WRITE));
  tpu_runtime* rt = runtime();
  bool whole = t.is_contiguous() && t.storage_offset() == 0 &&
               t.numel() * static_cast<int64_t>(t.element_size()) == box->nbytes;
  tpu_dtype_t dt = to_tpu(t.scalar_type());
  tpu_hlo_type type;
  if (whole) {
    type = tpu_storage_dense_type(dt, static_cast<int>(t.dim()), t.sizes().data());
  } else {
    type = tpu_storage_type(box, dt);
  }
  tpu_buffer* buf = box->nbytes >= kPoolMinBytes ? pool_take(type, box->device) : nullptr;
  if (buf == nullptr) TPU_CHECK(tpu_buffer_uninitialized(rt, box->device, type.dtype, type.dims, type.rank, &buf));
  char* base = nullptr;
  tpu_status_t st = tpu_buffer_await(rt, buf);
  if (st == nullptr) st = tpu_buffer_host_pointer(rt, buf, reinterpret_cast<void**>(&base));
  if (st == nullptr && keep && !whole && box->buf != nullptr) {
    st = tpu_buffer_await(rt, box->buf);
    char* old = nullptr;
    if (st == nullptr) st = tpu_buffer_host_pointer(rt, box->buf, reinterpret_cast<void**>(&old));
    if (st == nullptr) std::memcpy(base, old, static_cast<size_t>(box->nbytes));
  }
  if (st != nullptr) {
    tpu_buffer_destroy(rt, buf);
    TPU_CHECK(st);
  }
  if (box->buf != nullptr) s.retired.push_back({box->buf, box->type, box->nbytes, box->device});
  box->buf = nullptr;  // retired, not released: an input of this call may read it
  tpu_storage_set(box, buf, &type);
  s.fresh.emplace(box, base);
  return view_at(base, t);
}

// In-place inputs-and-outputs (all_reduce, broadcast). A large one works in
// its storage's own buffer, once no launch on the device still reads it
// (tpu_runtime_synchronize, as a pooled buffer waits): a storage owns its
// buffer alone, and uploads copy (kImmutableOnlyDuringCall), so no other
// tensor sees the bytes change. Copying 64 MiB into a fresh buffer first made
// the all_reduce 0.82x gloo's. A small one lands in a fresh buffer that first
// holds the input: no device-wide wait for it.
at::Tensor host_inout(const at::Tensor& t, Staged& s) {
  if (!is_tpu(t)) return t;
  at::Tensor in = host_in(t, s);
  tpu_storage* box = storage_of(t);
  if (box != nullptr && box->nbytes >= kPoolMinBytes && s.fresh.find(box) == s.fresh.end()) {
    TPU_CHECK(tpu_runtime_synchronize(runtime(), box->device));
    return in;
  }
  at::Tensor out = host_out(t, s, /*keep=*/true);
  if (in.numel() > 0 && in.data_ptr() != out.data_ptr()) out.copy_(in);
  return out;
}

std::vector<at::Tensor> map_in(const std::vector<at::Tensor>& ts, Staged& s) {
  std::vector<at::Tensor> r;
  r.reserve(ts.size());
  for (const auto& t : ts) r.push_back(host_in(t, s));
  return r;
}

std::vector<at::Tensor> map_out(const std::vector<at::Tensor>& ts, Staged& s) {
  std::vector<at::Tensor> r;
  r.reserve(ts.size());
  for (const auto& t : ts) r.push_back(host_out(t, s));
  return r;
}

bool any_tpu(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (is_tpu(t)) return true;
  return false;
}

c10::Device future_device(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (is_tpu(t)) return t.device();
  return c10::Device(c10::DeviceType::PrivateUse1, 0);
}

// A gloo work on host memory, seen as a work on the tpu tensors: its future
// completes (with |outputs|) once gloo's does, after the retired buffers are
// released.
class TpuWork : public c10d::Work {
 public:
  TpuWork(int rank, OpType type, WorkPtr inner, StagedPtr staged, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), inner_(std::move(inner)), staged_(std::move(staged)), outputs_(std::move(outputs)) {
    std::vector<c10::Device> devices;
    if (any_tpu(outputs_)) devices.push_back(future_device(outputs_));
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
    c10::intrusive_ptr<c10::ivalue::Future> inner_future;
    try {
      inner_future = inner_->getFuture();
    } catch (const c10::Error&) {
      inner_future = nullptr;  // gloo's send/recv works have none: finished in wait()
    }
    if (inner_future) {
      auto fut = future_;
      auto staged_ref = staged_;
      auto outs = outputs_;
      inner_future->addCallback([fut, staged_ref, outs](c10::ivalue::Future& f) {
        staged_ref->release();
        std::call_once(staged_ref->completed, [&] {
          if (f.hasError()) {
            fut->setError(f.exception_ptr());
          } else {
            fut->markCompleted(c10::IValue(outs));
          }
        });
      });
    }
  }

  bool isCompleted() override { return future_->completed() || (inner_->isCompleted() && finish()); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->completed() ? future_->exception_ptr() : nullptr; }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void abort() override { inner_->abort(); }
  uint64_t getSequencenumber() const override { return inner_->getSequencenumber(); }

  bool wait(std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(timeout);
    } catch (...) {
      staged_->release();
      auto e = std::current_exception();
      std::call_once(staged_->completed, [&] { future_->setError(e); });
      throw;
    }
    finish();
    future_->wait();
    return true;
  }

 private:
  bool finish() {
    staged_->release();
    std::call_once(staged_->completed, [&] { future_->markCompleted(c10::IValue(outputs_)); });
    return true;
  }

  WorkPtr inner_;
  StagedPtr staged_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

const char* op_name(int op) {
  static const char* kNames[] = {"broadcast", "all_reduce", "all_reduce_coalesced", "reduce", "all_gather",
                                 "all_gather_into_tensor", "all_gather_coalesced", "gather", "scatter",
                                 "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all",
                                 "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"};
  return (op >= 0 && op < static_cast<int>(sizeof kNames / sizeof *kNames)) ? kNames[op] : "collective";
}
enum Op {
  kBroadcast, kAllreduce, kAllreduceCoalesced, kReduce, kAllgather, kAllgatherBase, kAllgatherCoalesced,
  kGather, kScatter, kReduceScatter, kReduceScatterBase, kAllToAllBase, kAllToAll, kAllgatherIntoCoalesced,
  kReduceScatterCoalesced,
};

// What every rank's call must agree on: op, count of tensors, the first's
// dtype and shape (up to 6 dims), and a hash of every tensor's dtype and shape.
constexpr int kSigLen = 11;
constexpr int kSigDims = 6;

std::string describe(const int64_t* sig) {
  std::ostringstream o;
  if (sig[1] == 0) return "no tensor";
  o << "a " << c10::toString(static_cast<at::ScalarType>(sig[2])) << " tensor of shape [";
  for (int64_t d = 0; d < sig[3]; d++) {
    if (d) o << ", ";
    if (d < kSigDims) o << sig[4 + d]; else { o << "..."; break; }
  }
  o << "]";
  if (sig[1] > 1) o << " (first of " << sig[1] << ")";
  return o.str();
}

class ProcessGroupTpu : public c10d::Backend {
 public:
  // |check|: the agreement check before each collective (TORCHTPU_DIST_CHECK,
  // read by torchtpu/_settings.py when the group is made).
  ProcessGroupTpu(int rank, int size, c10::intrusive_ptr<c10d::Backend> gloo, bool check)
      : c10d::Backend(rank, size), gloo_(std::move(gloo)), check_(check) {}

  const std::string getBackendName() const override { return "tpu_dist"; }
  bool supportsCoalescing() const override { return false; }
  void setTimeout(std::chrono::milliseconds timeout) override { gloo_->setTimeout(timeout); }
  void setSequenceNumberForGroup() override { gloo_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return gloo_->getSequenceNumberForGroup(); }
  void abort() override { gloo_->abort(); }
  void shutdown() override { gloo_->shutdown(); }
  void setGroupUid(const std::string& uid) override {
    c10d::Backend::setGroupUid(uid);
    gloo_->setGroupUid(uid);
  }
  bool supportsTensorAlloc(c10::DeviceIndex) override { return false; }

  WorkPtr broadcast(std::vector<at::Tensor>& ts, const c10d::BroadcastOptions& o) override {
    agree(kBroadcast, ts, {});
    return run(OpType::BROADCAST, ts, [&](Staged& s) {
      auto h = map_inout(ts, s);
      return gloo_->broadcast(h, o);
    });
  }

  WorkPtr allreduce(std::vector<at::Tensor>& ts, const c10d::AllreduceOptions& o) override {
    agree(kAllreduce, ts, {});
    return run(OpType::ALLREDUCE, ts, [&](Staged& s) {
      auto h = map_inout(ts, s);
      c10d::AllreduceOptions o2 = o;
      o2.reduceOp = premul(o.reduceOp, h);
      return gloo_->allreduce(h, o2);
    });
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& ts, const c10d::AllreduceCoalescedOptions& o) override {
    agree(kAllreduceCoalesced, ts, {});
    return run(OpType::ALLREDUCE_COALESCED, ts, [&](Staged& s) {
      auto h = map_inout(ts, s);
      c10d::AllreduceCoalescedOptions o2 = o;
      o2.reduceOp = premul(o.reduceOp, h);
      return gloo_->allreduce_coalesced(h, o2);
    });
  }

  WorkPtr reduce(std::vector<at::Tensor>& ts, const c10d::ReduceOptions& o) override {
    agree(kReduce, ts, {});
    return run(OpType::REDUCE, ts, [&](Staged& s) {
      auto h = map_inout(ts, s);
      c10d::ReduceOptions o2 = o;
      o2.reduceOp = premul(o.reduceOp, h);
      return gloo_->reduce(h, o2);
    });
  }

  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                    const c10d::AllgatherOptions& o) override {
    check_lists("all_gather", outs, ins.size());
    agree(kAllgather, ins, {});
    return run(OpType::ALLGATHER, flatten(outs), [&](Staged& s) {
      auto hi = map_in(ins, s);
      auto ho = map_out_lists(outs, s);
      return gloo_->allgather(ho, hi, o);
    });
  }

  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    agree(kAllgatherBase, {in}, {out});
    return run(OpType::_ALLGATHER_BASE, {out}, [&](Staged& s) {
      at::Tensor hi = host_in(in, s);
      at::Tensor ho = host_out(out, s);
      return gloo_->_allgather_base(ho, hi, o);
    });
  }

  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                              const c10d::AllgatherOptions& o) override {
    agree(kAllgatherCoalesced, ins, {});
    return run(OpType::ALLGATHER_COALESCED, flatten(outs), [&](Staged& s) {
      auto hi = map_in(ins, s);
      auto ho = map_out_lists(outs, s);
      return gloo_->allgather_coalesced(ho, hi, o);
    });
  }

  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::AllgatherOptions& o) override {
    agree(kAllgatherIntoCoalesced, ins, outs);
    return run(OpType::COALESCED, outs, [&](Staged& s) {
      auto hi = map_in(ins, s);
      auto ho = map_out(outs, s);
      return gloo_->allgather_into_tensor_coalesced(ho, hi, o);
    });
  }

  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outs, std::vector<at::Tensor>& ins,
                 const c10d::GatherOptions& o) override {
    if (rank_ == o.rootRank) check_lists("gather", outs, ins.size());
    agree(kGather, ins, {});
    return run(OpType::GATHER, flatten(outs), [&](Staged& s) {
      auto hi = map_in(ins, s);
      auto ho = map_out_lists(outs, s);
      return gloo_->gather(ho, hi, o);
    });
  }

  WorkPtr scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                  const c10d::ScatterOptions& o) override {
    if (rank_ == o.rootRank) check_lists("scatter", ins, outs.size());
    agree(kScatter, outs, {});
    return run(OpType::SCATTER, outs, [&](Staged& s) {
      std::vector<std::vector<at::Tensor>> hi;
      for (auto& l : ins) hi.push_back(map_in(l, s));
      auto ho = map_out(outs, s);
      return gloo_->scatter(ho, hi, o);
    });
  }

  WorkPtr reduce_scatter(std::vector<at::Tensor>& outs, std::vector<std::vector<at::Tensor>>& ins,
                         const c10d::ReduceScatterOptions& o) override {
    check_lists("reduce_scatter", ins, outs.size());
    agree(kReduceScatter, outs, flatten(ins));
    return run(OpType::REDUCE_SCATTER, outs, [&](Staged& s) {
      std::vector<std::vector<at::Tensor>> hi;
      for (auto& l : ins) hi.push_back(map_in(l, s));
      auto ho = map_out(outs, s);
      c10d::ReduceScatterOptions o2 = o;
      for (auto& l : hi) o2.reduceOp = premul_copy(o.reduceOp, l, s);
      return gloo_->reduce_scatter(ho, hi, o2);
    });
  }

  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    agree(kReduceScatterBase, {out}, {in});
    return run(OpType::_REDUCE_SCATTER_BASE, {out}, [&](Staged& s) {
      std::vector<at::Tensor> hi{host_in(in, s)};
      at::Tensor ho = host_out(out, s);
      c10d::ReduceScatterOptions o2 = o;
      o2.reduceOp = premul_copy(o.reduceOp, hi, s);
      return gloo_->_reduce_scatter_base(ho, hi[0], o2);
    });
  }

  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::ReduceScatterOptions& o) override {
    agree(kReduceScatterCoalesced, outs, ins);
    return run(OpType::COALESCED, outs, [&](Staged& s) {
      auto hi = map_in(ins, s);
      auto ho = map_out(outs, s);
      c10d::ReduceScatterOptions o2 = o;
      o2.reduceOp = premul_copy(o.reduceOp, hi, s);
      return gloo_->reduce_scatter_tensor_coalesced(ho, hi, o2);
    });
  }

  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                        std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& o) override {
    // Only the dtype and the trailing dims must agree (splits differ by rank).
    std::vector<int64_t> tail(in.sizes().begin() + (in.dim() > 0 ? 1 : 0), in.sizes().end());
    agree(kAllToAllBase, {at::empty(tail, in.options().device(at::kMeta))}, {});
    return run(OpType::ALLTOALL_BASE, {out}, [&](Staged& s) {
      at::Tensor hi = host_in(in, s);
      at::Tensor ho = host_out(out, s);
      return gloo_->alltoall_base(ho, hi, out_splits, in_splits, o);
    });
  }

  WorkPtr alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                   const c10d::AllToAllOptions& o) override {
    TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == size_ && static_cast<int>(ins.size()) == size_,
                      "all_to_all: the output and input lists must have one tensor per rank (", size_,
                      "), got ", outs.size(), " and ", ins.size());
    return run(OpType::ALLTOALL, outs, [&](Staged& s) {
      auto hi = map_in(ins, s);
      auto ho = map_out(outs, s);
      return gloo_->alltoall(ho, hi, o);
    });
  }

  WorkPtr send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    return run(OpType::SEND, {}, [&](Staged& s) {
      auto h = map_in(ts, s);
      return gloo_->send(h, dst, tag);
    });
  }

  WorkPtr recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    return run(OpType::RECV, ts, [&](Staged& s) {
      auto h = map_out(ts, s);
      return gloo_->recv(h, src, tag);
    });
  }

  WorkPtr recvAnysource(std::vector<at::Tensor>& ts, int tag) override {
    return run(OpType::RECVANYSOURCE, ts, [&](Staged& s) {
      auto h = map_out(ts, s);
      return gloo_->recvAnysource(h, tag);
    });
  }

  WorkPtr barrier(const c10d::BarrierOptions& o) override {
    c10d::BarrierOptions o2 = o;
    o2.device_ids.clear();  // gloo's barrier is over its own CPU pairs
    o2.device = at::Device(at::kCPU);
    return gloo_->barrier(o2);
  }

  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) override {
    gloo_->monitoredBarrier(o, wait_all_ranks);
  }

 private:
  template <typename F>
  WorkPtr run(OpType type, std::vector<at::Tensor> outputs, F&& issue) {
    auto staged = std::make_shared<Staged>();
    WorkPtr inner;
    try {
      inner = issue(*staged);
    } catch (...) {
      staged->release();
      throw;
    }
    return c10::make_intrusive<TpuWork>(rank_, type, std::move(inner), std::move(staged), std::move(outputs));
  }

  static std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& ls) {
    std::vector<at::Tensor> r;
    for (const auto& l : ls) r.insert(r.end(), l.begin(), l.end());
    return r;
  }

  static std::vector<at::Tensor> map_inout(const std::vector<at::Tensor>& ts, Staged& s) {
    std::vector<at::Tensor> r;
    for (const auto& t : ts) r.push_back(host_inout(t, s));
    return r;
  }

  static std::vector<std::vector<at::Tensor>> map_out_lists(const std::vector<std::vector<at::Tensor>>& ls,
                                                           Staged& s) {
    std::vector<std::vector<at::Tensor>> r;
    for (const auto& l : ls) r.push_back(map_out(l, s));
    return r;
  }

  // A list per input tensor (or output) must hold one tensor per rank: a local
  // ValueError, before anything is sent.
  void check_lists(const char* op, const std::vector<std::vector<at::Tensor>>& ls, size_t n) {
    TORCH_CHECK_VALUE(ls.size() == n, op, ": expected ", n, " tensor lists, got ", ls.size());
    for (const auto& l : ls)
      TORCH_CHECK_VALUE(static_cast<int>(l.size()) == size_, op, ": the tensor list must have one tensor per rank (",
                        size_, "), got ", l.size());
  }

  static bool has_premul(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::PREMUL_SUM; }

  static at::Scalar factor_of(const c10d::ReduceOp& op) {
    // NCCLPreMulSumSupplement: PyTorch 2.11's name, kept as an alias since.
    auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(sup != nullptr, "tpu_dist: PREMUL_SUM without a factor");
    if (sup->tensor_factor.defined()) return sup->tensor_factor.to(at::kCPU).item();
    return at::Scalar(sup->double_factor);
  }

  // PREMUL_SUM on tensors this call owns (fresh buffers of in-place ops):
  // scaled in place, then summed. Gloo has no PREMUL_SUM.
  static c10d::ReduceOp premul(const c10d::ReduceOp& op, std::vector<at::Tensor>& host) {
    if (!has_premul(op)) return op;
    at::Scalar f = factor_of(op);
    for (auto& t : host) t.mul_(f);
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }

  // PREMUL_SUM on inputs the call only reads: scaled copies.
  static c10d::ReduceOp premul_copy(const c10d::ReduceOp& op, std::vector<at::Tensor>& host, Staged& s) {
    if (!has_premul(op)) return op;
    at::Scalar f = factor_of(op);
    for (auto& t : host) {
      t = t.mul(f);
      s.temps.push_back(t);
    }
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }

  static void signature(int op, const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, int64_t* sig) {
    std::fill(sig, sig + kSigLen, 0);
    sig[0] = op;
    sig[1] = static_cast<int64_t>(a.size());
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull; };
    if (!a.empty()) {
      sig[2] = static_cast<int64_t>(a[0].scalar_type());
      sig[3] = a[0].dim();
      for (int64_t d = 0; d < std::min<int64_t>(a[0].dim(), kSigDims); d++) sig[4 + d] = a[0].size(d);
    }
    for (const auto* l : {&a, &b}) {
      mix(-1);
      for (const auto& t : *l) {
        mix(static_cast<int64_t>(t.scalar_type()));
        mix(t.dim());
        for (int64_t s : t.sizes()) mix(s);
      }
    }
    sig[kSigLen - 1] = static_cast<int64_t>(h >> 1);
  }

  // Every rank's call must have the same op, dtypes and shapes: gloo aborts a
  // process whose peer sends a different size. One small all_gather of each
  // rank's signature, over the inner gloo, before the collective; every rank
  // raises the same RuntimeError on a mismatch.
  void agree(int op, const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    if (!check_ || size_ == 1) return;
    at::Tensor mine = at::empty({kSigLen}, at::kLong);
    signature(op, a, b, mine.data_ptr<int64_t>());
    at::Tensor all = at::empty({size_, kSigLen}, at::kLong);
    std::vector<std::vector<at::Tensor>> outs{{}};
    for (int r = 0; r < size_; r++) outs[0].push_back(all[r]);
    std::vector<at::Tensor> ins{mine};
    gloo_->allgather(outs, ins)->wait();
    const int64_t* p = all.data_ptr<int64_t>();
    for (int r = 1; r < size_; r++) {
      const int64_t* q = p + r * kSigLen;
      if (std::memcmp(p, q, sizeof(int64_t) * kSigLen) == 0) continue;
      std::ostringstream msg;
      if (p[0] != q[0]) {
        msg << "tpu_dist: ranks called different collectives: rank 0 " << op_name(static_cast<int>(p[0]))
            << ", rank " << r << " " << op_name(static_cast<int>(q[0]));
      } else {
        msg << "tpu_dist: " << op_name(op) << " got different tensors on different ranks: rank 0 "
            << describe(p) << ", rank " << r << " " << describe(q);
        if (std::memcmp(p, q, sizeof(int64_t) * (kSigLen - 1)) == 0) msg << " (a later tensor's dtype or shape differs)";
      }
      TORCH_CHECK(false, msg.str());
    }
  }

  c10::intrusive_ptr<c10d::Backend> gloo_;
  bool check_;
};

// DDP's timer for tpu parameters: host clock stamps (the CPU timer's), so
// that the reducer's time statistics cover tpu too.
class TpuTimer : public c10d::Timer {
 public:
  explicit TpuTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    int64_t a = getTimeRef(start), b = getTimeRef(end);
    if (a == c10d::kUnsetTime || b == c10d::kUnsetTime || b < a) return std::nullopt;
    return b - a;
  }
};

}  // namespace
}  // namespace torchtpu

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torchtpu::TpuTimer)
}  // namespace c10d

namespace torchtpu {

void init_distributed(pybind11::module& m) {
  namespace py = pybind11;
  py::module::import("torch._C._distributed_c10d");
  py::class_<ProcessGroupTpu, c10d::Backend, c10::intrusive_ptr<ProcessGroupTpu>>(m, "_ProcessGroupTpu")
      .def(py::init([](int rank, int size, c10::intrusive_ptr<c10d::Backend> gloo, bool check) {
             return c10::make_intrusive<ProcessGroupTpu>(rank, size, std::move(gloo), check);
           }),
           py::arg("rank"), py::arg("size"), py::arg("gloo"), py::arg("check"));
}

}  // namespace torchtpu
