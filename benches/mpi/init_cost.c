/* What MPI_Init costs, for streamcomm-bench init's comparison
 * (benches/scripts/init-vs-mpi.sh): each rank times MPI_Init, all-reduces
 * 4 floats, checks them, and reads its /proc/self/status; rank 0 prints
 * the slowest rank's MPI_Init and the largest VmRSS and RssShmem (kB). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The value of `field` in /proc/self/status, in kB (0 if absent). */
static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    size_t n = strlen(field);
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            sscanf(line + n + 1, "%ld", &kb);
            break;
        }
    }
    fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    double t0 = now();
    MPI_Init(&argc, &argv);
    double init_ms = (now() - t0) * 1e3;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    float send[4] = {1, 2, 3, (float)rank}, recv[4];
    MPI_Allreduce(send, recv, 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int ok = recv[0] == size && recv[1] == 2 * size && recv[2] == 3 * size &&
             recv[3] == (float)size * (size - 1) / 2;
    long mine[3] = {status_kb("VmRSS"), status_kb("RssShmem"), !ok};
    long most[3];
    double slowest;
    MPI_Reduce(&init_ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(mine, most, 3, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("Open MPI, %d ranks: MPI_Init slowest rank %.1f ms; after an all-reduce of 4 floats "
               "%s: VmRSS %.1f MB, RssShmem %.1f MB (largest)\n",
               size, slowest, most[2] ? "WRONG" : "checked", most[0] / 1e3, most[1] / 1e3);
    }
    MPI_Finalize();
    return most[2] != 0 && rank == 0;
}
