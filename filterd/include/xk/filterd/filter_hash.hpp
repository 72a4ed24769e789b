#pragma once
// The keyed hash behind filterd's group listeners: SipHash-2-4 (Aumasson and
// Bernstein, 2012). Keyed, so a remote peer cannot pick 4-tuples that all
// land on one member of a group.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "xk/hash.hpp"

namespace xk::filterd {

// A 128-bit SipHash key (xk/hash.hpp).
using HashKey = SipKey;

// 16 bytes from std::random_device. Configuration time only (may throw).
HashKey random_hash_key();

// SipHash-2-4 and the 64-bit finalizer, shared with TCP (xk/hash.hpp).
using xk::mix64;
using xk::siphash24;

}  // namespace xk::filterd
