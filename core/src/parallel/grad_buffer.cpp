#include "ft/parallel/grad_buffer.h"

#include <c10/core/GradMode.h>
#include <algorithm>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "compat.h"
#include "ft/base/error.h"
#include "inplace_scale.h"
#include "ft/observe/trace.h"

namespace ft {

// ---------------------------------------------------------------- comm hooks

CommHook allreduce_avg_hook(Comm& comm) {
  Comm* c = &comm;
  return [c](GradBucket& bucket) { return BucketComm{c->all_reduce_async(bucket.data, ReduceOp::Avg), {}}; };
}

CommHook reduce_scatter_avg_hook(Comm& comm) {
  Comm* c = &comm;
  return [c](GradBucket& bucket) { return BucketComm{c->reduce_scatter_inplace_async(bucket.data, ReduceOp::Avg), {}}; };
}

CommHook hybrid_reduce_hook(Comm& shard, Comm& replicate) {
  Comm* s = &shard;
  Comm* r = &replicate;
  return [s, r](GradBucket& bucket) {
    at::Tensor mine = bucket.data.chunk(s->world_size())[static_cast<size_t>(s->rank())];
    // Blocking in after_wait: the cross-group step needs the in-group result.
    return BucketComm{s->reduce_scatter_inplace_async(bucket.data, ReduceOp::Avg),
                      [r, mine]() mutable { r->all_reduce(mine, ReduceOp::Avg); }};
  };
}

CommHook compressed_allreduce_hook(Comm& comm, at::ScalarType wire) {
  if (wire != at::kHalf && wire != at::kBFloat16) {
    fail("gradient compression: wire dtype must be fp16 or bf16, got {}", c10::toString(wire));
  }
  Comm* c = &comm;
  // One wire copy per bucket, made at its first launch and kept: a bucket's
  // size never changes after the first step (a rebuild happens before it).
  auto wires = std::make_shared<std::vector<at::Tensor>>();
  return [c, wire, wires](GradBucket& bucket) {
    auto& w = *wires;
    if (w.size() <= static_cast<size_t>(bucket.index)) w.resize(static_cast<size_t>(bucket.index) + 1);
    at::Tensor& low = w[static_cast<size_t>(bucket.index)];
    if (!low.defined() || low.numel() != bucket.data.numel()) low = at::empty_like(bucket.data, bucket.data.options().dtype(wire));
    // Pre-divide in fp32 (in place: the bucket is overwritten by the result
    // anyway) so the 16-bit sum cannot overflow where fp32's would not.
    scale_inplace(bucket.data, c->world_size(), ScaleOp::kDiv);
    low.copy_(bucket.data);
    Work work = c->all_reduce_async(low, ReduceOp::Sum);
    at::Tensor target = bucket.data;
    return BucketComm{std::move(work), [low, target]() mutable { target.copy_(low); }};
  };
}

// ---------------------------------------------------------------- hooks

// Post-hook of a parameter's AccumulateGrad node: runs after the incoming
// gradient was added to `.grad` (i.e. into the buffer).
class GradBuffer::Hook final : public torch::autograd::FunctionPostHook {
 public:
  Hook(GradBuffer* owner, int param) : owner_(owner), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_grad_ready(param_);
    return outputs;
  }

 private:
  GradBuffer* owner_;  // outlives the hook: ~GradBuffer removes it
  int param_;
};

// ---------------------------------------------------------------- setup

GradBuffer::GradBuffer(const std::vector<at::Tensor>& params, GradBufferOptions options, CommHook hook)
    : options_(options), hook_(std::move(hook)), params_(params) {
  if (params_.empty()) fail("GradBuffer: no parameters require grad");
  if (options_.bucket_bytes <= 0) fail("GradBuffer: bucket size must be > 0 bytes, got {}", options_.bucket_bytes);
  if (options_.align_elements < 1) fail("GradBuffer: align_elements must be >= 1, got {}", options_.align_elements);
  if (!hook_) fail("GradBuffer: no comm hook given");
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined() || !params_[i].requires_grad() || !params_[i].is_leaf()) {
      fail("GradBuffer: parameter {} is not a leaf tensor that requires grad", i);
    }
  }
  std::vector<int> order;
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) order.push_back(i);
  layout(order);
  attach_views();
  rebuilt_ = options_.rebuild_with == nullptr;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<Hook>(this, static_cast<int>(i))));
    accumulators_.push_back(compat::shared_node(std::move(acc)));
  }
  reset_bucket_state();
  param_ready_.assign(params_.size(), false);
}

void GradBuffer::reset_bucket_state() {
  const size_t n = buckets_.size();
  pending_.assign(n, 0);
  comms_.clear();
  comms_.resize(n);
  launched_at_.assign(n, Clock::time_point{});
  done_at_.assign(n, Clock::time_point{});
  seen_done_.assign(n, false);
  next_launch_ = 0;
}

GradBuffer::~GradBuffer() {
  if (watcher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_watching_ = true;
    }
    watch_cv_.notify_all();
    watcher_.join();
  }
  // In-flight comms keep their tensors alive themselves; only our hooks must
  // go, since they point at this object.
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradBuffer::layout(const std::vector<int>& order) {
  const std::vector<at::Tensor>& params = params_;
  struct Group {
    at::ScalarType dtype;
    c10::Device device;
    int64_t cursor = 0;  // elements used so far in this group's buffer
    int open = -1;       // bucket still taking params, or -1
  };
  std::vector<Group> groups;
  buckets_.clear();
  buffers_.clear();
  slots_.assign(params.size(), ParamSlot{});
  auto close = [&](Group& g) {
    if (g.open < 0) return;
    BucketInfo& b = buckets_[static_cast<size_t>(g.open)];
    const int64_t a = options_.align_elements;
    b.padded_numel = std::max<int64_t>(a, (b.numel + a - 1) / a * a);
    g.cursor = b.offset + b.padded_numel;
    g.open = -1;
  };
  for (int i : order) {
    const at::Tensor& p = params[static_cast<size_t>(i)];
    int gi = 0;
    while (gi < static_cast<int>(groups.size()) &&
           (groups[gi].dtype != p.scalar_type() || groups[gi].device != p.device()))
      ++gi;
    if (gi == static_cast<int>(groups.size())) groups.push_back(Group{p.scalar_type(), p.device()});
    Group& g = groups[static_cast<size_t>(gi)];
    const int64_t elem = static_cast<int64_t>(p.element_size());
    const bool sparse = std::find(options_.row_sparse.begin(), options_.row_sparse.end(), i) != options_.row_sparse.end();
    if (g.open >= 0) {
      const BucketInfo& b = buckets_[static_cast<size_t>(g.open)];
      const bool first = g.open == 0 && options_.first_bucket_bytes > 0;
      const int64_t cap = first ? std::min(options_.first_bucket_bytes, options_.bucket_bytes) : options_.bucket_bytes;
      if (b.numel > 0 && (sparse || (b.numel + p.numel()) * elem > cap)) close(g);
    }
    if (g.open < 0) {
      BucketInfo b;
      b.buffer = gi;
      b.offset = g.cursor;
      buckets_.push_back(b);
      g.open = static_cast<int>(buckets_.size()) - 1;
    }
    BucketInfo& b = buckets_[static_cast<size_t>(g.open)];
    slots_[static_cast<size_t>(i)] = ParamSlot{g.open, gi, b.offset + b.numel, p.numel()};
    b.numel += p.numel();
    b.params.push_back(i);
    if (sparse) {
      if (p.dim() != 2) fail("GradBuffer: row-sparse parameter {} is not 2-D", i);
      b.row_width = p.size(1);
      close(g);  // alone in its bucket
    }
  }
  for (auto& g : groups) {
    close(g);
    buffers_.push_back(at::zeros({g.cursor}, at::TensorOptions().dtype(g.dtype).device(g.device)));
  }
}

void GradBuffer::attach_views() {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const ParamSlot& s = slots_[i];
    at::Tensor view = buffers_[static_cast<size_t>(s.buffer)].narrow(0, s.offset, s.numel).view(p.sizes());
    const at::Tensor& old = p.grad();
    if (old.defined() && !old.is_same(view)) view.copy_(old);
    p.mutable_grad() = view;
  }
}

// ---------------------------------------------------------------- per step

void GradBuffer::start_backward(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == State::kSyncing && next_launch_ > 0) {
    fail("GradBuffer: a new backward started while the previous synchronised backward's buckets "
         "were never waited on; call finish_sync() (the optimizer step) in between");
  }
  if (!rebuilt_ && state_ == State::kSynced && !ready_order_.empty()) rebuild();
  // Someone may have replaced a `.grad` (e.g. set it to None); put the view back.
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSlot& s = slots_[i];
    if (s.numel == 0) continue;
    const at::Tensor& g = params_[i].grad();
    const auto& buf = buffers_[static_cast<size_t>(s.buffer)];
    const char* want = static_cast<const char*>(buf.data_ptr()) + s.offset * static_cast<int64_t>(buf.element_size());
    if (!g.defined() || g.data_ptr() != want) {
      attach_views();
      break;
    }
  }
  callback_queued_ = false;
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].params.size());
  if (!sync) {
    state_ = State::kNoSync;
    return;
  }
  state_ = State::kSyncing;
  tracing_ = options_.trace && options_.trace->active();
  if (tracing_ && !watcher_.joinable()) watcher_ = std::thread([this] { watch_completions(); });
  std::fill(param_ready_.begin(), param_ready_.end(), false);
  std::fill(seen_done_.begin(), seen_done_.end(), false);
  next_launch_ = 0;
}

void GradBuffer::on_grad_ready(int param) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int b = slots_[static_cast<size_t>(param)].bucket;
  if (state_ == State::kNoSync) return;
  if (state_ != State::kSyncing) return;
  if (param_ready_[static_cast<size_t>(param)] || b < next_launch_) {
    fail("GradBuffer: parameter {} got a gradient after its bucket {} was launched (a second backward "
         "before finish_sync()?)",
         param, b);
  }
  param_ready_[static_cast<size_t>(param)] = true;
  if (!rebuilt_) ready_order_.push_back(param);
  if (!callback_queued_) {
    // Runs once this backward has accumulated every gradient, before
    // backward() returns: launches buckets holding unused parameters.
    torch::autograd::Engine::get_default_engine().queue_callback([this] { on_backward_end(); });
    callback_queued_ = true;
  }
  if (--pending_[static_cast<size_t>(b)] == 0) launch_ready_in_order();
  observe_completions();
}

void GradBuffer::on_backward_end() {
  std::lock_guard<std::mutex> lock(mutex_);
  callback_queued_ = false;
  if (state_ != State::kSyncing) return;
  while (next_launch_ < num_buckets()) launch(next_launch_);
  observe_completions();
}

void GradBuffer::rebuild() {
  rebuilt_ = true;
  std::vector<int64_t> order(ready_order_.begin(), ready_order_.end());
  std::vector<bool> seen(params_.size(), false);
  for (int i : ready_order_) seen[static_cast<size_t>(i)] = true;
  // Params with no grad in that backward keep reverse model order, last.
  for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i)
    if (!seen[static_cast<size_t>(i)]) order.push_back(i);
  if (options_.rebuild_with->world_size() > 1) {
    at::Tensor t = at::tensor(order, at::kLong);
    options_.rebuild_with->broadcast(t, 0);
    order.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  }
  std::vector<int> layout_order(order.begin(), order.end());
  // attach_views() copies each current .grad (a view of the old buffers) into the new place.
  layout(layout_order);
  attach_views();
  reset_bucket_state();
  ready_order_.clear();
}

void GradBuffer::launch_ready_in_order() {
  // Strict index order: every rank issues the same collectives in the same
  // order even if its hooks fired in a different order.
  while (next_launch_ < num_buckets() && pending_[static_cast<size_t>(next_launch_)] == 0) launch(next_launch_);
}

void GradBuffer::launch(int b) {
  const BucketInfo& info = buckets_[static_cast<size_t>(b)];
  GradBucket bucket{b, buffers_[static_cast<size_t>(info.buffer)].narrow(0, info.offset, info.padded_numel),
                    info.row_width};
  launched_at_[static_cast<size_t>(b)] = Clock::now();
  seen_done_[static_cast<size_t>(b)] = false;
  ++next_launch_;
  comms_[static_cast<size_t>(b)] = hook_(bucket);
  if (watcher_.joinable()) watch_cv_.notify_one();
}

void GradBuffer::observe_completions() {
  const auto now = Clock::now();
  for (int b = 0; b < next_launch_; ++b) {
    const auto i = static_cast<size_t>(b);
    if (!seen_done_[i] && comms_[i].work.completed()) note_done(b, now);
  }
}

void GradBuffer::note_done(int b, Clock::time_point when) {
  seen_done_[static_cast<size_t>(b)] = true;
  done_at_[static_cast<size_t>(b)] = when;
}

// Polls in-flight buckets of a traced sync, so a bucket's end in the trace
// is when it finished, not when the next hook or finish_sync() happened to
// look. Holds mutex_ only while polling; finish_sync() holds it while
// blocked, and records completions itself meanwhile. Never touches the
// Tracer: finish_sync() reports to it from the caller's thread, so the
// Tracer's owner need not outlive this buffer.
void GradBuffer::watch_completions() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_watching_) {
    bool in_flight = false;
    if (state_ == State::kSyncing && tracing_) {
      for (int b = 0; b < next_launch_ && !in_flight; ++b) in_flight = !seen_done_[static_cast<size_t>(b)];
    }
    if (!in_flight) {
      watch_cv_.wait(lock);
      continue;
    }
    observe_completions();
    watch_cv_.wait_for(lock, std::chrono::microseconds(100));
  }
}

void GradBuffer::finish_sync() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == State::kSynced) return;
  if (state_ != State::kSyncing) {
    // Backward ran without start_backward(true) (or not at all): reduce
    // whatever was accumulated, with no overlap.
    std::fill(seen_done_.begin(), seen_done_.end(), false);
    next_launch_ = 0;
    state_ = State::kSyncing;
    tracing_ = options_.trace && options_.trace->active();
  }
  while (next_launch_ < num_buckets()) launch(next_launch_);
  observe_completions();
  const auto wait_start = Clock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    BucketComm& c = comms_[b];
    c.work.wait();
    if (c.after_wait) c.after_wait();
    if (!seen_done_[b]) note_done(static_cast<int>(b), Clock::now());
  }
  const auto wait_end = Clock::now();
  record_sync_stats(wait_start, wait_end);
  if (tracing_) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const BucketInfo& info = buckets_[b];
      const auto bytes = info.padded_numel * static_cast<int64_t>(buffers_[static_cast<size_t>(info.buffer)].element_size());
      options_.trace->complete(options_.trace_name, "comm", TraceTrack::Comm, launched_at_[b], done_at_[b],
                               static_cast<int64_t>(b), bytes);
    }
    tracing_ = false;
  }
  for (auto& c : comms_) c = BucketComm{};
  next_launch_ = 0;
  state_ = State::kSynced;
}

void GradBuffer::record_sync_stats(Clock::time_point wait_start, Clock::time_point wait_end) {
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
  for (size_t b = 0; b < buckets_.size(); ++b) spans.emplace_back(launched_at_[b], done_at_[b]);
  std::sort(spans.begin(), spans.end());
  double in_flight = 0.0;
  auto cur_start = spans.front().first, cur_end = spans.front().second;
  for (const auto& [start, end] : spans) {
    if (start > cur_end) {
      in_flight += std::chrono::duration<double>(cur_end - cur_start).count();
      cur_start = start;
      cur_end = end;
    } else {
      cur_end = std::max(cur_end, end);
    }
  }
  in_flight += std::chrono::duration<double>(cur_end - cur_start).count();
  overlap_.syncs += 1;
  overlap_.in_flight_s += in_flight;
  overlap_.waited_s += std::chrono::duration<double>(wait_end - wait_start).count();
}

void GradBuffer::zero() {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::NoGradGuard no_grad;
  for (auto& b : buffers_) b.zero_();
  for (auto& c : comms_) c = BucketComm{};
  next_launch_ = 0;
  state_ = State::kIdle;
}

}  // namespace ft
