// SHA-256 throughput of a stream: xkernel's portable Sha256 against OpenSSL's
// EVP SHA-256 (SHA extensions where the CPU has them), which the apps use to
// verify streams (xk/apps/digest.hpp). The reference is xkernel's: the ratio
// says how much faster a verified transfer's hashing became.
#include <openssl/evp.h>

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ratio.hpp"
#include "xk/sha256.hpp"

namespace {

constexpr std::int64_t kChunk = 64 * 1024;  // what a receiver hands the hash at a time

std::vector<std::byte> bench_data() {
  std::mt19937 rng(7);
  std::vector<std::byte> v(kChunk);
  for (auto& b : v) b = std::byte(static_cast<unsigned char>(rng()));
  return v;
}

void BM_Sha256_Xkernel(benchmark::State& state) {
  const std::vector<std::byte> data = bench_data();
  xk::Sha256 h;
  for (auto _ : state) h.update(data);
  benchmark::DoNotOptimize(h.digest());
  state.SetBytesProcessed(state.iterations() * kChunk);
}
BENCHMARK(BM_Sha256_Xkernel);

void BM_Sha256_OpenSsl(benchmark::State& state) {
  const std::vector<std::byte> data = bench_data();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  for (auto _ : state) EVP_DigestUpdate(ctx, data.data(), data.size());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  benchmark::DoNotOptimize(md);
  EVP_MD_CTX_free(ctx);
  state.SetBytesProcessed(state.iterations() * kChunk);
}
BENCHMARK(BM_Sha256_OpenSsl);

}  // namespace

int main(int argc, char** argv) {
  return xk::bench::run_with_ratios(
      argc, argv,
      {{"stream SHA-256, OpenSSL / xkernel (64 KiB updates)", "BM_Sha256_OpenSsl", "BM_Sha256_Xkernel",
        xk::bench::Metric::bytes_per_second, 2.0, ""}});
}
