// Pairwise covering designs: a few rows over several factors such that every pair of
// levels of any two factors meets in at least one row. The quick tier runs such rows
// instead of a grid's full cross product; the long tier keeps the product.
#pragma once

#include <array>
#include <cstddef>

namespace mimatrix::test {

/// Rows of a pairwise design over `Factors` factors of at most `MaxLevels` levels each.
/// Both ways of filling one are greedy and deterministic: `build_pairs` in constant
/// expressions too (so a design can choose which templates to instantiate), `cover_pairs`
/// among an explicit candidate set (for constraints that only a list can say).
template <std::size_t Factors, std::size_t MaxRows, std::size_t MaxLevels = 16>
struct pairwise_design {
  using row = std::array<int, Factors>;

  std::array<row, MaxRows> rows{};
  std::size_t size = 0;
  bool complete = false;  // every relevant pair covered within MaxRows rows

  constexpr const row* begin() const { return rows.data(); }
  constexpr const row* end() const { return rows.data() + size; }
};

namespace detail {

template <std::size_t Factors, std::size_t MaxLevels>
struct pair_table {
  static constexpr std::size_t pairs = Factors * (Factors - 1) / 2;
  std::array<bool, pairs * MaxLevels * MaxLevels> covered{};

  static constexpr std::size_t index(std::size_t i, int a, std::size_t j, int b) {
    std::size_t block = 0;  // pairs (i, j) with i < j, in order
    for (std::size_t k = 0; k < i; ++k) block += Factors - 1 - k;
    block += j - i - 1;
    return (block * MaxLevels + std::size_t(a)) * MaxLevels + std::size_t(b);
  }
};

}  // namespace detail

/// A pairwise design built row by row, as AETG does: each row starts from the first pair
/// not yet covered, and every other factor takes the level that covers the most new pairs
/// with the levels already chosen. `relevant(row, f)` says whether factor f's level means
/// anything in that row (an operation, for a collective that reduces nothing): pairs with
/// an irrelevant factor are neither counted nor required. Cheap enough for a constant
/// expression: about factors² × levels steps a row.
template <std::size_t Factors, std::size_t MaxRows, std::size_t MaxLevels = 16, class Relevant>
constexpr pairwise_design<Factors, MaxRows, MaxLevels> build_pairs(const std::array<int, Factors>& levels,
                                                                 Relevant relevant) {
  using row = std::array<int, Factors>;
  using table = detail::pair_table<Factors, MaxLevels>;
  for (int n : levels)
    if (n < 1 || std::size_t(n) > MaxLevels) throw "build_pairs: a factor's level count is outside 1..MaxLevels";

  pairwise_design<Factors, MaxRows, MaxLevels> design;
  table t{};
  std::size_t i = 0, j = 1;  // the seed cursor: pairs before it are covered or impossible
  int a = 0, b = 0;
  auto advance = [&] {
    if (++b < levels[j]) return;
    b = 0;
    if (++a < levels[i]) return;
    a = 0;
    if (++j < Factors) return;
    ++i;
    j = i + 1;
  };
  while (true) {
    while (i + 1 < Factors && t.covered[table::index(i, a, j, b)]) advance();
    if (i + 1 >= Factors) {
      design.complete = true;
      return design;
    }
    row r{};
    std::array<bool, Factors> fixed{};
    r[i] = a;
    r[j] = b;
    fixed[i] = fixed[j] = true;
    for (std::size_t f = 0; f < Factors; ++f) {
      if (fixed[f]) continue;
      int best = 0, best_gain = -1;
      for (int v = 0; v < levels[f]; ++v) {
        r[f] = v;
        if (!relevant(r, i) || !relevant(r, j)) continue;  // the seed pair must stay meaningful
        int gain = 0;
        for (std::size_t g = 0; g < Factors; ++g)
          if (fixed[g] && relevant(r, f) && relevant(r, g) &&
              !t.covered[g < f ? table::index(g, r[g], f, v) : table::index(f, v, g, r[g])])
            ++gain;
        if (gain > best_gain) {
          best_gain = gain;
          best = v;
        }
      }
      r[f] = best;
      fixed[f] = true;
    }
    if (!relevant(r, i) || !relevant(r, j)) {  // no row can hold this pair
      t.covered[table::index(i, a, j, b)] = true;
      continue;
    }
    if (design.size == MaxRows) return design;  // complete stays false: the caller asserts on it
    design.rows[design.size++] = r;
    for (std::size_t f = 0; f < Factors; ++f)
      for (std::size_t g = f + 1; g < Factors; ++g)
        if (relevant(r, f) && relevant(r, g)) t.covered[table::index(f, r[f], g, r[g])] = true;
  }
}

/// A pairwise design over factors with `levels[f]` levels each.
/// - `for_each_candidate(visit)` calls `visit(row)` for every row allowed (constraints
///   live here: a row the tests cannot run is never offered);
/// - `relevant(row, f)` says whether factor f's level means anything in that row (an
///   operation, for a collective that reduces nothing): pairs with an irrelevant factor
///   are neither counted as covered by the row nor required.
/// Pairs that no candidate can cover are not required either.
template <std::size_t Factors, std::size_t MaxRows, std::size_t MaxLevels = 16, class Candidates, class Relevant>
constexpr pairwise_design<Factors, MaxRows, MaxLevels> cover_pairs(const std::array<int, Factors>& levels,
                                                                 Candidates for_each_candidate, Relevant relevant) {
  using row = std::array<int, Factors>;
  using table = detail::pair_table<Factors, MaxLevels>;
  for (int n : levels)
    if (n < 1 || std::size_t(n) > MaxLevels) throw "cover_pairs: a factor's level count is outside 1..MaxLevels";

  // What a row would add: the relevant pairs it holds that are not yet covered.
  auto gain = [&](const table& t, const row& r) {
    int count = 0;
    for (std::size_t i = 0; i < Factors; ++i)
      for (std::size_t j = i + 1; j < Factors; ++j)
        if (relevant(r, i) && relevant(r, j) && !t.covered[table::index(i, r[i], j, r[j])]) ++count;
    return count;
  };
  auto mark = [&](table& t, const row& r) {
    for (std::size_t i = 0; i < Factors; ++i)
      for (std::size_t j = i + 1; j < Factors; ++j)
        if (relevant(r, i) && relevant(r, j)) t.covered[table::index(i, r[i], j, r[j])] = true;
  };

  pairwise_design<Factors, MaxRows, MaxLevels> design;
  table t{};
  while (true) {
    row best{};
    int best_gain = 0;
    for_each_candidate([&](const row& r) {
      const int g = gain(t, r);
      if (g > best_gain) {
        best_gain = g;
        best = r;
      }
    });
    if (best_gain == 0) {  // nothing left that any candidate covers
      design.complete = true;
      return design;
    }
    if (design.size == MaxRows) return design;  // complete stays false: the caller asserts on it
    design.rows[design.size++] = best;
    mark(t, best);
  }
}

/// Calls `visit(row)` for every row of the full product of `levels` (mixed radix).
template <std::size_t Factors, class Visit>
constexpr void for_each_product_row(const std::array<int, Factors>& levels, Visit visit) {
  std::array<int, Factors> r{};
  while (true) {
    visit(r);
    std::size_t f = 0;
    while (f < Factors && ++r[f] == levels[f]) r[f++] = 0;
    if (f == Factors) return;
  }
}

}  // namespace mimatrix::test
