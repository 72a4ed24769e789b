#pragma once
// The stack as the interface "xk0" (interfaces.cpp).

namespace xk::preload {

// An interface ioctl (SIOCGIFCONF, or SIOCGIF* naming xk0) answered for the
// stack: true with `result` (0, or -1 and errno) when it was, false when the
// request is the kernel's alone (no stack, another interface).
bool interface_ioctl(int fd, unsigned long request, void* arg, int& result);

}  // namespace xk::preload
