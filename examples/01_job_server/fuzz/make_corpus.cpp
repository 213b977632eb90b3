// Writes the fuzz target's seed corpus (fuzz/corpus/): one encoded frame per message kind
// and a few malformed frames. Run once when the protocol changes:
//   job_protocol_make_corpus examples/01_job_server/fuzz/corpus
#include "protocol.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace job = mimatrix::job;

namespace {

using frame = std::vector<std::byte>;

// Fixed, not random: the corpus in the repository must not change on every run.
template <std::size_t N> std::array<std::uint8_t, N> pattern(std::uint8_t seed) {
  std::array<std::uint8_t, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = std::uint8_t(seed + 37 * i);
  return a;
}

std::vector<std::pair<std::string, job::message>> messages() {
  job::hello h;
  h.mac = pattern<job::mac_bytes>(0x5a);
  h.info.host = "node7";
  h.info.key = "node7:4242";
  h.info.accelerators = 8, h.info.nics = 4, h.info.throughput = 1234.5, h.info.generation = 6;

  job::assignment a;
  a.generation = 7, a.rank = 1, a.size = 4;
  a.hosts = {"node3", "node3", "node7", "node7"};
  a.shard_begin = 250000, a.shard_end = 500000, a.local_batch = 64, a.resume_step = 1200;
  a.switches = {0, 0, 1, 1};

  job::store_set set{1, "g7/addr/1", {}};
  for (int i = 0; i < 56; ++i) set.value.push_back(std::byte(i * 11));  // a fabric address

  job::store_reply reply{4, job::store_reply::outcome::ok, {std::byte{0x0a}, std::byte{0x00}, std::byte{0x00}, std::byte{0x07}}, 3, ""};
  job::store_reply late{5, job::store_reply::outcome::timeout, {}, 0, "g7/addr/3 not set within 5000 ms"};

  return {
      {"challenge", job::challenge{pattern<job::nonce_bytes>(0x13)}},
      {"hello", h},
      {"welcome", job::welcome{77}},
      {"reject", job::reject{"failed authentication"}},
      {"assignment", a},
      {"revoke", job::revoke{7, "rank 2 (node7) missed 3 heartbeats"}},
      {"heartbeat", job::heartbeat{7, 1200, 812.5, 96.25, 21.75, 0.6931, 1180.0}},
      {"failure", job::failure{7, "peer lost: rank 3 during allreduce seq 4811"}},
      {"store_set", set},
      {"store_get", job::store_get{2, "g7/addr/2", 5000}},
      {"store_add", job::store_add{3, "g7/arrived", 1}},
      {"store_reply", reply},
      {"store_reply_timeout", late},
      {"status_request", job::status_request{}},
      {"status_reply", job::status_reply{"generation 7: 4 ranks on 2 hosts, step 1200\n"
                                         "  rank 0 node3 8 accelerators 1180 samples/s\n"
                                         "  rank 1 node3 8 accelerators 1175 samples/s\n"
                                         "  rank 2 node7 8 accelerators 1234 samples/s\n"
                                         "  rank 3 node7 8 accelerators 1201 samples/s\n"}},
      {"leave", job::leave{7}},
  };
}

void write(const std::filesystem::path& dir, const std::string& name, const frame& f) {
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(f.data()), std::streamsize(f.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus directory>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);

  frame hello, assignment;
  std::vector<bool> seeded(std::variant_size_v<job::message>);
  for (const auto& [name, m] : messages()) {
    seeded[m.index()] = true;
    const frame f = job::encode(m);
    write(dir, name, f);
    if (name == "hello") hello = f;
    if (name == "assignment") assignment = f;
  }
  for (std::size_t i = 0; i < seeded.size(); ++i)
    if (!seeded[i]) {  // a kind added to `message` without a seed here
      std::fprintf(stderr, "make_corpus: no seed for message kind %zu\n", i + 1);
      return 1;
    }

  // Malformed frames, each a different check in the decoder.
  write(dir, "bad_truncated_header", frame(hello.begin(), hello.begin() + 5));
  write(dir, "bad_truncated_payload", frame(hello.begin(), hello.end() - 3));
  frame f = hello;
  f[6] = std::byte{2};  // version 2
  write(dir, "bad_version", f);
  f = hello;
  f[4] = std::byte{0}, f[5] = std::byte{0x40};  // kind 0x4000
  write(dir, "bad_kind", f);
  f = hello;
  const std::uint32_t huge = 0xfffffff0u;
  std::memcpy(f.data(), &huge, 4);
  write(dir, "bad_huge_length", f);
  f = assignment;
  const std::uint32_t many_hosts = 0x00ffffffu;  // the host count, after generation, rank and size
  std::memcpy(f.data() + job::header_bytes + 16, &many_hosts, 4);
  write(dir, "bad_host_count", f);
  f = hello;
  f.push_back(std::byte{0});  // a byte after the message, counted in the length
  const auto longer = std::uint32_t(f.size() - job::header_bytes);
  std::memcpy(f.data(), &longer, 4);
  write(dir, "bad_trailing_byte", f);
  return 0;
}
