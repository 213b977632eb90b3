// A process before any transport: the snippet's own includes, and this rank's endpoint
// address (`my_address`) to swap through the store.
#include <cstddef>
#include <vector>
// SNIPPET_HEAD
void snippet() {
  const std::vector<std::byte> my_address(16);
// SNIPPET
}
