// Operation registry: create operations by name from JSON, or from a typed param struct.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collops/communicator.h"
#include "collops/operation.h"
#include "collops/param_json.h"
#include "collops/status.h"

namespace collops {

/// Builds an operation from JSON params, on `comm` when not null (the caller-owned communicator
/// of CommParam::comm, which JSON cannot carry); throws Error(ERROR_INVALID_PARAM) for bad params.
using OperationFactory = Operation* (*)(const nlohmann::json& param, Communicator* comm);

bool RegisterOperation(const std::string& name, OperationFactory factory);
/// Every registered name, sorted.
std::vector<std::string> ListOperations();

/// Creates `opName` from JSON params. ERROR_INVALID_PARAM for an unknown name or bad params.
Status CreateOperation(const std::string& opName, const nlohmann::json& param, Operation** op);
/// Same, running on the caller's communicator (ATB's hcclComm; used, never freed).
Status CreateOperation(const std::string& opName, const nlohmann::json& param, Communicator* comm,
                       Operation** op);
/// Same, from JSON text; malformed text is ERROR_INVALID_PARAM naming the byte it fails at.
Status CreateOperation(const std::string& opName, const std::string& paramJson, Operation** op);
Status CreateOperation(const std::string& opName, const char* paramJson, Operation** op);
Status DestroyOperation(Operation* op);

struct OperationDeleter {
  void operator()(Operation* op) const { DestroyOperation(op); }
};
using OperationPtr = std::unique_ptr<Operation, OperationDeleter>;

/// Creates or throws Error: the form C++ callers and tests use most.
OperationPtr MakeOperation(const std::string& opName, const nlohmann::json& param,
                           Communicator* comm = nullptr);

namespace detail {
template <class Op, class P>
Status CreateTyped(const P& param, Operation** op) {
  if (op == nullptr) {
    SetLastErrorMessage("CreateOperation: the output pointer is null");
    return ERROR_INVALID_PARAM;
  }
  *op = nullptr;
  return Guarded([&] {
    Op::ValidateParam(param);
    *op = new Op(param);
  });
}
template <class Op, class P>
Operation* CreateFromJson(const nlohmann::json& json, Communicator* comm) {
  P param = ParamFromJson<P>(json, Op::kName);
  param.comm = comm;
  Op::ValidateParam(param);
  return new Op(param);
}
}  // namespace detail

}  // namespace collops

/// Registers OpClass under OpClass::kName and defines the typed CreateOperation(const ParamType&,
/// Operation**) declared beside ParamType. Use once, at the end of the op's .cpp, inside
/// namespace collops.
#define COLLOPS_REGISTER_OPERATION(OpClass, ParamType)             \
  Status CreateOperation(const ParamType& param, Operation** op) { \
    return detail::CreateTyped<OpClass, ParamType>(param, op);     \
  }                                                                \
  static const bool kRegistered##OpClass =                         \
      RegisterOperation(OpClass::kName, &detail::CreateFromJson<OpClass, ParamType>)
