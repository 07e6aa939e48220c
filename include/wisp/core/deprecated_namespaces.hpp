// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The pre-0.2 sub-namespaces `wisp::trace`, `wisp::reuse`, `wisp::alloc` and `wisp::sim`,
/// kept as deprecated spellings of `wisp::`.
///
/// Every public name of wisp lives directly in `wisp::` (internals in `wisp::detail`, device code
/// in `wisp::cuda`). Code written against the old sub-namespaces (`wisp::reuse::reuse_histogram`,
/// `wisp::trace::read_trace`, ...) still compiles, with a deprecation warning naming the
/// namespace; they were the spellings of 0.1 and are removed in 0.3.
#pragma once

namespace wisp {
// Qualified lookup in these namespaces finds every name of `wisp::` through the directive.
namespace
    [[deprecated("the names of wisp::trace are now in wisp:: (this alias goes in 0.3)")]] trace {
using namespace ::wisp;
}
namespace
    [[deprecated("the names of wisp::reuse are now in wisp:: (this alias goes in 0.3)")]] reuse {
using namespace ::wisp;
}
namespace
    [[deprecated("the names of wisp::alloc are now in wisp:: (this alias goes in 0.3)")]] alloc {
using namespace ::wisp;
}
namespace [[deprecated("the names of wisp::sim are now in wisp:: (this alias goes in 0.3)")]] sim {
using namespace ::wisp;
}
}  // namespace wisp
