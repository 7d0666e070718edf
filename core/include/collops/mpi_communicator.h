// Adopting the application's MPI communicator (backend "mpi"; ATB's "bring your own hcclComm").
//
// Link libcollops_mpi.so (CMake target collops_mpi) to use this header; it is built when
// COLLOPS_WITH_MPI is ON and OpenMPI is found. Operations run on the result through
// CommParam::comm or MakeOperation(name, json, comm.get()); rank and rankSize in the params must
// equal the communicator's.
#pragma once

#include <mpi.h>

#include <memory>

#include "collops/communicator.h"

namespace collops {

/// A Communicator over the caller's intracommunicator `comm`. It works on a duplicate
/// (MPI_Comm_dup, so this call is collective over `comm`): the library's traffic never mixes
/// with the application's, and its error handler (MPI_ERRORS_RETURN, MPI errors become
/// Error(ERROR_COMM_FAIL)) never replaces the application's. The duplicate is freed with the
/// last reference to the result; `comm` stays the caller's. If MPI is not initialised yet (only
/// possible for MPI_COMM_WORLD / MPI_COMM_SELF) the library initialises it and finalises it at
/// exit. Throws Error(ERROR_INVALID_PARAM) for MPI_COMM_NULL or an intercommunicator.
std::shared_ptr<Communicator> MakeMpiCommunicator(MPI_Comm comm);

}  // namespace collops
