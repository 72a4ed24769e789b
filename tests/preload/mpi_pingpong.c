/* A small MPI ping-pong for the preload tests (docs/preload.md, "MPI"):
 * rank 0 sends messages of 1 B to 4 MiB (powers of two and a few odd sizes)
 * to rank 1, which checks every byte and sends them back; rank 0 checks the
 * echo. Each message's bytes depend on its size and round, so a message
 * delivered to the wrong receive, short or reordered fails the check.
 *
 *   mpirun -np 2 [--mca btl tcp,self] mpi_pingpong [ROUNDS]
 *
 * Prints one line per size and "mpi_pingpong: N messages verified" at the
 * end; exits 1 on the first wrong byte.
 *
 *   mpirun -np 2 ... mpi_pingpong bench [MAX_BYTES]
 *
 * The benchmark form (tests/bench/mpi_bench.sh): powers of two from 1 B to
 * MAX_BYTES (default 8 MiB), some round trips to warm up, then enough to
 * move ~64 MiB each way (10 to 2000); only the exchanges are timed, the
 * bytes are checked once after them. One line per size:
 *   MPIBENCH bytes=N rounds=R half_rtt_us=T */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMax = 4 << 20 };

static unsigned char pattern(size_t size, int round, size_t i) {
  return (unsigned char)((i * 131u + size * 7u + (size_t)round * 29u) >> 3);
}

static int check(const unsigned char* buf, size_t size, int round, const char* who) {
  for (size_t i = 0; i < size; ++i) {
    if (buf[i] != pattern(size, round, i)) {
      fprintf(stderr, "mpi_pingpong: %s: size %zu round %d: byte %zu is %u, not %u\n", who, size, round, i,
              buf[i], pattern(size, round, i));
      return 0;
    }
  }
  return 1;
}

/* One round trip of `size` bytes: rank 0 sends and takes the echo. */
static void exchange(unsigned char* buf, size_t size, int rank, int tag) {
  MPI_Status st;
  if (rank == 0) {
    MPI_Send(buf, (int)size, MPI_BYTE, 1, tag, MPI_COMM_WORLD);
    MPI_Recv(buf, (int)size, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &st);
  } else {
    MPI_Recv(buf, (int)size, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &st);
    MPI_Send(buf, (int)size, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
  }
}

static int bench(int rank, size_t max) {
  if (max > ((size_t)1 << 32)) MPI_Abort(MPI_COMM_WORLD, 2);
  unsigned char* buf = malloc(max);
  if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  int tag = 0;
  for (size_t size = 1; size <= max; size *= 2, ++tag) {
    size_t rounds = ((size_t)64 << 20) / size;
    rounds = rounds < 10 ? 10 : rounds > 2000 ? 2000 : rounds;
    if (rank == 0) {
      for (size_t i = 0; i < size; ++i) buf[i] = pattern(size, 0, i);
    }
    /* Open MPI connects on the first message: the warm-up pays for it, and
     * the first size warms up longer (1000 exchanges, as xk-pingpong's
     * default): the connection, the caches and an xk stack's hand-over
     * between the program's thread and its own (--hand-back-us, 500 us)
     * settle there, and 50 exchanges of ~10 us do not outlast them. */
    const int warmup = size == 1 ? 1000 : size <= 65536 ? 50 : 5;
    for (int w = 0; w < warmup; ++w) exchange(buf, size, rank, tag);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (size_t r = 0; r < rounds; ++r) exchange(buf, size, rank, tag);
    const double t = MPI_Wtime() - t0;
    if (!check(buf, size, 0, rank == 0 ? "echo" : "received")) MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0) {
      printf("MPIBENCH bytes=%zu rounds=%zu half_rtt_us=%.3f\n", size, rounds, t / (double)rounds / 2 * 1e6);
      fflush(stdout);
    }
  }
  free(buf);
  MPI_Finalize();
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: run with exactly 2 ranks, not %d\n", ranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (argc > 1 && strcmp(argv[1], "bench") == 0) {
    const long max = argc > 2 ? atol(argv[2]) : 8L << 20;
    if (max < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    return bench(rank, (size_t)max);
  }
  const int rounds = argc > 1 ? atoi(argv[1]) : 3;
  size_t sizes[40];
  int n = 0;
  for (size_t s = 1; s <= kMax; s *= 2) sizes[n++] = s;
  sizes[n++] = 3;
  sizes[n++] = 1000;
  sizes[n++] = 65537;
  sizes[n++] = kMax - 1;
  unsigned char* buf = malloc(kMax);
  if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  long verified = 0;
  for (int k = 0; k < n; ++k) {
    const size_t size = sizes[k];
    double t0 = MPI_Wtime();
    for (int r = 0; r < rounds; ++r) {
      if (rank == 0) {
        for (size_t i = 0; i < size; ++i) buf[i] = pattern(size, r, i);
        MPI_Send(buf, (int)size, MPI_BYTE, 1, k, MPI_COMM_WORLD);
        memset(buf, 0, size);
        MPI_Status st;
        MPI_Recv(buf, (int)size, MPI_BYTE, 1, k, MPI_COMM_WORLD, &st);
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != size || !check(buf, size, r, "echo")) MPI_Abort(MPI_COMM_WORLD, 1);
      } else {
        MPI_Status st;
        MPI_Recv(buf, (int)size, MPI_BYTE, 0, k, MPI_COMM_WORLD, &st);
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t)got != size || !check(buf, size, r, "received")) MPI_Abort(MPI_COMM_WORLD, 1);
        MPI_Send(buf, (int)size, MPI_BYTE, 0, k, MPI_COMM_WORLD);
      }
      ++verified;
    }
    if (rank == 0) {
      printf("mpi_pingpong: %8zu bytes x %d round trips verified, %.1f us each\n", size, rounds,
             (MPI_Wtime() - t0) / rounds * 1e6);
    }
  }
  if (rank == 0) printf("mpi_pingpong: %ld messages verified\n", verified);
  free(buf);
  MPI_Finalize();
  return 0;
}
