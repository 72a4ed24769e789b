#include "xk/own_fds.hpp"

#include <atomic>

namespace xk {
namespace {
std::atomic<void (*)(int) noexcept> g_opened{nullptr};
std::atomic<void (*)(int) noexcept> g_closing{nullptr};
thread_local bool t_library_thread = false;
}  // namespace

void set_own_fd_watcher(OwnFdWatcher watcher) noexcept {
  g_opened.store(watcher.opened, std::memory_order_release);
  g_closing.store(watcher.closing, std::memory_order_release);
}

void own_fd_opened(int fd) noexcept {
  if (auto* f = g_opened.load(std::memory_order_acquire); f != nullptr && fd >= 0) f(fd);
}

void own_fd_closing(int fd) noexcept {
  if (auto* f = g_closing.load(std::memory_order_acquire); f != nullptr && fd >= 0) f(fd);
}

void mark_library_thread() noexcept { t_library_thread = true; }
bool on_library_thread() noexcept { return t_library_thread; }

}  // namespace xk
