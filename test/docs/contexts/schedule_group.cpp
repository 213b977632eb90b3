// Building a group's schedules by hand: its size `p` and the element count `count`.
#include <cstddef>
#include <cstdio>
#include <vector>
// SNIPPET_HEAD
void snippet() {
  const int p = 4;
  const std::size_t count = 1024;
// SNIPPET
}
