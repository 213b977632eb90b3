// Workers prove they hold the job's shared secret without sending it: the server sends a
// random nonce, the worker answers HMAC-SHA256(secret, nonce), and the server compares in
// constant time (OpenSSL). The secret comes from MIMATRIX_JOB_SECRET or a file.
#pragma once

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "protocol.hpp"

namespace mimatrix::job {

using nonce = std::array<std::uint8_t, nonce_bytes>;
using mac = std::array<std::uint8_t, mac_bytes>;

inline nonce random_nonce() {
  nonce n{};
  if (RAND_bytes(n.data(), int(n.size())) != 1) throw std::runtime_error("job server: RAND_bytes failed");
  return n;
}

inline mac answer(const std::string& secret, const nonce& n) {
  mac m{};
  unsigned int length = 0;
  if (!HMAC(EVP_sha256(), secret.data(), int(secret.size()), n.data(), n.size(), m.data(), &length) ||
      length != m.size())
    throw std::runtime_error("job server: HMAC-SHA256 failed");
  return m;
}

/// Whether `given` is the answer to `n` under `secret`, in time that does not depend on
/// where they differ.
inline bool verify(const std::string& secret, const nonce& n, const mac& given) {
  const mac want = answer(secret, n);
  return CRYPTO_memcmp(want.data(), given.data(), want.size()) == 0;
}

/// The secret: the file `path` (its first line) if given, else MIMATRIX_JOB_SECRET.
/// Throws when neither holds one: a job never runs open.
inline std::string load_secret(const std::string& path = {}) {
  std::string secret;
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("job server: cannot read the secret file '" + path + "'");
    std::getline(in, secret);
  } else if (const char* env = std::getenv("MIMATRIX_JOB_SECRET")) {
    secret = env;
  }
  if (secret.empty())
    throw std::runtime_error("job server: no shared secret (set MIMATRIX_JOB_SECRET; job_server also takes --secret-file)");
  return secret;
}

}  // namespace mimatrix::job
