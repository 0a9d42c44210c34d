#pragma once
// xattn::mpi: context-parallel attention over MPI (ring attention with zigzag balancing), forward
// and backward. Link the CMake target xattn::mpi (MPI's C bindings, OpenMPI on Debian).
#include "mpi/context.hpp"
#include "xattn.hpp"
