// The send/recv emulation of one-sided steps: lowered GDRAA groups are proved by the
// verifier and compute the right sums over the in-process transport.
#include "mimatrix/schedule/lower.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using schedule::step_kind;

std::vector<schedule::schedule> gdraa_group(const schedule::descriptor& d) {
  std::vector<schedule::schedule> g;
  for (int r = 0; r < d.size; ++r) g.push_back(algorithm::gdraa{}.build({}, d, r));
  return g;
}

TEST(lower_one_sided, lowered_gdraa_has_messages_only_and_is_proved) {
  for (int p = 1; p <= 16; ++p)
    for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather, collective::broadcast})
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(p), std::size_t(2 * p + 3)}) {
        const schedule::descriptor d{kind, p, n, 4, p / 2};
        const auto lowered = schedule::lower_one_sided(gdraa_group(d));
        for (const auto& s : lowered)
          for (const auto& st : s.steps) {
            ASSERT_FALSE(schedule::is_one_sided(st.kind)) << schedule::to_text(s);
            if (st.kind == step_kind::wait) {
              ASSERT_EQ(st.count, 0u);
            }
          }
        for (bool in_place : {false, true}) {
          const auto result = schedule::verify(lowered, {in_place});
          ASSERT_TRUE(result) << schedule::to_string(d) << (in_place ? " in place: " : ": ") << result.message;
        }
      }
}

TEST(lower_one_sided, overlapping_landings_are_refused) {
  const schedule::descriptor d{collective::allgather, 3, 1, 4, 0};
  std::vector<schedule::schedule> g;
  for (int r = 0; r < 3; ++r) {
    schedule::builder b(d, r, "clash");
    if (r != 0) b.write(0, 0, {schedule::buffer::input, 0, 4}, {schedule::buffer::output, 4, 4});
    else b.wait(0, 2);
    g.push_back(std::move(b).build());
  }
  try {
    (void)schedule::lower_one_sided(g);
    FAIL() << "accepted";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: two writes land on overlapping bytes"), std::string::npos) << e.what();
  }
}

// The emulation runs: lowered GDRAA allreduce over inproc, in place and out of place.
TEST(lower_one_sided, lowered_gdraa_allreduce_runs_on_inproc) {
  using transport::inproc;
  for (int p : {1, 2, 3, 5, 8})
    for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(1000)}) {
      const schedule::descriptor d{collective::allreduce, p, n, sizeof(std::int32_t), 0};
      const auto lowered = schedule::lower_one_sided(gdraa_group(d));
      transport::run_inproc(p, [&](int r, inproc::world& w) {
        inproc endpoint(w, r);
        const auto plan = std::make_shared<const schedule::schedule>(lowered[std::size_t(r)]);
        std::vector<std::int32_t> in(n), out(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int32_t>(r * 1000 + int(i));
        for (int call = 0; call < 2; ++call) {
          std::int32_t* const dst = call == 0 ? out.data() : in.data();  // call 1 in place
          const signature sig{collective::allreduce, reduce::op_kind::sum, dtype::int32, n, 0, std::uint64_t(call)};
          auto op = endpoint.start(plan, reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(dst),
                                   sig, reduce::host_kernels_of<reduce::sum<std::int32_t>>, std::chrono::seconds(10));
          std::error_code ec;
          op->wait(ec);
          ASSERT_FALSE(ec) << op->message();
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_EQ(dst[i], static_cast<std::int32_t>(1000 * p * (p - 1) / 2 + p * int(i)))
                << "p " << p << " n " << n << " rank " << r << " call " << call << " element " << i;
        }
      });
    }
}

}  // namespace
}  // namespace mimatrix
