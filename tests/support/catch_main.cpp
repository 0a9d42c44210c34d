// Catch2's default main. A static library's object is linked only when it defines a missing
// symbol, so executables with a main of their own (the MPI tests) never take this one.
#include "catch_run.hpp"

int main(int argc, char** argv) { return xattn::testing::run_catch(argc, argv); }
