#include "collops/registry.h"

#include <map>
#include <mutex>

namespace collops {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, OperationFactory> factories;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: used from static initialisers
  return *registry;
}

}  // namespace

bool RegisterOperation(const std::string& name, OperationFactory factory) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.factories.emplace(name, factory).second;
}

std::vector<std::string> ListOperations() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

Status CreateOperation(const std::string& opName, const nlohmann::json& param, Operation** op) {
  return CreateOperation(opName, param, nullptr, op);
}

Status CreateOperation(const std::string& opName, const nlohmann::json& param, Communicator* comm,
                       Operation** op) {
  if (op == nullptr) {
    SetLastErrorMessage("CreateOperation: the output pointer is null");
    return ERROR_INVALID_PARAM;
  }
  *op = nullptr;
  return Guarded([&] {
    OperationFactory factory = nullptr;
    {
      Registry& r = TheRegistry();
      std::lock_guard<std::mutex> lock(r.mutex);
      const auto it = r.factories.find(opName);
      if (it != r.factories.end()) factory = it->second;
    }
    if (factory == nullptr) {
      std::string known;
      for (const auto& name : ListOperations()) known += (known.empty() ? "" : ", ") + name;
      Fail(ERROR_INVALID_PARAM, "unknown operation \"", opName, "\" (registered: ", known, ")");
    }
    *op = factory(param, comm);
  });
}

Status CreateOperation(const std::string& opName, const std::string& paramJson, Operation** op) {
  // The parser stops at a NUL byte, so anything after one would be silently ignored.
  const size_t nul = paramJson.find('\0');
  if (nul != std::string::npos) {
    if (op != nullptr) *op = nullptr;
    SetLastErrorMessage(Concat(opName, ": params contain a NUL byte at byte offset ", nul,
                               "; JSON text cannot hold one"));
    return ERROR_INVALID_PARAM;
  }
  nlohmann::json param;
  try {
    param = nlohmann::json::parse(paramJson);
  } catch (const nlohmann::json::parse_error& e) {
    if (op != nullptr) *op = nullptr;
    SetLastErrorMessage(
        Concat(opName, ": params are not valid JSON (at byte ", e.byte, "): ", e.what()));
    return ERROR_INVALID_PARAM;
  } catch (const nlohmann::json::exception& e) {  // out_of_range 406: a number such as 1e400
    if (op != nullptr) *op = nullptr;
    SetLastErrorMessage(Concat(opName, ": params are not valid JSON: ", e.what()));
    return ERROR_INVALID_PARAM;
  }
  return CreateOperation(opName, param, op);
}

Status CreateOperation(const std::string& opName, const char* paramJson, Operation** op) {
  return CreateOperation(opName, std::string(paramJson == nullptr ? "" : paramJson), op);
}

Status DestroyOperation(Operation* op) {
  delete op;
  return NO_ERROR;
}

OperationPtr MakeOperation(const std::string& opName, const nlohmann::json& param,
                           Communicator* comm) {
  Operation* op = nullptr;
  const Status status = CreateOperation(opName, param, comm, &op);
  if (status != NO_ERROR) throw Error(status, LastErrorMessage());
  return OperationPtr(op);
}

}  // namespace collops
