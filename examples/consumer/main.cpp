// SPDX-License-Identifier: Apache-2.0
// A program built against an installed wisp: checks the version and uses the core types.
#include <wisp/wisp.hpp>

#include <cstdio>

int main() {
  using namespace wisp::literals;
  static_assert(WISP_VERSION_MAJOR == 0 && WISP_VERSION_MINOR >= 1);

  const wisp::byte_size expert = 3 * 768 * 2048 * 2_B;  // one Qwen3-30B-A3B expert in bf16
  const std::uint64_t slots = 24_GiB / expert;
  try {
    WISP_EXPECTS(slots >= 8, "only ", slots, " slots");
    (void)(1_GiB - 2_GiB);  // underflow must throw, never wrap
    std::puts("consumer: byte_size underflow was not detected");
    return 1;
  } catch (const wisp::logic_error& e) {
    std::printf("wisp %s: %llu expert slots in 24 GiB; checked arithmetic: %s\n",
                WISP_VERSION_STRING, static_cast<unsigned long long>(slots), e.what());
  }
  return 0;
}
