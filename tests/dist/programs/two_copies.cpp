// SPDX-License-Identifier: Apache-2.0
// Two copies of wisp in one translation unit: <wisp/wisp.hpp> (the single header, or include/)
// and a vendored amalgamation generated with `tools/amalgamate.py --namespace acme`, which lives
// in namespace acme with ACME_* macros. Both must compile together, stay distinct and agree.
#include <wisp/wisp.hpp>

#include <acme/wisp.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

static_assert(!std::is_same_v<wisp::copy_op, acme::copy_op>, "two distinct copies");
static_assert(!std::is_base_of_v<wisp::error, acme::error>);
static_assert(WISP_VERSION == ACME_VERSION, "same version");
static_assert(WISP_HAS_POSIX_VMM == ACME_HAS_POSIX_VMM);

int main() {
  int failures = 0;
  auto expect = [&failures](bool ok, const char* what) {
    if (!ok) {
      std::printf("MISMATCH: %s\n", what);
      ++failures;
    }
  };

  // The same computation in both namespaces.
  wisp::synthetic_config wcfg;
  acme::synthetic_config acfg;
  wcfg.layers = acfg.layers = 3;
  wcfg.experts = acfg.experts = 12;
  wcfg.top_k = acfg.top_k = 2;
  const auto wtrace = wisp::make_synthetic_trace(wcfg, 200, 7);
  const auto atrace = acme::make_synthetic_trace(acfg, 200, 7);
  const wisp::miss_curve wcurve{wisp::profile_trace(wtrace, wisp::cache_scope::global).histogram};
  const acme::miss_curve acurve{acme::profile_trace(atrace, acme::cache_scope::global).histogram};
  for (std::uint64_t c = 0; c <= 36; ++c) {
    expect(wcurve.misses(c) == acurve.misses(c), "both copies compute the same miss curve");
  }

  wisp::pager<wisp::lru> wpager({.layers = 1, .experts = 8, .top_k = 2, .capacity = 4});
  acme::pager<acme::lru> apager({.layers = 1, .experts = 8, .top_k = 2, .capacity = 4});
  const std::vector<std::int32_t> batch{5, 1, 1, 7};
  const auto wr = wpager.prepare(0, batch, 2, 2);
  const auto ar = apager.prepare(0, batch, 2, 2);
  expect(wr.misses == 3 && ar.misses == 3, "both pagers miss 3 experts");
  for (std::size_t i = 0; i < wr.copy_plan.size(); ++i) {
    expect(wr.copy_plan[i].expert == ar.copy_plan[i].expert &&
               wr.copy_plan[i].slot == ar.copy_plan[i].slot,
           "same copy plan");
  }

  // Each copy's macros throw that copy's exception type.
  try {
    WISP_EXPECTS(batch.size() == 3, "wisp copy: size ", batch.size());
    expect(false, "WISP_EXPECTS throws");
  } catch (const acme::error&) {
    expect(false, "WISP_EXPECTS must not throw acme::error");
  } catch (const wisp::logic_error& e) {
    expect(std::strstr(e.what(), "wisp copy: size 4") != nullptr, "wisp message");
  }
  try {
    ACME_EXPECTS(batch.size() == 3, "acme copy: size ", batch.size());
    expect(false, "ACME_EXPECTS throws");
  } catch (const wisp::error&) {
    expect(false, "ACME_EXPECTS must not throw wisp::error");
  } catch (const acme::logic_error& e) {
    expect(std::strstr(e.what(), "acme copy: size 4") != nullptr, "acme message");
  }

  std::printf("wisp %s and acme %s in one translation unit: %s\n", WISP_VERSION_STRING,
              ACME_VERSION_STRING, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
