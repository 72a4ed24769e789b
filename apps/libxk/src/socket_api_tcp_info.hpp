#pragma once
// TCP_INFO in Linux's layout (socket_api_tcp_info.cpp).

#include <cstddef>

#include "xk/protocols/tcp_socket.hpp"

namespace xk::capi {

// Writes the first min(len, sizeof(struct tcp_info)) bytes of Linux's
// struct tcp_info for `st` to `out` (fields xk does not keep are 0), and
// returns how many it wrote.
std::size_t linux_tcp_info(const tcp::ConnStats& st, void* out, std::size_t len) noexcept;

}  // namespace xk::capi
