#pragma once
// The descriptors the library opens for itself while it runs -- a sleeping
// thread's bell, an epoll set's eventfd -- told to a keeper of the process's
// descriptor numbers. The preload library is one: it keeps an unmodified
// program from closing them (a daemon's "close everything above 2") and
// needs to hear of each as it is made and before it is closed.
//
// And the threads that are the library's own (an event loop's thread,
// DPDK's interrupt thread): whatever they close is the library's to close.

namespace xk {

struct OwnFdWatcher {
  void (*opened)(int fd) noexcept = nullptr;
  void (*closing)(int fd) noexcept = nullptr;
};
// Installs the keeper (one per process; the default hears nothing).
void set_own_fd_watcher(OwnFdWatcher watcher) noexcept;

// Called by the library: `fd` was just opened for its own use.
void own_fd_opened(int fd) noexcept;
// Called by the library just before it closes `fd` (one it opened).
void own_fd_closing(int fd) noexcept;

// The calling thread is the library's (for as long as it lives).
void mark_library_thread() noexcept;
bool on_library_thread() noexcept;

}  // namespace xk
