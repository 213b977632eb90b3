// Reduction operations: what is computed, separate from where it runs (cpu.hpp, cuda.cuh).
// Each declares its identity, whether it commutes, and a finalize applied once per
// element after the whole reduction (avg divides by the number of ranks there).
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/dtype.hpp"

namespace mimatrix::reduce {

enum class op_kind : std::uint8_t { sum, prod, min, max, avg };

constexpr std::string_view to_string(op_kind k) {
  switch (k) {
    case op_kind::sum: return "sum";
    case op_kind::prod: return "prod";
    case op_kind::min: return "min";
    case op_kind::max: return "max";
    case op_kind::avg: return "avg";
  }
  return "?";
}

/// An element-wise reduction over `value_type`, computed in `accumulator`.
template <class Op>
concept operation = element<typename Op::value_type> &&
    std::same_as<typename Op::accumulator, accumulator_t<typename Op::value_type>> &&
    requires(const Op& op, typename Op::accumulator a, int ranks) {
      { Op::kind } -> std::convertible_to<op_kind>;
      { Op::commutative } -> std::convertible_to<bool>;
      { Op::identity() } -> std::same_as<typename Op::accumulator>;
      { op(a, a) } -> std::same_as<typename Op::accumulator>;
      { op.finalize(a, ranks) } -> std::same_as<typename Op::accumulator>;
    };

namespace detail {
// Signed integer overflow wraps (two's complement), as in NCCL and MPI, instead of being
// undefined: compute in the unsigned type of the same width.
template <class A> MIMATRIX_HOST_DEVICE constexpr A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A> MIMATRIX_HOST_DEVICE constexpr A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
template <class A> MIMATRIX_HOST_DEVICE constexpr A highest() {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return std::is_signed_v<A> ? A(U(~U(0)) >> 1) : A(U(~U(0)));
  } else {
    return static_cast<A>(__builtin_huge_val());
  }
}
template <class A> MIMATRIX_HOST_DEVICE constexpr A lowest() {
  if constexpr (std::is_integral_v<A>) return std::is_signed_v<A> ? A(-highest<A>() - 1) : A(0);
  else return -highest<A>();
}

/// The parts every operation shares; Derived supplies kind, identity and operator().
template <element T> struct basic_operation {
  using value_type = T;
  using accumulator = accumulator_t<T>;
  static constexpr bool commutative = true;
  MIMATRIX_HOST_DEVICE constexpr accumulator finalize(accumulator a, int) const { return a; }
};
}  // namespace detail

template <element T> struct sum : detail::basic_operation<T> {
  using typename detail::basic_operation<T>::accumulator;
  static constexpr op_kind kind = op_kind::sum;
  MIMATRIX_HOST_DEVICE static constexpr accumulator identity() { return accumulator(0); }
  MIMATRIX_HOST_DEVICE constexpr accumulator operator()(accumulator a, accumulator b) const {
    return detail::wrap_add(a, b);
  }
};

template <element T> struct prod : detail::basic_operation<T> {
  using typename detail::basic_operation<T>::accumulator;
  static constexpr op_kind kind = op_kind::prod;
  MIMATRIX_HOST_DEVICE static constexpr accumulator identity() { return accumulator(1); }
  MIMATRIX_HOST_DEVICE constexpr accumulator operator()(accumulator a, accumulator b) const {
    return detail::wrap_mul(a, b);
  }
};

template <element T> struct min : detail::basic_operation<T> {
  using typename detail::basic_operation<T>::accumulator;
  static constexpr op_kind kind = op_kind::min;
  MIMATRIX_HOST_DEVICE static constexpr accumulator identity() { return detail::highest<accumulator>(); }
  MIMATRIX_HOST_DEVICE constexpr accumulator operator()(accumulator a, accumulator b) const {
    return b < a ? b : a;
  }
};

template <element T> struct max : detail::basic_operation<T> {
  using typename detail::basic_operation<T>::accumulator;
  static constexpr op_kind kind = op_kind::max;
  MIMATRIX_HOST_DEVICE static constexpr accumulator identity() { return detail::lowest<accumulator>(); }
  MIMATRIX_HOST_DEVICE constexpr accumulator operator()(accumulator a, accumulator b) const {
    return a < b ? b : a;
  }
};

/// Sum, then divided by the number of ranks once per element at the end
/// (integers divide with truncation toward zero).
template <element T> struct avg : sum<T> {
  using typename sum<T>::accumulator;
  static constexpr op_kind kind = op_kind::avg;
  MIMATRIX_HOST_DEVICE constexpr accumulator finalize(accumulator a, int ranks) const {
    if constexpr (std::is_integral_v<accumulator>) {
      // Divide in the promoted type: an int8 cannot hold 200 ranks (and 256 would be 0).
      using promoted = decltype(a / ranks);
      return static_cast<accumulator>(static_cast<promoted>(a) / static_cast<promoted>(ranks));
    } else {
      return a / static_cast<accumulator>(ranks);
    }
  }
};

}  // namespace mimatrix::reduce
