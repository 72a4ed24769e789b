#pragma once
// The program's signal handlers, counted per thread (signals.cpp).
#include <cstdint>

namespace xk::preload {

// Handlers of the program that ran on this thread: all of them (poll,
// select and epoll end with EINTR for any), and those without SA_RESTART
// (a blocked read or accept ends with EINTR for these only).
std::uint64_t handlers_run() noexcept;
std::uint64_t interrupting_handlers_run() noexcept;

}  // namespace xk::preload
