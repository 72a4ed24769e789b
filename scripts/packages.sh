# The Debian 12 packages xk's build, tests, benchmarks and demo need; sourced
# by scripts/test and scripts/demo, which install them unless XK_SKIP_INSTALL=1.
XK_PACKAGES=(
  build-essential cmake ninja-build pkg-config          # toolchain
  clang libclang-rt-14-dev llvm                         # fuzz harnesses: clang, libFuzzer, llvm-symbolizer
  libgtest-dev libgmock-dev libbenchmark-dev            # tests and benchmarks
  libdpdk-dev dpdk libpcap-dev                          # packet I/O, capture
  python3 python3-scapy                                 # golden vectors (independent tool), Linux test peers
  tshark tcpdump                                        # reading captures back (capture tests)
  sockperf iperf3 netpipe-tcp                           # the Linux references of the benchmarks (NPtcp)
  dpdk-dev                                              # dpdk-testpmd: the bare forwarder of forward_floor.sh
  iproute2 ethtool iputils-ping                         # network namespaces, veth offloads, ping (integration)
  gnuplot-nox openmpi-bin file                          # xk-scale's plots, its mpirun launcher; PNG checks
  libssl-dev                                            # the apps' stream digests (OpenSSL's SHA-256)
  nlohmann-json3-dev                                    # xkctl's --json, and reading JSON back in tests
  curl nginx-light socat                                # unmodified programs under xkrun (preload tests)
  libopenmpi-dev                                        # mpicc: the MPI ping-pong run under xkrun
  chromium                                              # renders xk-scale's report.html (headless, in the scale smoke test)
)

xk_install_packages() {
  [ "${XK_SKIP_INSTALL:-0}" = 1 ] && return 0
  local sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  echo "== installing packages"
  "${sudo_cmd[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${XK_PACKAGES[@]}"
}
