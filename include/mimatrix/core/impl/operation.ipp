// A request's calls of its operation: in every unit when header-only, once with separate
// compilation (core/operation.hpp says why).
#pragma once

#include <string>
#include <system_error>

#include "mimatrix/core/operation.hpp"

namespace mimatrix::detail {

MIMATRIX_DECL bool test_operation(operation& op, std::error_code& ec) { return op.test(ec); }
MIMATRIX_DECL void wait_operation(operation& op, std::error_code& ec) { op.wait(ec); }
MIMATRIX_DECL const std::string& message_of(const operation& op) { return op.message(); }
MIMATRIX_DECL void operation_deleter::operator()(operation* op) const noexcept { delete op; }

}  // namespace mimatrix::detail
