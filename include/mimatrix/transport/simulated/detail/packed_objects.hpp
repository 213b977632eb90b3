// Objects built in place one after another, for the simulation's thousands of ranks.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace mimatrix::transport::simulated::detail {

/// Up to a fixed number of T, each starting a cache line, in one block of memory in the
/// order they were made: a pass over them in order streams through memory, which the
/// hardware prefetches, where objects allocated one by one lie scattered among other
/// allocations. T need not move. Destroyed last made first.
template <class T>
class packed_objects {
 public:
  static constexpr std::size_t stride = (sizeof(T) + 63) / 64 * 64;

  packed_objects() = default;
  packed_objects(const packed_objects&) = delete;
  packed_objects& operator=(const packed_objects&) = delete;
  ~packed_objects() { clear(); }

  /// Destroys every object and makes room for `capacity`.
  void reset(std::size_t capacity) {
    clear();
    memory_.reset();
    if (capacity) memory_.reset(static_cast<std::byte*>(::operator new(capacity * stride, std::align_val_t{64})));
  }
  void clear() {
    while (size_ > 0) (*this)[--size_].~T();
  }

  /// Builds the next object (no more than the capacity given to reset()).
  template <class... Args>
  T& emplace_back(Args&&... args) {
    T* made = ::new (memory_.get() + size_ * stride) T(std::forward<Args>(args)...);
    ++size_;
    return *made;
  }

  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return *std::launder(reinterpret_cast<T*>(memory_.get() + i * stride)); }
  const T& operator[](std::size_t i) const {
    return *std::launder(reinterpret_cast<const T*>(memory_.get() + i * stride));
  }
  /// Where object i's memory starts (it need not be built yet): for prefetching.
  const std::byte* address(std::size_t i) const { return memory_.get() + i * stride; }

 private:
  struct aligned_delete {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], aligned_delete> memory_;
  std::size_t size_ = 0;
};

}  // namespace mimatrix::transport::simulated::detail
