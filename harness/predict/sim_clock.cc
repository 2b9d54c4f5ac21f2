// The simulated rank's clock (see header): kernels beside the collectives in flight, and the
// collectives re-timed where the compute blocks on them.
#include "harness/predict/sim_clock.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sb {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// Of r's time alone, what it has done by t (done_s where t is before ref_s).
double progress(const CommRecord& r, double t) {
  t = std::max(t, r.ref_s);
  const double alone_end = std::max(r.ref_s, r.alone_until_s);
  const double alone = std::clamp(t, r.ref_s, alone_end) - r.ref_s;
  const double beside = std::max(0.0, t - alone_end);
  const double rate = r.beside_s > 0 ? r.alone_s / r.beside_s : 1.0;
  return std::min(r.alone_s, r.done_s + alone + beside * rate);
}

// When r ends: what is left of its time alone, at rate 1 until alone_until_s, then slowed to
// its time beside compute.
double finish(const CommRecord& r) {
  const double left = r.alone_s - r.done_s, alone = std::max(0.0, r.alone_until_s - r.ref_s);
  if (left <= alone || r.alone_s <= 0) return r.ref_s + std::max(0.0, left);
  return r.ref_s + alone + (left - alone) * r.beside_s / r.alone_s;
}

}  // namespace

double SimClock::serial_kernel_end(double from_s, double work_s) {
  std::erase_if(comm_windows, [&](const CommWindow& w) { return w.end_s <= from_s; });
  double t = from_s;
  while (work_s > 0) {
    double share = 0, next = std::numeric_limits<double>::infinity();
    for (const CommWindow& w : comm_windows) {
      if (w.start_s <= t && t < w.end_s) {
        share += w.cpu_share;
        next = std::min(next, w.end_s);
      } else if (w.start_s > t) {
        next = std::min(next, w.start_s);
      }
    }
    const double rate = 1.0 - std::min(1.0, share);
    if (rate > 0 && t + work_s / rate <= next) return t + work_s / rate;
    work_s -= (next - t) * rate;  // next is finite here: no window ahead means rate 1
    t = next;
  }
  return t;
}

double SimClock::issue(int stream, double ready_s, double alone_s, double beside_s,
                       double cpu_share, double& start_s, double input_key) {
  CommRecord r;
  r.ready_s = ready_s;
  if (input_key > 0) {
    r.input_stream = 1 - stream;
    r.input_key = input_key;
  }
  r.alone_s = alone_s;
  r.beside_s = std::max(alone_s, beside_s);
  r.cpu_share = r.beside_s > 0 ? cpu_share * alone_s / r.beside_s : 1.0;
  r.start_s = r.ref_s = r.alone_until_s = std::max(ready_of(r), free_of(stream));
  r.end_s = finish(r);
  // A handle finds its collective by this key; after a re-time an end can come out equal to an
  // earlier collective's key, so keys only grow.
  double& last = last_key_[size_t(stream)];
  r.key_s = last = std::max(r.end_s, std::nextafter(last, kNever));
  start_s = r.start_s;
  queues[size_t(stream)].push_back(r);
  settle();
  return r.key_s;
}

double SimClock::ready_of(const CommRecord& r) const {
  return r.input_stream < 0 ? r.ready_s
                            : std::max(r.ready_s, end_of(r.input_stream, r.input_key));
}

void SimClock::rerun(int s, size_t from, size_t to, double t, double alone_until,
                     double& cursor) {
  std::vector<CommRecord>& q = queues[size_t(s)];
  for (size_t i = from; i < to; ++i) {
    CommRecord& r = q[i];
    if (r.end_s <= t) continue;
    if (r.start_s < t) {  // in flight: keep what it has done
      r.done_s = progress(r, t);
      r.ref_s = t;
    } else {  // queued: starts when the one before it ends
      r.start_s = r.ref_s = std::max(cursor, ready_of(r));
      r.done_s = 0;
    }
    r.alone_until_s = std::max(r.ref_s, alone_until);
    r.end_s = finish(r);
    cursor = r.end_s;
  }
}

double SimClock::block_on(int stream, double key_s) {
  std::vector<CommRecord>& own = queues[size_t(stream)];
  const auto it = std::find_if(own.begin(), own.end(),
                               [&](const CommRecord& r) { return r.key_s == key_s; });
  if (it == own.end()) return compute_s;
  if (it->end_s <= compute_s) return it->end_s;  // done: no wait
  const size_t at = size_t(it - own.begin());
  const double computed = busy_s - busy_at_block_s;
  const double t = compute_s + (sync_after_s > 0 ? sync_s * std::min(1.0, computed / sync_after_s)
                                                 : std::min(sync_s, computed));
  busy_at_block_s = busy_s;
  // It ends, beside the compute it was timed with, before the last rank reaches it: the wait
  // ends with it, nothing is re-timed.
  if (own[at].end_s <= t) return own[at].end_s;
  double cursor = t;
  rerun(stream, 0, at + 1, t, kNever, cursor);  // the compute waits: nothing runs beside them
  const double end = own[at].end_s;
  rerun(stream, at + 1, own.size(), t, end, cursor);
  double other = t;
  rerun(1 - stream, 0, queues[size_t(1 - stream)].size(), t, end, other);
  settle();
  return end;
}

double SimClock::last_key(int stream) const {
  const std::vector<CommRecord>& q = queues[size_t(stream)];
  return q.empty() ? compute_s : q.back().key_s;
}

double SimClock::end_of(int stream, double key_s) const {
  for (const CommRecord& r : queues[size_t(stream)])
    if (r.key_s == key_s) return r.end_s;
  return 0;
}

double SimClock::comm_busy_s() const {
  double busy = ended_busy_s_;
  for (const std::vector<CommRecord>& q : queues)
    for (const CommRecord& r : q) busy += r.end_s - r.start_s;
  return busy;
}

void SimClock::settle() {
  comm_windows.clear();
  for (int s = 0; s < 2; ++s) {
    std::vector<CommRecord>& q = queues[size_t(s)];
    if (!q.empty()) free_of(s) = q.back().end_s;
    std::erase_if(q, [&](const CommRecord& r) {
      if (r.end_s > compute_s) return false;
      ended_busy_s_ += r.end_s - r.start_s;
      return true;
    });
    for (const CommRecord& r : q)
      if (r.end_s > r.start_s) comm_windows.push_back({r.start_s, r.end_s, r.cpu_share});
  }
}

}  // namespace sb
