/* An MPI program for softroce's stack tests (ibverbs/tests/mpi.rs, scripts/mpi-run.sh):
 * ping-pong latency (8 B) and bandwidth (1 MiB) between ranks 0 and 1, with every byte of
 * the bandwidth messages checked, then an allreduce whose sum every rank checks.
 * Prints "latency_us N", "bandwidth_MBps N" (rank 0) and "allreduce ok SUM" (every rank);
 * exits non-zero on any mismatch. Iterations: argv[1] (latency), argv[2] (bandwidth). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(const unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31 + seed))
            return 0;
    return 1;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31 + seed);
}

int main(int argc, char **argv)
{
    int rank, size, lat_n = argc > 1 ? atoi(argv[1]) : 1000, bw_n = argc > 2 ? atoi(argv[2]) : 50;
    const size_t big = 1 << 20;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned char *buf = malloc(big);
    char small[8] = {0};
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);

    /* Latency: half the round trip of an 8-byte message, ranks 0 and 1. */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < lat_n && rank < 2; i++) {
        if (rank == 0) {
            MPI_Send(small, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(small, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(small, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(small, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    double lat = (MPI_Wtime() - t0) / lat_n / 2 * 1e6;

    /* Bandwidth: 1 MiB messages from 0 to 1, each checked, a 1-byte acknowledgement each. */
    int bad = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < bw_n && rank < 2; i++) {
        if (rank == 0) {
            fill(buf, big, i);
            MPI_Send(buf, big, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
            MPI_Recv(small, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            memset(buf, 0, big);
            MPI_Recv(buf, big, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad += !check(buf, big, i);
            MPI_Send(small, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
    }
    double bw = (double)big * bw_n / (MPI_Wtime() - t0) / 1e6;
    if (rank == 1 && bad) {
        fprintf(stderr, "rank 1: %d of %d bandwidth messages corrupted\n", bad, bw_n);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }

    /* Allreduce: rank r contributes r+1 in each of 1000 elements (times the element index). */
    enum { N = 1000 };
    static long in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (long)(rank + 1) * (i + 1);
    MPI_Allreduce(in, out, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long want = (long)size * (size + 1) / 2;
    for (int i = 0; i < N; i++) {
        if (out[i] != want * (i + 1)) {
            fprintf(stderr, "rank %d: allreduce element %d is %ld, want %ld\n", rank, i, out[i], want * (i + 1));
            MPI_Abort(MPI_COMM_WORLD, 4);
        }
    }
    if (rank == 0) {
        printf("latency_us %.2f\nbandwidth_MBps %.1f\n", lat, bw);
    }
    printf("allreduce ok %ld rank %d of %d\n", want, rank, size);
    free(buf);
    MPI_Finalize();
    return 0;
}
