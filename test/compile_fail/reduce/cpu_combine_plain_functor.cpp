// Must not compile: a plain functor is not a reduce::operation (it declares no kind,
// identity, accumulator or finalize), so reduce::cpu::combine rejects it.
#include <mimatrix/reduce/cpu.hpp>

struct plus {
  using value_type = int;
  int operator()(int a, int b) const { return a + b; }
};

int main() {
  int a[4]{1, 2, 3, 4}, b[4]{4, 3, 2, 1}, out[4]{};
  mimatrix::reduce::cpu::combine(plus{}, out, a, b, 4);
}
