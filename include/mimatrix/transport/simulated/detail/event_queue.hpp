// The simulation's events by time: a heap of runs of equal time, not of single events.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace mimatrix::transport::simulated::detail {

/// Events in order of time, ties in the order they were pushed. Thousands of ranks in step
/// schedule thousands of events at one time: they go into one run (a push is an append),
/// and the heap holds runs, so it stays small. A push joins the newest run if it has the
/// same time, else opens a run; runs of one time are taken in the order they opened, and
/// each covers a span of pushes, so that is push order.
template <class Event>
class event_queue {
 public:
  bool empty() const { return heap_.empty(); }
  double next_time() const { return empty() ? std::numeric_limits<double>::infinity() : heap_.front().time; }

  void push(double time, const Event& e) {
    if (open_ == none || runs_[open_].time != time) {
      open_ = take_run();
      runs_[open_].time = time;
      heap_.push_back({time, seq_++, open_});
      std::push_heap(heap_.begin(), heap_.end(), later{});
    }
    runs_[open_].events.push_back(e);
  }

  /// Moves the earliest run into `out` (cleared first); pushes from then on open new runs.
  void pop_run(std::vector<Event>& out) {
    std::pop_heap(heap_.begin(), heap_.end(), later{});
    const std::uint32_t r = heap_.back().run;
    heap_.pop_back();
    if (open_ == r) open_ = none;
    out.clear();
    out.swap(runs_[r].events);  // the run keeps `out`'s old room for its next use
    free_.push_back(r);
  }

  void clear() {
    heap_.clear();
    free_.clear();
    for (std::uint32_t r = 0; r < runs_.size(); ++r) {
      runs_[r].events.clear();
      free_.push_back(r);
    }
    open_ = none;
  }

 private:
  static constexpr std::uint32_t none = 0xFFFFFFFFu;
  struct run {
    double time = 0;
    std::vector<Event> events;
  };
  struct entry {
    double time;
    std::uint64_t seq;
    std::uint32_t run;
  };
  struct later {  // std::*_heap keep the greatest first: "later" puts the earliest first
    bool operator()(const entry& a, const entry& b) const { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  };

  std::uint32_t take_run() {
    if (free_.empty()) {
      runs_.emplace_back();
      return static_cast<std::uint32_t>(runs_.size() - 1);
    }
    const std::uint32_t r = free_.back();
    free_.pop_back();
    return r;
  }

  std::vector<run> runs_;
  std::vector<std::uint32_t> free_;
  std::vector<entry> heap_;
  std::uint32_t open_ = none;
  std::uint64_t seq_ = 0;
};

}  // namespace mimatrix::transport::simulated::detail
