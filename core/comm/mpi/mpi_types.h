// What the "mpi" backend hands to MPI: element types, reduction ops, the error rule and the
// largest count one MPI call may carry. Internal header.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "collops/reduce.h"
#include "collops/tensor.h"

namespace collops {
namespace mpi {

/// The MPI datatype of one element of `dtype`: MPI's own type where one exists (bool moves as
/// MPI_C_BOOL), and for float16/bfloat16 a committed contiguous 2-byte type that only the
/// library's user ops reduce. Throws Error(ERROR_INVALID_TENSOR_DTYPE) for an unknown dtype.
/// Needs MPI initialised.
MPI_Datatype ElementType(DataType dtype);

/// The MPI_Op reducing `dtype` with `op`: MPI_SUM/PROD/MAX/MIN for MPI's 32/64-bit types, and
/// a user op (commutative) that runs collops' ReduceArrays kernels on each pair MPI combines for
/// float16/bfloat16, for int8/uint8/int16 (sums wrap, where OpenMPI's AVX component saturates
/// them) and for float32/float64 max and min (NaN wins, where MPI_MAX/MPI_MIN drop it). A user op
/// on float16/bfloat16 rounds after every pair, so their sums and products do not come here
/// (MpiCommunicator reduces them in rank order, InRankOrder). Throws
/// Error(ERROR_INVALID_TENSOR_DTYPE) when reductions do not accept `dtype`.
MPI_Op ReductionOp(DataType dtype, ReduceOp op);

/// True for float16/bfloat16 sums and products: they must accumulate in float32 over every rank
/// and round once, bit-identical to lccl's fold in rank order, which no
/// pairwise MPI_Op can do. Max and min never round and reduce through ReductionOp.
bool InRankOrder(DataType dtype, ReduceOp op);

/// Throws Error(ERROR_COMM_FAIL, "<call>: <MPI_Error_string(rc)>") unless rc is MPI_SUCCESS.
void CheckMpi(int rc, const char* call);

/// The most elements one MPI call carries, and the largest count or displacement that goes into
/// an int argument: INT_MAX, or COLLOPS_MPI_MAX_COUNT when set (tests lower it to reach the
/// chunked paths with small buffers; read on every call, see collops/environment.h for its
/// syntax). Larger transfers are split, never truncated.
size_t MaxCount();

}  // namespace mpi
}  // namespace collops
