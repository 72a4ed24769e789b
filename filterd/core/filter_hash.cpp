#include "xk/filterd/filter_hash.hpp"

#include <random>

namespace xk::filterd {

HashKey random_hash_key() {
  std::random_device rd;
  HashKey key{};
  for (std::size_t i = 0; i < key.size(); i += 4) {
    std::uint32_t r = rd();
    for (std::size_t j = 0; j < 4; ++j) key[i + j] = static_cast<std::byte>(r >> (8 * j));
  }
  return key;
}

}  // namespace xk::filterd
