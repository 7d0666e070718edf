// The Python functions the C++ kernels of torch.ops.collops.* hand a call to when they do not run
// it themselves (functional_ops.cpp): the eager kernel for tensors that are not on a "collops"
// group's CPU backend (gloo, nccl, CUDA tensors: python/collops/ops.py builds those from
// torch.distributed), and the autograd kernel for calls that record gradients
// (python/collops/_gradients.py). Python registers them once, through the `_c10d` module
// (python_module.cpp); a call then takes the GIL, converts the stack's values to Python objects
// and back, as torch's own Python kernels do.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

namespace collops {

enum class PythonKernel {
  kEager,     ///< fn(*args) -> result
  kAutograd,  ///< fn(keyset, *args) -> result (torch._library.autograd's autograd kernel)
};

/// Registers `fn` as the `kind` kernel of op "collops::<name>"; a second registration replaces
/// the first. Needs the GIL.
void SetPythonKernel(const std::string& name, PythonKernel kind, pybind11::object fn);

/// Whether a `kind` kernel of `op` is registered.
bool HasPythonKernel(const c10::OperatorHandle& op, PythonKernel kind);

/// Runs the `kind` kernel of `op` on the arguments on `stack` and leaves its result there
/// instead. Takes the GIL; a Python exception comes back as the C++ exception torch turns into
/// the same Python exception. Throws a torch error when no such kernel is registered.
void CallPythonKernel(const c10::OperatorHandle& op, PythonKernel kind,
                      std::optional<c10::DispatchKeySet> keyset, torch::jit::Stack* stack);

}  // namespace collops
