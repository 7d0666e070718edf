#include "core/comm/mpi/mpi_types.h"

#include <climits>
#include <cstdlib>
#include <mutex>

#include "collops/environment.h"
#include "collops/status.h"

namespace collops {
namespace mpi {
namespace {

/// inout[i] = in[i] op inout[i] through the library's kernels. MPI calls it with (invec,
/// inoutvec, len, type); the op is commutative, so the order of the pair is free.
template <DataType kDtype, ReduceOp kOp>
void LibraryReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const void* srcs[2] = {in, inout};
  ReduceArrays(kDtype, kOp, srcs, 2, inout, static_cast<size_t>(*len));
}

template <DataType kDtype>
MPI_Op MakeLibraryOp(ReduceOp op) {
  MPI_User_function* function = nullptr;
  switch (op) {
    case ReduceOp::kSum:
      function = &LibraryReduce<kDtype, ReduceOp::kSum>;
      break;
    case ReduceOp::kProd:
      function = &LibraryReduce<kDtype, ReduceOp::kProd>;
      break;
    case ReduceOp::kMax:
      function = &LibraryReduce<kDtype, ReduceOp::kMax>;
      break;
    case ReduceOp::kMin:
      function = &LibraryReduce<kDtype, ReduceOp::kMin>;
      break;
  }
  MPI_Op result = MPI_OP_NULL;
  CheckMpi(MPI_Op_create(function, /*commute=*/1, &result), "MPI_Op_create");
  return result;
}

constexpr int kReduceOps = 4;

bool IsMaxOrMin(int op) {
  return op == static_cast<int>(ReduceOp::kMax) || op == static_cast<int>(ReduceOp::kMin);
}

/// The reductions MPI runs through the library's kernels instead of its own: the 2-byte floats,
/// which MPI has no type for; the 8- and 16-bit integers, whose sums OpenMPI's AVX op component
/// saturates instead of wrapping (64 int8 of -112 + -71 give -128, not 73; OpenMPI keeps it so);
/// and max/min of float32/float64, where MPI_MAX and MPI_MIN
/// drop a NaN (a comparison with NaN is false, so which value survives depends on the operand
/// order) while the kernels let NaN win, as lccl and torch.maximum do. Made once after MPI is
/// initialised and never freed (MPI_Finalize releases them). MPI_OP_NULL where MPI's own is right.
struct LibraryOps {
  MPI_Datatype halfType = MPI_DATATYPE_NULL;
  MPI_Op float16[kReduceOps] = {};
  MPI_Op bfloat16[kReduceOps] = {};
  MPI_Op int8[kReduceOps] = {};
  MPI_Op uint8[kReduceOps] = {};
  MPI_Op int16[kReduceOps] = {};
  MPI_Op float32[kReduceOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op float64[kReduceOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

  LibraryOps() {
    CheckMpi(MPI_Type_contiguous(2, MPI_BYTE, &halfType), "MPI_Type_contiguous");
    CheckMpi(MPI_Type_commit(&halfType), "MPI_Type_commit");
    for (int op = 0; op < kReduceOps; ++op) {
      const auto reduce = static_cast<ReduceOp>(op);
      float16[op] = MakeLibraryOp<ACL_FLOAT16>(reduce);
      bfloat16[op] = MakeLibraryOp<ACL_BF16>(reduce);
      int8[op] = MakeLibraryOp<ACL_INT8>(reduce);
      uint8[op] = MakeLibraryOp<ACL_UINT8>(reduce);
      int16[op] = MakeLibraryOp<ACL_INT16>(reduce);
      if (IsMaxOrMin(op)) {
        float32[op] = MakeLibraryOp<ACL_FLOAT>(reduce);
        float64[op] = MakeLibraryOp<ACL_DOUBLE>(reduce);
      }
    }
  }

  /// The library's op reducing `dtype` with op number `op`, or MPI_OP_NULL where MPI's own is
  /// right.
  MPI_Op For(DataType dtype, int op) const {
    switch (dtype) {
      case ACL_FLOAT16:
        return float16[op];
      case ACL_BF16:
        return bfloat16[op];
      case ACL_INT8:
        return int8[op];
      case ACL_UINT8:
        return uint8[op];
      case ACL_INT16:
        return int16[op];
      case ACL_FLOAT:
        return float32[op];
      case ACL_DOUBLE:
        return float64[op];
      default:
        return MPI_OP_NULL;
    }
  }
};

const LibraryOps& Library() {
  static const LibraryOps* ops = new LibraryOps;
  return *ops;
}

}  // namespace

MPI_Datatype ElementType(DataType dtype) {
  switch (dtype) {
    case ACL_FLOAT:
      return MPI_FLOAT;
    case ACL_DOUBLE:
      return MPI_DOUBLE;
    case ACL_INT8:
      return MPI_INT8_T;
    case ACL_UINT8:
      return MPI_UINT8_T;
    case ACL_INT16:
      return MPI_INT16_T;
    case ACL_INT32:
      return MPI_INT32_T;
    case ACL_INT64:
      return MPI_INT64_T;
    case ACL_BOOL:
      return MPI_C_BOOL;
    case ACL_FLOAT16:
    case ACL_BF16:
      return Library().halfType;
    default:
      Fail(ERROR_INVALID_TENSOR_DTYPE, "mpi backend: dtype ", DataTypeName(dtype),
           " has no MPI type");
  }
}

MPI_Op ReductionOp(DataType dtype, ReduceOp op) {
  if (!IsReducibleDtype(dtype)) {
    Fail(ERROR_INVALID_TENSOR_DTYPE, "mpi backend: dtype ", DataTypeName(dtype),
         " cannot be reduced");
  }
  const int index = static_cast<int>(op);
  if (index < 0 || index >= kReduceOps) {
    Fail(ERROR_INVALID_PARAM, "mpi backend: unknown reduce op ", index);
  }
  const MPI_Op library = Library().For(dtype, index);
  if (library != MPI_OP_NULL) return library;
  static const MPI_Op kNative[kReduceOps] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return kNative[index];
}

bool InRankOrder(DataType dtype, ReduceOp op) {
  return (dtype == ACL_FLOAT16 || dtype == ACL_BF16) &&
         (op == ReduceOp::kSum || op == ReduceOp::kProd);
}

void CheckMpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    Fail(ERROR_COMM_FAIL, call, ": MPI error code ", rc);
  }
  Fail(ERROR_COMM_FAIL, call, ": ", std::string(text, static_cast<size_t>(length)));
}

size_t MaxCount() { return KnobInteger("COLLOPS_MPI_MAX_COUNT", INT_MAX); }

}  // namespace mpi
}  // namespace collops
