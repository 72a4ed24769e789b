# Helpers of the xk-ttcp tests (ttcp_memif.sh, ttcp_shm.sh): sourced after
# integration/lib.sh, with OUT set.

# key LINE NAME: the value of NAME=... in LINE.
key() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<< "$1"; }
# positive NAME VALUE: VALUE is a number > 0.
positive() { awk -v v="$2" 'BEGIN { exit !(v + 0 > 0) }' || die "$1=$2 is not a positive number"; }
# counter OWNER NAME LOG: a value from the counters table at the end.
counter() { awk -v o="$1" -v n="$2" '$1 == o && $2 == n { v = $3 } END { print v + 0 }' "$OUT/$3"; }
# same_stream TX_LOG RX_LOG BYTES: one connection's RESULT lines agree.
same_stream() {
  local tx rx
  tx=$(grep '^RESULT role=transmitter ' "$OUT/$1" || true)
  rx=$(grep '^RESULT role=receiver conn=0 ' "$OUT/$2" || true)
  [ -n "$tx" ] || die "$1: no transmitter RESULT line"
  [ -n "$rx" ] || die "$2: no receiver RESULT line for conn 0"
  echo "   $tx"
  echo "   $rx"
  for k in bytes seconds gbps cpu_s cpu_s_per_gb sha256; do [ -n "$(key "$tx" $k)" ] || die "$1: no $k="; done
  for k in peer bytes seconds gbps sha256; do [ -n "$(key "$rx" $k)" ] || die "$2: no $k="; done
  [ "$(key "$tx" sha256)" = "$(key "$rx" sha256)" ] || die "sha256 differs: $1 vs $2"
  [ "$(key "$tx" bytes)" = "$(key "$rx" bytes)" ] || die "byte counts differ: $1 vs $2"
  [ -z "${3:-}" ] || [ "$(key "$tx" bytes)" = "$3" ] || die "$1: bytes=$(key "$tx" bytes), want $3"
  for k in seconds gbps cpu_s cpu_s_per_gb; do positive "$k" "$(key "$tx" $k)"; done
  for k in seconds gbps; do positive "$k" "$(key "$rx" $k)"; done
  # gbps is 8 * bytes / seconds (to the 3 decimals printed).
  awk -v b="$(key "$tx" bytes)" -v s="$(key "$tx" seconds)" -v g="$(key "$tx" gbps)" \
    'BEGIN { exit !((8 * b / s / 1e9 - g) ^ 2 < 1e-6) }' || die "$1: gbps does not match bytes and seconds"
}
