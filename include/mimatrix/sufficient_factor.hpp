// Poseidon's sufficient-factor broadcasting (SFB): a fully-connected layer's weight gradient
// travels as its two thin factors (allgather) and is rebuilt on every rank (one GEMM).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix {

/// One step of a fully-connected layer y = W x, W of M×N, on a local batch of K samples.
/// Its weight gradient is dW = Σ_k δ_k a_kᵀ = U Vᵀ with U = [δ_1..δ_K] (M×K) and
/// V = [a_1..a_K] (N×K): the two "sufficient factors".
struct fully_connected_shape {
  std::size_t outputs = 0;  ///< M: rows of W; each δ_k has M entries
  std::size_t inputs = 0;   ///< N: columns of W; each a_k has N entries
  std::size_t batch = 0;    ///< K: this rank's samples; the same on every rank
};

namespace detail {

inline constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

/// a·b, or size_max when it does not fit.
constexpr std::size_t saturating_multiply(std::size_t a, std::size_t b) noexcept {
  return a != 0 && b > size_max / a ? size_max : a * b;
}

}  // namespace detail

/// Poseidon's rule (Zhang et al., USENIX ATC'17): sufficient factors pay when
///
///     P·K·(M+N) ≤ 2·M·N
///
/// for P ranks, K samples a rank, and an M×N layer. Both sides are per-rank traffic over a
/// ring, divided by (P−1)·4 bytes: allgathering the factors sends and receives
/// (P−1)·K·(M+N) floats a rank, a ring allreduce of dW 2·(P−1)/P·M·N. It counts bytes
/// only: the reconstruction's 2·M·N·P·K flops are not in it (see docs/sufficient_factors.md).
/// With P = 1 nothing moves either way and the formula alone answers. `ranks` < 1 never pays.
/// Exact while both sides fit in 64 bits; past that (no real layer) they compare as long double.
constexpr bool sufficient_factors_pay(int ranks, std::size_t k, std::size_t m, std::size_t n) noexcept {
  if (ranks < 1) return false;
  const std::size_t sum = m > detail::size_max - n ? detail::size_max : m + n;
  const std::size_t factors = detail::saturating_multiply(
      detail::saturating_multiply(static_cast<std::size_t>(ranks), k), sum);
  const std::size_t gradient = detail::saturating_multiply(2, detail::saturating_multiply(m, n));
  if (factors != detail::size_max && gradient != detail::size_max) return factors <= gradient;
  using wide = long double;
  return wide(ranks) * wide(k) * (wide(m) + wide(n)) <= 2 * wide(m) * wide(n);
}

constexpr bool sufficient_factors_pay(int ranks, const fully_connected_shape& shape) noexcept {
  return sufficient_factors_pay(ranks, shape.batch, shape.outputs, shape.inputs);
}

/// What the rebuilt gradient is divided by.
enum class factor_average : std::uint8_t {
  none,          ///< dW = Σ_p U_p V_pᵀ, the sum an allreduce(sum) of the local dW gives
  ranks,         ///< dW / P
  global_batch,  ///< dW / B, B = sufficient_factor_options::global_batch (a fixed global batch)
};

struct sufficient_factor_options {
  factor_average average = factor_average::none;
  /// B for factor_average::global_batch; must then be positive.
  std::size_t global_batch = 0;
  /// For the allgathers (algorithm, deadline). Host memory only: `stream` must be unset.
  call_options call{};
};

namespace detail {

// The reconstruction GEMM dW = U Vᵀ, blocked. A micro-tile is 4 rows × `Width` columns of dW,
// accumulated in a local array over up to `gemm_depth` factor columns: each V element loaded
// feeds four rows, and the V panel (256 × 64 floats = 64 KiB) stays in L2 while every row of U
// runs over it. Widths are compile-time (64, then 16 at a layer's last columns, then 1): g++
// -O2's "very cheap" vectorizer only takes loops whose trip count is a known multiple of the
// vector width (see reduce/cpu.hpp).
inline constexpr std::size_t gemm_rows = 4;
inline constexpr std::size_t gemm_columns = 64;
inline constexpr std::size_t gemm_narrow_columns = 16;
inline constexpr std::size_t gemm_depth = 256;

/// The blocked product's operands: u m×depth and v n×depth column-major (column c of u starts
/// at u + c·m), dw m×n row-major, and what the result is divided by (1: nothing).
struct outer_product_operands {
  std::size_t m, n;
  const float* u;
  const float* v;
  float divisor;
  float* dw;
};

/// Rows [i0, i0 + rows) × columns [j0, j0 + Width) of dw, over factor columns [c0, c1): written
/// on the first pass (`first`), added to on later ones, divided on the last (`last`).
template <std::size_t Width>
inline void outer_product_tile(const outer_product_operands& o, std::size_t rows, std::size_t i0, std::size_t j0,
                               std::size_t c0, std::size_t c1, bool first, bool last) {
  float acc[gemm_rows][Width] = {};
  if (rows == gemm_rows) {
    for (std::size_t c = c0; c < c1; ++c) {
      const float* uc = o.u + c * o.m + i0;
      const float* vc = o.v + c * o.n + j0;
      const float a0 = uc[0], a1 = uc[1], a2 = uc[2], a3 = uc[3];
      for (std::size_t j = 0; j < Width; ++j) {
        const float x = vc[j];
        acc[0][j] += a0 * x;
        acc[1][j] += a1 * x;
        acc[2][j] += a2 * x;
        acc[3][j] += a3 * x;
      }
    }
  } else {  // the layer's last rows
    for (std::size_t c = c0; c < c1; ++c)
      for (std::size_t r = 0; r < rows; ++r) {
        const float a = o.u[c * o.m + i0 + r];
        const float* vc = o.v + c * o.n + j0;
        for (std::size_t j = 0; j < Width; ++j) acc[r][j] += a * vc[j];
      }
  }
  const float divisor = o.divisor;  // a local: stores to dw cannot change it, so the loop vectorizes
  for (std::size_t r = 0; r < rows; ++r) {
    float* d = o.dw + (i0 + r) * o.n + j0;
    if (first)
      for (std::size_t j = 0; j < Width; ++j) d[j] = acc[r][j];
    else
      for (std::size_t j = 0; j < Width; ++j) d[j] += acc[r][j];
    if (last && divisor != 1.0f)
      for (std::size_t j = 0; j < Width; ++j) d[j] /= divisor;
  }
}

/// dw (m×n, row-major) = (Σ_{c<depth} u[:,c] v[:,c]ᵀ) / divisor, with u m×depth and v n×depth
/// column-major. Accumulates in float; divisor 1 divides nothing.
inline void outer_product_sum(std::size_t m, std::size_t n, std::size_t depth, const float* u, const float* v,
                              float divisor, float* dw) {
  if (depth == 0) {
    std::fill(dw, dw + m * n, 0.0f);
    return;
  }
  const outer_product_operands o{m, n, u, v, divisor, dw};
  for (std::size_t j0 = 0; j0 < n; j0 += gemm_columns) {
    const std::size_t width = std::min(gemm_columns, n - j0);
    for (std::size_t c0 = 0; c0 < depth; c0 += gemm_depth) {
      const std::size_t c1 = std::min(depth, c0 + gemm_depth);
      const bool first = c0 == 0, last = c1 == depth;
      for (std::size_t i0 = 0; i0 < m; i0 += gemm_rows) {
        const std::size_t rows = std::min(gemm_rows, m - i0);
        if (width == gemm_columns) {
          outer_product_tile<gemm_columns>(o, rows, i0, j0, c0, c1, first, last);
          continue;
        }
        std::size_t j = 0;
        for (; j + gemm_narrow_columns <= width; j += gemm_narrow_columns)
          outer_product_tile<gemm_narrow_columns>(o, rows, i0, j0 + j, c0, c1, first, last);
        for (; j < width; ++j) outer_product_tile<1>(o, rows, i0, j0 + j, c0, c1, first, last);
      }
    }
  }
}

/// One exchange's workspace: every rank's shape and factors, gathered.
struct sufficient_factor_state {
  int rank = 0;
  int ranks = 1;
  fully_connected_shape shape;
  sufficient_factor_options options;
  std::int64_t mine[3] = {};          // M, N, K, the block this rank sends
  std::vector<std::int64_t> shapes;   // 3·P: every rank's M, N, K
  std::vector<float> u;               // M × P·K column-major: rank p's U is columns p·K ..
  std::vector<float> v;               // N × P·K column-major
  bool in_flight = false;

  error_context where() const {
    error_context c;
    c.rank = rank;
    c.operation = "sufficient factors";
    return c;
  }
  [[noreturn]] void fail(errc e, const std::string& what) const { throw_error(e, where(), what); }
};

inline std::string describe_shape(std::int64_t m, std::int64_t n, std::int64_t k) {
  return "M=" + std::to_string(m) + ", N=" + std::to_string(n) + ", K=" + std::to_string(k);
}

}  // namespace detail

template <transport::backend Transport, topology::layout Topology>
class sufficient_factor_broadcast;

/// An exchange in flight: sufficient_factor_broadcast::start's handle. finish() waits for the
/// allgathers and rebuilds dW; a handle dropped unfinished waits for them (as request does).
///
/// @par Thread Safety
/// Used by one thread at a time, the thread that uses its communicator.
class [[nodiscard]] sufficient_factor_request {
 public:
  sufficient_factor_request() = default;
  sufficient_factor_request(sufficient_factor_request&& other) noexcept { *this = std::move(other); }
  sufficient_factor_request& operator=(sufficient_factor_request&& other) noexcept {
    if (this != &other) {
      settle();
      state_ = std::exchange(other.state_, nullptr);
      shapes_ = std::move(other.shapes_);
      u_ = std::move(other.u_);
      v_ = std::move(other.v_);
      failure_ = std::move(other.failure_);
    }
    return *this;
  }
  ~sufficient_factor_request() { settle(); }

  /// True until finish() has run (or the handle was moved from).
  bool valid() const { return state_ != nullptr; }

  /// Progresses the allgathers without blocking; true when all three are complete (finish()
  /// then only checks and rebuilds). Throws the first failure, as finish() will again.
  [[nodiscard]] bool test() {
    if (!state_) return true;
    bool done = true;
    for (request* r : {&shapes_, &u_, &v_}) {
      try {
        done = r->test() && done;
      } catch (const error& e) {
        if (!failure_) failure_ = e;
      }
    }
    if (failure_) throw *failure_;
    return done;
  }

  /// Waits for the allgathers and writes dW (M×N, row-major: dw[i·N + j]) =
  /// Σ_p Σ_k U_p[:,k] V_p[:,k]ᵀ, divided as the options say. Ranks that disagree on M, N or K
  /// fail with `invalid_argument` on every rank, naming both; a failed allgather throws its
  /// error. `dw` is untouched on failure. Afterwards the handle is empty.
  void finish(float* dw) {
    if (!state_) throw error(errc::invalid_argument, "sufficient factors: finish() on an empty request");
    detail::sufficient_factor_state& s = *state_;
    if (dw == nullptr && s.shape.outputs * s.shape.inputs != 0) s.fail(errc::invalid_argument, "dw is null");
    const bool shapes_arrived = wait_quietly(shapes_);  // then every rank checks the same table
    wait_quietly(u_);
    wait_quietly(v_);
    settle();
    if (shapes_arrived) check_shapes(s);
    if (failure_) throw *failure_;
    const std::size_t p = static_cast<std::size_t>(s.ranks);
    float divisor = 1.0f;
    if (s.options.average == factor_average::ranks) divisor = static_cast<float>(p);
    if (s.options.average == factor_average::global_batch) divisor = static_cast<float>(s.options.global_batch);
    detail::outer_product_sum(s.shape.outputs, s.shape.inputs, p * s.shape.batch, s.u.data(), s.v.data(), divisor,
                              dw);
  }
  void finish(float* dw, std::error_code& ec) {
    ec.clear();
    try {
      finish(dw);
    } catch (const error& e) {
      ec = e.code();
    }
  }

 private:
  template <transport::backend, topology::layout>
  friend class sufficient_factor_broadcast;

  sufficient_factor_request(detail::sufficient_factor_state& state, request shapes, request u, request v)
      : state_(&state), shapes_(std::move(shapes)), u_(std::move(u)), v_(std::move(v)) {}

  /// Waits for `r`; false when it failed (the first failure is kept).
  bool wait_quietly(request& r) {
    try {
      r.wait();
      return true;
    } catch (const error& e) {
      if (!failure_) failure_ = e;
      return false;
    }
  }

  /// Disagreeing shapes are the cause; the mismatched allgathers they led to only a symptom.
  static void check_shapes(const detail::sufficient_factor_state& s) {
    for (int p = 0; p < s.ranks; ++p) {
      const std::int64_t* other = s.shapes.data() + 3 * p;
      if (other[0] != s.mine[0] || other[1] != s.mine[1] || other[2] != s.mine[2])
        s.fail(errc::invalid_argument,
               "rank " + std::to_string(p) + " has " + detail::describe_shape(other[0], other[1], other[2]) +
                   " but rank " + std::to_string(s.rank) + " has " +
                   detail::describe_shape(s.mine[0], s.mine[1], s.mine[2]) +
                   "; every rank must pass the same layer and the same batch K");
    }
  }

  /// Lets the requests finish (their destructors wait) and frees the workspace for start().
  void settle() noexcept {
    if (!state_) return;
    shapes_ = request();
    u_ = request();
    v_ = request();
    state_->in_flight = false;
    state_ = nullptr;
  }

  detail::sufficient_factor_state* state_ = nullptr;
  request shapes_, u_, v_;
  std::optional<error> failure_;
};

/// Sufficient-factor broadcasting for one fully-connected layer: allgathers every rank's U
/// (M×K) and V (N×K), float32 column-major (column k is δ_k, resp. a_k: the same memory as a
/// framework's row-major K×M output gradient and K×N layer input), and rebuilds
/// dW = Σ_p U_p V_pᵀ (M×N row-major, as the weight gradient) on every rank. Call it where the
/// layer's gradient allreduce would be, when sufficient_factors_pay() says so.
///
/// Every rank passes the same M, N and K (a disagreement fails on every rank with
/// `invalid_argument`; see finish()). Each start() also allgathers the three sizes, so that
/// the failure names the shapes instead of only counts. Holds the gathered factors,
/// P·K·(M+N) floats, allocated once.
///
/// @code
///   mimatrix::sufficient_factor_broadcast fc(coll, {.outputs = 10, .inputs = 64, .batch = 32});
///   auto pending = fc.start(delta.data(), activations.data());  // after the layer's backward
///   // ... backward of the layers below ...
///   pending.finish(weight_grad.data());
/// @endcode
///
/// @par Thread Safety
/// Like its collectives: one thread at a time, the same call order on every rank. One
/// exchange in flight at a time; it, `u` and `v` must outlive its request.
template <transport::backend Transport, topology::layout Topology = topology::ring>
class sufficient_factor_broadcast {
 public:
  sufficient_factor_broadcast(collectives<Transport, Topology>& coll, fully_connected_shape shape,
                              sufficient_factor_options options = {})
      : coll_(coll), state_(std::make_unique<detail::sufficient_factor_state>()) {
    detail::sufficient_factor_state& s = *state_;
    s.rank = coll.comm().rank();
    s.ranks = coll.comm().size();
    s.shape = shape;
    s.options = std::move(options);
    const std::string sizes = detail::describe_shape(std::int64_t(shape.outputs), std::int64_t(shape.inputs),
                                                     std::int64_t(shape.batch));
    if (s.options.call.stream)
      s.fail(errc::invalid_argument, "host memory only: the reconstruction runs on the CPU; unset call.stream");
    if (s.options.average == factor_average::global_batch && s.options.global_batch == 0)
      s.fail(errc::invalid_argument, "factor_average::global_batch with global_batch = 0");
    const std::size_t p = static_cast<std::size_t>(s.ranks);
    constexpr std::size_t most = std::size_t(std::numeric_limits<std::int64_t>::max()) / sizeof(float);
    const std::size_t columns = detail::saturating_multiply(p, shape.batch);  // P·K, both factors'
    if (detail::saturating_multiply(columns, std::max(shape.outputs, shape.inputs)) > most ||
        detail::saturating_multiply(shape.outputs, shape.inputs) > most)
      s.fail(errc::invalid_argument, sizes + " at " + std::to_string(p) + " ranks is too large to hold");
    s.mine[0] = std::int64_t(shape.outputs);
    s.mine[1] = std::int64_t(shape.inputs);
    s.mine[2] = std::int64_t(shape.batch);
    s.shapes.resize(3 * p);
    s.u.resize(p * shape.batch * shape.outputs);
    s.v.resize(p * shape.batch * shape.inputs);
  }

  /// Issues the allgathers (the three sizes, U, then V) and returns at once.
  [[nodiscard]] sufficient_factor_request start(const float* u, const float* v) {
    detail::sufficient_factor_state& s = *state_;
    if (s.in_flight) s.fail(errc::invalid_argument, "start() while the previous exchange is in flight");
    const std::size_t u_count = s.shape.outputs * s.shape.batch, v_count = s.shape.inputs * s.shape.batch;
    if (u == nullptr && u_count != 0) s.fail(errc::invalid_argument, "u is null");
    if (v == nullptr && v_count != 0) s.fail(errc::invalid_argument, "v is null");
    const call_options& o = s.options.call;
    request shapes = coll_.allgather(s.mine, s.shapes.data(), 3, dtype::int64, o);
    request gathered_u = coll_.allgather(u, s.u.data(), u_count, dtype::float32, o);
    request gathered_v = coll_.allgather(v, s.v.data(), v_count, dtype::float32, o);
    s.in_flight = true;
    return sufficient_factor_request(s, std::move(shapes), std::move(gathered_u), std::move(gathered_v));
  }

  /// Blocking: start(u, v).finish(dw).
  void operator()(const float* u, const float* v, float* dw) { start(u, v).finish(dw); }

  const fully_connected_shape& shape() const { return state_->shape; }
  /// sufficient_factors_pay() for this layer at this communicator's size.
  bool pays() const { return sufficient_factors_pay(state_->ranks, state_->shape); }

 private:
  collectives<Transport, Topology>& coll_;
  std::unique_ptr<detail::sufficient_factor_state> state_;  // a stable address for requests
};

}  // namespace mimatrix
