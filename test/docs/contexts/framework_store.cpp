// A framework's store adapted as mimatrix's (the class `c10d_store` of docs/bootstrap.md).
// PyTorch is not here: `c10d::Store` is a stand-in with the signatures of the four methods
// the adapter calls, as torch/csrc/distributed/c10d/Store.hpp declares them. What this
// checks is the mimatrix side: the overrides match bootstrap::store and none is missing.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mimatrix/bootstrap/store.hpp>

namespace c10d {
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  virtual int64_t add(const std::string& key, int64_t value) = 0;
  virtual void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) = 0;
};
}  // namespace c10d
// SNIPPET_HEAD
// SNIPPET

[[maybe_unused]] inline std::unique_ptr<mimatrix::bootstrap::store> adapt(c10d::Store& s) {
  return std::make_unique<c10d_store>(s);  // not abstract: every pure method is overridden
}
