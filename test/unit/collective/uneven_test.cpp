// The v-forms (allgatherv, reduce_scatter_v, gatherv, scatterv, alltoallv) through the
// runtime-typed entry on the in-process transport: exact results on integer data over
// world sizes 1 to 12, counts from 0 up (a quarter of the blocks empty), blocks back to
// back and apart, every root on small groups, in place, persistent; bad arguments and
// counts the ranks disagree on. The verifier proves the schedules for p = 1 to 64
// (test/unit/algorithm/uneven_exchange_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "mimatrix/uneven.hpp"
#include "support/grid.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::inproc;
using counts = std::vector<std::size_t>;
using values = std::vector<std::int32_t>;

constexpr int world_sizes[] = {1, 2, 3, 4, 5, 7, 8, 12};

/// Counts 0 to 6, about a quarter 0.
counts random_counts(std::size_t n, std::mt19937& gen) {
  std::uniform_int_distribution<std::size_t> pick(0, 8);
  counts c(n);
  for (auto& x : c) x = pick(gen) < 2 ? 0 : pick(gen) % 7;
  return c;
}

/// Displacements with a gap of `gap` elements after each block; empty for none asked.
counts spaced(const counts& c, std::size_t gap) {
  if (gap == 0) return {};
  counts d(c.size());
  std::size_t at = 0;
  for (std::size_t j = 0; j < c.size(); ++j) {
    d[j] = at;
    at += c[j] + gap;
  }
  return d;
}

std::size_t displ(const counts& c, const counts& d, std::size_t j) {
  return d.empty() ? std::accumulate(c.begin(), c.begin() + std::ptrdiff_t(j), std::size_t(0)) : d[j];
}
std::size_t extent(const counts& c, const counts& d) {
  return c.empty() ? 0 : displ(c, d, c.size() - 1) + c.back();
}

/// Element k of rank r's contribution for block j: distinct everywhere.
std::int32_t value(int r, std::size_t j, std::size_t k) { return std::int32_t(r * 100000 + j * 1000 + k + 1); }

constexpr std::int32_t untouched = -7;

TEST(uneven, allgatherv_every_size_out_of_place_and_in_place) {
  std::mt19937 gen(test::run_seed());
  for (int p : world_sizes)
    for (std::size_t gap : {std::size_t(0), std::size_t(2)}) {
      const counts c = random_counts(std::size_t(p), gen), d = spaced(c, gap);
      std::vector<values> out(p), in_place(p);
      transport::run_inproc(p, [&](int r, inproc::world& w) {
        communicator<inproc> comm(w, r);
        collectives<inproc> coll(comm);
        values in(c[std::size_t(r)]);
        for (std::size_t k = 0; k < in.size(); ++k) in[k] = value(r, 0, k);
        out[r].assign(extent(c, d), untouched);
        coll.allgatherv(in.data(), in.size(), out[r].data(), c, d, dtype::int32).wait();
        in_place[r].assign(extent(c, d), untouched);
        std::int32_t* mine = in_place[r].data() + displ(c, d, std::size_t(r));
        std::copy(in.begin(), in.end(), mine);
        coll.allgatherv(mine, in.size(), in_place[r].data(), c, d, dtype::int32).wait();
      });
      for (int r = 0; r < p; ++r)
        for (std::size_t j = 0; j < std::size_t(p); ++j)
          for (std::size_t k = 0; k < c[j]; ++k) {
            ASSERT_EQ(out[r][displ(c, d, j) + k], value(int(j), 0, k)) << "p=" << p << " rank " << r << " block " << j;
            ASSERT_EQ(in_place[r][displ(c, d, j) + k], value(int(j), 0, k)) << "in place, p=" << p;
          }
      if (gap && p > 1) {
        ASSERT_EQ(out[0][c[0]], untouched) << "allgatherv wrote between blocks";
      }
    }
}

TEST(uneven, reduce_scatter_v_sums_exactly) {
  std::mt19937 gen(test::run_seed() + 1);
  for (int p : world_sizes) {
    const counts c = random_counts(std::size_t(p), gen);
    const std::size_t total = extent(c, {});
    std::vector<values> out(p), in_place(p);
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      collectives<inproc> coll(comm);
      values in(total);
      for (std::size_t k = 0; k < total; ++k) in[k] = value(r, 0, k);
      out[r].assign(c[std::size_t(r)], untouched);
      coll.reduce_scatter_v(in.data(), out[r].data(), c, dtype::int32, reduce::op_kind::sum).wait();
      in_place[r] = in;
      coll.reduce_scatter_v(in_place[r].data(), in_place[r].data() + displ(c, {}, std::size_t(r)), c, dtype::int32,
                            reduce::op_kind::sum)
          .wait();
    });
    for (int r = 0; r < p; ++r)
      for (std::size_t k = 0; k < c[std::size_t(r)]; ++k) {
        const std::size_t at = displ(c, {}, std::size_t(r)) + k;
        std::int32_t want = 0;
        for (int j = 0; j < p; ++j) want += value(j, 0, at);
        ASSERT_EQ(out[r][k], want) << "p=" << p << " rank " << r << " element " << k;
        ASSERT_EQ(in_place[r][at], want) << "in place, p=" << p << " rank " << r;
      }
  }
}

TEST(uneven, gatherv_and_scatterv_every_root) {
  std::mt19937 gen(test::run_seed() + 2);
  for (int p : world_sizes)
    for (int root = 0; root < p; root += p > 5 ? p / 2 + 1 : 1) {
      const counts c = random_counts(std::size_t(p), gen), d = spaced(c, 1);
      values gathered(extent(c, d), untouched), source(extent(c, d));
      for (std::size_t j = 0; j < std::size_t(p); ++j)
        for (std::size_t k = 0; k < c[j]; ++k) source[displ(c, d, j) + k] = value(root, j, k);
      std::vector<values> scattered(p);
      transport::run_inproc(p, [&](int r, inproc::world& w) {
        communicator<inproc> comm(w, r);
        collectives<inproc> coll(comm);
        values in(c[std::size_t(r)]);
        for (std::size_t k = 0; k < in.size(); ++k) in[k] = value(r, 0, k);
        // Off the root the counts are not read: those ranks pass none.
        const bool at_root = r == root;
        coll.gatherv(in.data(), in.size(), at_root ? gathered.data() : nullptr, at_root ? c : counts{},
                     at_root ? d : counts{}, dtype::int32, root)
            .wait();
        scattered[r].assign(c[std::size_t(r)], untouched);
        coll.scatterv(at_root ? source.data() : nullptr, at_root ? c : counts{}, at_root ? d : counts{},
                      scattered[r].data(), scattered[r].size(), dtype::int32, root)
            .wait();
      });
      for (std::size_t j = 0; j < std::size_t(p); ++j)
        for (std::size_t k = 0; k < c[j]; ++k) {
          ASSERT_EQ(gathered[displ(c, d, j) + k], value(int(j), 0, k)) << "gatherv p=" << p << " root " << root;
          ASSERT_EQ(scattered[j][k], value(root, j, k)) << "scatterv p=" << p << " root " << root << " rank " << j;
        }
    }
}

TEST(uneven, alltoallv_with_split_sizes_and_displacements) {
  std::mt19937 gen(test::run_seed() + 3);
  for (int p : world_sizes)
    for (std::size_t gap : {std::size_t(0), std::size_t(3)}) {
      std::vector<counts> m(p);  // m[i][j]: elements rank i sends rank j
      for (auto& row : m) row = random_counts(std::size_t(p), gen);
      std::vector<values> out(p);
      std::vector<counts> recv_c(p, counts(std::size_t(p)));
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j) recv_c[j][std::size_t(i)] = m[i][std::size_t(j)];
      transport::run_inproc(p, [&](int r, inproc::world& w) {
        communicator<inproc> comm(w, r);
        collectives<inproc> coll(comm);
        const counts& sc = m[r];
        const counts sd = spaced(sc, gap), rd = spaced(recv_c[r], gap);
        values in(extent(sc, sd));
        for (std::size_t j = 0; j < std::size_t(p); ++j)
          for (std::size_t k = 0; k < sc[j]; ++k) in[displ(sc, sd, j) + k] = value(r, j, k);
        out[r].assign(extent(recv_c[r], rd), untouched);
        auto call = coll.alltoallv_init(in.data(), sc, sd, out[r].data(), recv_c[r], rd, dtype::int32);
        call();  // twice: a persistent call is started again on the same buffers
        std::fill(out[r].begin(), out[r].end(), untouched);
        call();
      });
      for (int r = 0; r < p; ++r) {
        const counts rd = spaced(recv_c[r], gap);
        for (std::size_t j = 0; j < std::size_t(p); ++j)
          for (std::size_t k = 0; k < recv_c[r][j]; ++k)
            ASSERT_EQ(out[r][displ(recv_c[r], rd, j) + k], value(int(j), std::size_t(r), k))
                << "p=" << p << " rank " << r << " from " << j;
      }
    }
}

// The typed façades: the same calls on spans, each with its element type or operation.
TEST(uneven, typed_facades_run_every_v_form) {
  const int p = 4;
  const counts c{2, 0, 3, 1}, d{6, 0, 1, 4};  // blocks out of rank order, rank 1's empty
  std::vector<values> gathered(p), all(p), reduced(p), scattered(p), exchanged(p);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    values in(c[std::size_t(r)]);
    for (std::size_t k = 0; k < in.size(); ++k) in[k] = value(r, 0, k);
    all[r].assign(8, untouched);
    mimatrix::allgatherv<inproc, std::int32_t> allgatherv(comm);
    allgatherv(in, all[r], c, d);
    gathered[r].assign(r == 2 ? 8 : 0, untouched);
    mimatrix::gatherv<inproc, std::int32_t> gatherv(comm);
    gatherv(in, gathered[r], r == 2 ? c : counts{}, r == 2 ? d : counts{}, 2);
    scattered[r].assign(c[std::size_t(r)], untouched);
    mimatrix::scatterv<inproc, std::int32_t> scatterv(comm);
    scatterv(all[r], c, d, scattered[r], 3);
    values six(6, r + 1);
    reduced[r].assign(c[std::size_t(r)], untouched);
    mimatrix::reduce_scatter_v<inproc, reduce::max<std::int32_t>> reduce_scatter_v(comm);
    reduce_scatter_v(six, reduced[r], c);
    // Rank r sends one element to each rank: its own number.
    const values mine(std::size_t(p), r);
    exchanged[r].assign(std::size_t(p), untouched);
    const counts ones(std::size_t(p), 1);
    mimatrix::alltoallv<inproc, std::int32_t> alltoallv(comm);
    auto a2a = alltoallv.prepare(mine, ones, exchanged[r], ones);
    a2a();
  });
  for (int r = 0; r < p; ++r) {
    for (std::size_t j = 0; j < std::size_t(p); ++j)
      for (std::size_t k = 0; k < c[j]; ++k) {
        ASSERT_EQ(all[r][d[j] + k], value(int(j), 0, k)) << "allgatherv rank " << r;
        if (r == 2) {
          ASSERT_EQ(gathered[r][d[j] + k], value(int(j), 0, k)) << "gatherv";
        }
      }
    for (std::size_t k = 0; k < c[std::size_t(r)]; ++k) {
      ASSERT_EQ(scattered[r][k], value(r, 0, k)) << "scatterv rank " << r;
      ASSERT_EQ(reduced[r][k], p) << "reduce_scatter_v max, rank " << r;
    }
    for (int j = 0; j < p; ++j) ASSERT_EQ(exchanged[r][std::size_t(j)], j) << "alltoallv rank " << r;
  }
}

// The engine keeps a v-form's last plan: calls whose counts change from one to the next
// each get their own, and a repeat of earlier counts is exact too.
TEST(uneven, calls_whose_counts_change_call_after_call_each_get_their_plan) {
  const int p = 3;
  const std::vector<counts> rounds{{1, 2, 3}, {3, 0, 1}, {1, 2, 3}, {2, 2, 2}};
  std::vector<std::vector<values>> got(rounds.size(), std::vector<values>(p));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    for (std::size_t k = 0; k < rounds.size(); ++k) {
      const counts& c = rounds[k];  // every rank sends c[j] elements to rank j
      const counts received(std::size_t(p), c[std::size_t(r)]);
      values in;
      for (std::size_t j = 0; j < std::size_t(p); ++j)
        for (std::size_t e = 0; e < c[j]; ++e) in.push_back(value(r, j, e + k));
      got[k][r].assign(std::size_t(p) * c[std::size_t(r)], untouched);
      coll.alltoallv(in.data(), c, {}, got[k][r].data(), received, {}, dtype::int32).wait();
    }
  });
  for (std::size_t k = 0; k < rounds.size(); ++k)
    for (int r = 0; r < p; ++r)
      for (int j = 0; j < p; ++j)
        for (std::size_t e = 0; e < rounds[k][std::size_t(r)]; ++e)
          ASSERT_EQ(got[k][r][std::size_t(j) * rounds[k][std::size_t(r)] + e], value(j, std::size_t(r), e + k))
              << "round " << k << " rank " << r << " from " << j;
}

/// Runs `call` on 3 ranks and returns each rank's error text ("" where none).
template <class Call>
std::vector<std::string> errors_of(Call call) {
  std::vector<std::string> what(3);
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    try {
      call(coll, r);
    } catch (const error& e) {
      what[r] = e.what();
    }
  });
  return what;
}

void expect_all_fail(const std::vector<std::string>& what, const std::string& on_the_bad_rank, int bad) {
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(what[r].empty()) << "rank " << r << " succeeded";
  }
  EXPECT_NE(what[bad].find(on_the_bad_rank), std::string::npos) << what[bad];
  EXPECT_NE(what[bad].find("rank " + std::to_string(bad)), std::string::npos) << what[bad];
}

TEST(uneven, bad_arguments_are_named_and_fail_every_rank) {
  values buf(64), out(64);
  expect_all_fail(errors_of([&](auto& coll, int r) {  // two counts for three ranks
                    const counts c = r == 1 ? counts{2, 2} : counts{2, 2, 2};
                    coll.allgatherv(buf.data(), 2, out.data(), c, {}, dtype::int32).wait();
                  }),
                  "counts holds 2 counts for a group of 3", 1);
  expect_all_fail(errors_of([&](auto& coll, int r) {  // blocks that overlap in the output
                    const counts d = r == 2 ? counts{0, 1, 4} : counts{};
                    coll.allgatherv(buf.data(), 2, out.data(), counts{2, 2, 2}, d, dtype::int32).wait();
                  }),
                  "overlaps block 0", 2);
  expect_all_fail(errors_of([&](auto& coll, int r) {  // in_count unlike counts[rank]
                    coll.allgatherv(buf.data(), r == 0 ? 3 : 2, out.data(), counts{2, 2, 2}, {}, dtype::int32).wait();
                  }),
                  "counts[0] is 2 but in_count is 3", 0);
  expect_all_fail(errors_of([&](auto& coll, int r) {
                    coll.gatherv(buf.data(), 1, out.data(), counts{1, 1, 1}, {}, dtype::int32, r == 1 ? 5 : 0).wait();
                  }),
                  "root 5 is outside a group of 3", 1);
  expect_all_fail(errors_of([&](auto& coll, int r) {
                    const counts sc{1, 1, 1}, rc = r == 2 ? counts{1, 1, 2} : counts{1, 1, 1};
                    coll.alltoallv(buf.data(), sc, {}, out.data(), rc, {}, dtype::int32).wait();
                  }),
                  "recv_counts[2] is 2 but send_counts[2] is 1", 2);
  expect_all_fail(errors_of([&](auto& coll, int r) {
                    call_options o;
                    if (r == 0) o.algorithm = "ring";
                    coll.alltoallv(buf.data(), counts{1, 1, 1}, {}, out.data(), counts{1, 1, 1}, {}, dtype::int32, o)
                        .wait();
                  }),
                  "alltoallv runs 'pairwise' only", 0);
}

TEST(uneven, a_persistent_v_form_with_bad_arguments_throws_and_starts_nothing) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    values buf(8), out(8);
    EXPECT_THROW((void)coll.allgatherv_init(buf.data(), 1, out.data(), counts{1}, {}, dtype::int32), error);
    coll.allgatherv(buf.data(), 1, out.data(), counts{1, 1}, {}, dtype::int32).wait();  // the next call pairs up
  });
}

// Counts the ranks disagree on end in `mismatch` on every rank, none silently: where a
// message shows it in the call, and at the next call on the ranks that only sent.
TEST(uneven, counts_the_ranks_disagree_on_fail_every_rank_with_mismatch) {
  const auto run = [](auto disagree) {
    std::vector<std::string> what(3);
    transport::run_inproc(3, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      collectives<inproc> coll(comm);
      values buf(64, 1), out(64);
      const auto told = [&](auto call) {  // every rank makes both calls
        try {
          call();
        } catch (const error& e) {
          EXPECT_EQ(e.code(), make_error_code(errc::mismatch)) << "rank " << r << ": " << e.what();
          if (what[r].empty()) what[r] = e.what();
        }
      };
      told([&] { disagree(coll, r, buf, out); });
      told([&] { coll.allgatherv(buf.data(), 1, out.data(), counts{1, 1, 1}, {}, dtype::int32).wait(); });
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_FALSE(what[r].empty()) << "rank " << r << " passed a disagreement silently";
    }
    return what;
  };
  // allgatherv: every message carries the counts' digest.
  auto what = run([](auto& coll, int r, values& buf, values& out) {
    const counts c = r == 1 ? counts{1, 3, 1} : counts{1, 2, 1};
    coll.allgatherv(buf.data(), c[std::size_t(r)], out.data(), c, {}, dtype::int32).wait();
  });
  EXPECT_NE(what[0].find("counts digest"), std::string::npos) << what[0];
  // gatherv: rank 2 sends 3 where the root expects 2.
  what = run([](auto& coll, int r, values& buf, values& out) {
    coll.gatherv(buf.data(), r == 2 ? 3 : 2, out.data(), counts{2, 2, 2}, {}, dtype::int32, 0).wait();
  });
  EXPECT_NE(what[0].find("bytes"), std::string::npos) << what[0];
  // alltoallv: rank 0 sends rank 1 two elements, rank 1 expects one.
  what = run([](auto& coll, int r, values& buf, values& out) {
    const counts sc = r == 0 ? counts{1, 2, 1} : counts{1, 1, 1};
    coll.alltoallv(buf.data(), sc, {}, out.data(), counts{1, 1, 1}, {}, dtype::int32).wait();
  });
  EXPECT_NE(what[1].find("bytes"), std::string::npos) << what[1];
}

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix
