// Reading the TCP control token (xk/filterd/token.hpp).

#include "xk/filterd/token.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "xk/filterd/control_wire.hpp"

namespace xk::filterd {

std::vector<std::byte> read_token_file(const std::string& path) {
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error("token file " + path + ": " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw fail(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  // Checked on the open file, so it cannot be swapped between check and read.
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw fail(std::string("mode ") + mode + " lets others at it (chmod 600)");
  }
  if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    ::close(fd);
    throw fail("owned by uid " + std::to_string(st.st_uid) + ", neither root nor us");
  }
  std::vector<std::byte> out;
  std::byte buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw fail(std::strerror(e));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
    if (out.size() > 2 * ctl::kMaxToken) break;
  }
  ::close(fd);
  while (!out.empty()) {
    const auto c = static_cast<char>(out.back());
    if (c != '\n' && c != '\r' && c != ' ' && c != '\t') break;
    out.pop_back();
  }
  if (out.size() < kMinTokenBytes || out.size() > ctl::kMaxToken) {
    throw fail(std::to_string(out.size()) + " bytes; a token has " + std::to_string(kMinTokenBytes) + ".." +
               std::to_string(ctl::kMaxToken));
  }
  return out;
}

}  // namespace xk::filterd
