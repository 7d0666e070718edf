#include "python_kernels.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace collops {
namespace {

// The registered functions. Their references are never dropped: the interpreter may be gone by
// the time static destructors would drop them.
struct Registry {
  std::mutex mu;
  std::map<std::pair<std::string, PythonKernel>, PyObject*> kernels;
};

Registry& Kernels() {
  static Registry* registry = new Registry();
  return *registry;
}

// "collops::all_reduce" -> "all_reduce".
std::string ShortName(const c10::OperatorHandle& op) {
  const std::string& full = op.operator_name().name;
  const size_t at = full.find("::");
  return at == std::string::npos ? full : full.substr(at + 2);
}

PyObject* Find(const c10::OperatorHandle& op, PythonKernel kind) {
  Registry& r = Kernels();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.kernels.find({ShortName(op), kind});
  return it == r.kernels.end() ? nullptr : it->second;
}

// One argument as torch's own Python kernels receive it: a ScalarType argument, which the stack
// holds as an int, as its torch.dtype.
pybind11::object ToPython(const c10::Argument& argument, c10::IValue value) {
  if (argument.real_type()->kind() == c10::ScalarTypeType::Kind && value.isInt()) {
    auto* dtype =
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<at::ScalarType>(value.toInt())));
    return pybind11::reinterpret_borrow<pybind11::object>(dtype);
  }
  return torch::jit::toPyObject(std::move(value));
}

}  // namespace

void SetPythonKernel(const std::string& name, PythonKernel kind, pybind11::object fn) {
  Registry& r = Kernels();
  std::lock_guard<std::mutex> lock(r.mu);
  PyObject*& slot = r.kernels[{name, kind}];
  // The replaced one stays referenced: a call on another thread may be running it.
  slot = fn.release().ptr();
}

bool HasPythonKernel(const c10::OperatorHandle& op, PythonKernel kind) {
  return Find(op, kind) != nullptr;
}

void CallPythonKernel(const c10::OperatorHandle& op, PythonKernel kind,
                      std::optional<c10::DispatchKeySet> keyset, torch::jit::Stack* stack) {
  PyObject* fn = Find(op, kind);
  TORCH_CHECK(fn != nullptr, op.operator_name(), ": collops registered no Python ",
              kind == PythonKernel::kEager ? "kernel" : "autograd kernel",
              " for this call (import collops registers them)");
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  pybind11::gil_scoped_acquire gil;
  pybind11::tuple args(n + (keyset ? 1 : 0));
  size_t i = 0;
  if (keyset) args[i++] = pybind11::cast(*keyset);
  for (size_t k = 0; k < n; ++k) {
    args[i++] = ToPython(schema.arguments()[k], std::move(*(stack->end() - n + k)));
  }
  torch::jit::drop(*stack, n);
  pybind11::object result = pybind11::reinterpret_borrow<pybind11::object>(fn)(*args);
  stack->push_back(torch::jit::toIValue(result, schema.returns().at(0).type()));
}

}  // namespace collops
