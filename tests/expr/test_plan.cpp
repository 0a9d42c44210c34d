// The compile-time plan: what each tree becomes.
#include <xattn/xattn.hpp>

#include <catch2/catch.hpp>

using namespace xattn;

namespace {
xt::xtensor<float, 3> x = xt::ones<float>({1, 2, 2});
auto T = ref(x);
}  // namespace

TEST_CASE("Q * trans(K) / c plans as dot with the scale folded in") {
  const auto p = make_plan(softmax(T * trans(T) / 4.0) * T);
  STATIC_REQUIRE(std::is_same_v<decltype(p.base.policy), dot>);
  STATIC_REQUIRE(path_name_v<std::decay_t<decltype(p.base)>> == "dot_identity");
  STATIC_REQUIRE(std::decay_t<decltype(p)>::has_values);
  REQUIRE(p.scale == 0.25);
  STATIC_REQUIRE(decltype(hana::length(p.ops))::value == 0);
}

TEST_CASE("scales after a modifier stay in order as modifiers; masks in order") {
  const auto p = make_plan(softmax(mask(mask(softcap(2.0 * (T * trans(T)), 5.0) * 3.0, causal()), window(1, 1))));
  REQUIRE(p.scale == 2.0);
  STATIC_REQUIRE(decltype(hana::length(p.ops))::value == 2);
  REQUIRE(hana::at_c<1>(p.ops).factor == 3.0);
  STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(hana::at_c<0>(p.masks))>, causal_mask>);
  STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(hana::at_c<1>(p.masks))>, window_mask>);
  STATIC_REQUIRE(!std::decay_t<decltype(p)>::has_values);
}

TEST_CASE("policy capabilities choose the score path") {
  STATIC_REQUIRE(path_name_v<policy_base<additive, decltype(T), decltype(T)>> == "pair_features");
  STATIC_REQUIRE(path_name_v<policy_base<gaussian, decltype(T), decltype(T)>> == "dot_features");
  STATIC_REQUIRE(path_name_v<policy_base<bilinear, decltype(T), decltype(T)>> == "dot_features");
  STATIC_REQUIRE(path_name_v<policy_base<cosine, decltype(T), decltype(T)>> == "dot_features");
  auto user = [](auto q, auto k) { return q[0] * k[0]; };  // generic: recorded
  STATIC_REQUIRE(path_name_v<policy_base<decltype(user), decltype(T), decltype(T)>> == "recorded");
  auto floats = [](std::span<const float> q, std::span<const float> k) { return q[0] * k[0]; };
  STATIC_REQUIRE(path_name_v<policy_base<decltype(floats), decltype(T), decltype(T)>> == "pair_raw");
  STATIC_REQUIRE(path_name_v<tensor_base<decltype(T)>> == "tensor");
}

TEST_CASE("a plan changed one part at a time keeps the others: its block keeps the term, values and dropout") {
  const xt::xtensor<float, 1> t = {0.5f};
  const auto p = make_plan(dropout(softmax(mask(softcap(T * trans(T), 5.0), causal()), sinks(t)), 0.25f, 9) * T);
  using P = std::decay_t<decltype(p)>;
  STATIC_REQUIRE((P::has_term && P::has_values));
  const auto b = at_positions(p, resolve(p), positions{1, 1});
  using Bl = std::decay_t<decltype(b)>;
  STATIC_REQUIRE((Bl::has_term && Bl::has_values));
  STATIC_REQUIRE(decltype(hana::length(b.ops))::value == 1 && decltype(hana::length(b.masks))::value == 1);
  REQUIRE(b.term.at(0) == 0.5);
  REQUIRE((b.drop.p == 0.25f && b.drop.i0 == 1 && b.drop.j0 == 1));
  const auto without = without_term(b);
  STATIC_REQUIRE(!std::decay_t<decltype(without)>::has_term);
  REQUIRE(without.drop.i0 == 1);
}
