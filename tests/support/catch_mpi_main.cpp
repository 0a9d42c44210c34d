// Catch2's runner inside MPI: every rank runs every test case in the same order (the cases call
// collectives), and only non-aborting checks are used, so a failure on one rank cannot leave the
// others waiting. The exit code is the worst of all ranks'.
#include "catch_run.hpp"

#include <mpi.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int failed = xattn::testing::run_catch(argc, argv), worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
