// Control: reduce::cpu::combine with a real operation compiles.
#include <mimatrix/reduce/cpu.hpp>

int main() {
  int a[4]{1, 2, 3, 4}, b[4]{4, 3, 2, 1}, out[4]{};
  mimatrix::reduce::cpu::combine(mimatrix::reduce::sum<int>{}, out, a, b, 4);
  return out[0] == 5 ? 0 : 1;
}
