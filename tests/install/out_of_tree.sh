#!/usr/bin/env bash
# cmake --install of a build tree into a scratch prefix, then the example of
# apps/examples/echo built OUTSIDE the source tree against it, the way a user
# would: with CMake + pkg-config (shared libxk), and with cc and libxk.a; both
# run. Also checks that every installed header compiles on its own and that
# the internal ones stay out.
#
#   out_of_tree.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d /tmp/xk-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
step() { printf '== %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

step "cmake --install into $work/prefix"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" || { cat "$work/install.log"; die "install failed"; }
pc=$(find "$work/prefix" -name libxk.pc | head -1)
[[ -n $pc ]] || die "no libxk.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$libdir/libxk.so" "$libdir/libxk.a" "$libdir/libxk_packetdrill.so" "$work/prefix/include/xk/xk.h" "$work/prefix/include/xk/stack.hpp" \
         "$work/prefix/include/xk/protocols/tcp.hpp" "$work/prefix/include/xk/msg.hpp"; do
  [[ -e $f ]] || die "not installed: $f"
done
export PKG_CONFIG_PATH="$(dirname "$pc")"
[[ $(pkg-config --variable=includedir libxk) -ef $work/prefix/include ]] || die "libxk.pc does not point into the prefix"
cflags=$(pkg-config --cflags libxk)
grep -q -- '-march\|rte_config' <<< "$cflags" && die "libxk.pc leaks DPDK's compile flags"

step "the example, copied out of the tree, built with CMake against the installed libxk.so"
cp -r "$src/apps/examples/echo" "$work/echo"
cmake -S "$work/echo" -B "$work/echo/build" -DCMAKE_BUILD_TYPE=Release > "$work/cmake.log" || { cat "$work/cmake.log"; die "configure failed"; }
cmake --build "$work/echo/build" > "$work/build.log" || { cat "$work/build.log"; die "build failed"; }
# (ldd's output in a variable: grep -q stops reading early, and with pipefail
# ldd's SIGPIPE would fail the pipeline now and then.)
deps=$(ldd "$work/echo/build/echo")
grep -q "$libdir/libxk.so" <<< "$deps" || die "the example does not use the installed libxk.so"
LD_LIBRARY_PATH="$libdir" "$work/echo/build/echo" service
LD_LIBRARY_PATH="$libdir" "$work/echo/build/echo" inline

step "the same with cc and the static libxk.a"
# libxk.a itself, with what it needs (DPDK and libpcap as shared libraries: a
# fully static DPDK wants libraries Debian ships only with -dev packages).
# shellcheck disable=SC2046
cc -O2 -o "$work/echo-static" "$work/echo/echo.c" $(pkg-config --cflags libxk) \
   $(pkg-config --libs libxk | sed 's/-lxk\b/-l:libxk.a/') \
   $(pkg-config --libs $(pkg-config --variable=requires_static libxk)) \
   $(pkg-config --static --libs-only-l libxk | tr ' ' '\n' | grep -E '^-l(stdc\+\+|m|pthread)$' | tr '\n' ' ')
deps=$(ldd "$work/echo-static")
grep -q libxk <<< "$deps" && die "the static build still needs libxk.so"
"$work/echo-static" service

step "the C++ headers compile on their own"
printf '#include <xk/stack.hpp>\n#include <xk/protocols/tcp.hpp>\n#include <xk/protocols/udp.hpp>\nint main() { xk::StackConfig c; return c.graph.empty() ? 0 : 1; }\n' > "$work/hdr.cpp"
c++ -std=c++20 -o "$work/hdr" "$work/hdr.cpp" $(pkg-config --cflags --libs libxk)
LD_LIBRARY_PATH="$libdir" "$work/hdr"

step "every installed header compiles alone (none needs one left out)"
n=0
while IFS= read -r h; do
  rel=${h#"$work/prefix/include/"}
  case $rel in
    *.h) printf '#include <%s>\n#include <%s>\n' "$rel" "$rel" > "$work/one.c"
         cc -std=c11 -fsyntax-only $(pkg-config --cflags libxk) "$work/one.c" || die "$rel does not compile alone (C)" ;;
  esac
  printf '#include <%s>\n#include <%s>\n' "$rel" "$rel" > "$work/one.cpp"
  c++ -std=c++20 -fsyntax-only $(pkg-config --cflags libxk) "$work/one.cpp" || die "$rel does not compile alone"
  n=$((n + 1))
done < <(find "$work/prefix/include" -type f -name '*.h*' | sort)
(( n >= 40 )) || die "only $n headers installed"
for internal in own_fds.hpp copy.hpp filterd_client.hpp filterd/control.hpp; do
  [[ ! -e $work/prefix/include/xk/$internal ]] || die "internal header installed: xk/$internal"
done
echo "   $n headers, each alone"
echo "PASS: installed libxk works for a program outside the tree"
