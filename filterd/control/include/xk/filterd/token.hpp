#pragma once
// The shared secret of TCP control connections (docs/control-protocol.md,
// "TCP"): filterd (--control-token FILE) and its remote nodes
// (XK_FILTERD_TOKEN=FILE, --filterd-token FILE) read it from a file that
// only its owner may read, so it never appears on a command line or in the
// environment, where other users of the host could see it.

#include <cstddef>
#include <string>
#include <vector>

namespace xk::filterd {

inline constexpr std::size_t kMinTokenBytes = 16;  // guessing 128 bits over a network is hopeless

// The file's bytes without trailing white space (a newline an editor added).
// Throws std::runtime_error saying what is wrong: unreadable, a mode that
// lets group or others read or write it, owned by another user than root or
// the caller, shorter than kMinTokenBytes or longer than the protocol's 256
// bytes.
std::vector<std::byte> read_token_file(const std::string& path);

}  // namespace xk::filterd
