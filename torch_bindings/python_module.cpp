// The Python module `_c10d` that libcollops_torch.so exports beside its torch registrations:
// the "collops" backend's factory and what Python reaches beyond it. collops/_c10d_backend.py
// imports it from this same library file and registers the factory with
// torch.distributed.Backend.register_backend.
#include <ATen/DLConvertor.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "collops/context.h"
#include "collops/version.h"
#include "collops_backend.h"
#include "functional_ops.h"
#include "operation_torch_methods.h"
#include "python_kernels.h"

// The same holder declaration torch's own bindings use, so intrusive_ptr<Backend> converts to the
// torch._C._distributed_c10d.Backend type torch registered.
PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true)

namespace collops {
namespace {

// The group's timeout in seconds when the caller chose one; 0 when it is torch's default (what
// every group gets from an init_process_group or new_group without timeout=), so COLLOPS_TIMEOUT
// (default 300 s) stays in charge rather than torch's 30 minutes.
double ChosenTimeoutSeconds(const pybind11::object& timeout) {
  if (timeout.is_none()) return 0;
  const pybind11::object fallback =
      pybind11::module_::import("torch.distributed.constants").attr("default_pg_timeout");
  if (timeout.equal(fallback)) return 0;
  const double seconds = timeout.attr("total_seconds")().cast<double>();
  TORCH_CHECK(seconds > 0, "collops backend: the process group's timeout must be positive, got ",
              seconds, " s");
  return seconds;
}

c10::intrusive_ptr<c10d::Backend> CreateBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                int rank, int size,
                                                const pybind11::object& timeout) {
  return c10::make_intrusive<CollopsBackend>(store, rank, size, ChosenTimeoutSeconds(timeout));
}

CollopsBackend& AsCollops(const c10::intrusive_ptr<c10d::Backend>& backend, const char* what) {
  auto* collops = dynamic_cast<CollopsBackend*>(backend.get());
  TORCH_CHECK(collops != nullptr, what, ": ", backend->getBackendName(),
              " is not a collops backend");
  return *collops;
}

std::string CommunicatorName(const c10::intrusive_ptr<c10d::Backend>& backend) {
  return AsCollops(backend, "communicator_name").CommunicatorName();
}

// EmptySharedBytes of a collops group's backend, handed to Python as a DLPack capsule
// (torch.from_dlpack): a tensor return would need torch_python's pybind casters.
pybind11::capsule EmptySharedBytes(const c10::intrusive_ptr<c10d::Backend>& backend,
                                   int64_t bytes) {
  CollopsBackend& collops = AsCollops(backend, "empty_shared");
  TORCH_CHECK(bytes >= 0, "empty_shared: ", bytes, " bytes");
  at::Tensor memory;
  {
    // Without the GIL, as communicator_name: creating the communicator may need it elsewhere.
    pybind11::gil_scoped_release release;
    memory = collops.EmptySharedBytes(bytes);
  }
  DLManagedTensor* managed = at::toDLPack(memory);
  return pybind11::capsule(managed, "dltensor", [](PyObject* capsule) {
    // Still named "dltensor" only when nobody consumed it (from_dlpack renames it).
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* unused = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      if (unused->deleter != nullptr) unused->deleter(unused);
    }
  });
}

}  // namespace
}  // namespace collops

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "The collops torch.distributed backend factory, and what Python reaches beyond it.";
  pybind11::module_::import("torch.distributed");  // registers the Store and Backend types
  m.def("create_backend", &collops::CreateBackend, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"));
  // Without the GIL: a collective creating the communicator holds the backend's lock and may need
  // the GIL (gloo groups are made through Python) while this waits for that lock.
  m.def("communicator_name", &collops::CommunicatorName, pybind11::arg("backend"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "The engine a collops group's backend runs on: \"lccl\" on one host, "
        "\"hccl(lccl+c10d)\" across hosts, \"\" before its first collective.");
  m.def(
      "empty_shared_bytes", &collops::EmptySharedBytes, pybind11::arg("backend"),
      pybind11::arg("bytes"),
      "A DLPack capsule of `bytes` uint8 that the group's lccl communicator moves with one copy.");
  m.def("functional_ops", &collops::FunctionalOpNames,
        "The torch.ops.collops ops whose eager and autograd kernels are C++.");
  m.def(
      "set_python_kernel",
      [](const std::string& name, const std::string& kind, pybind11::object fn) {
        TORCH_CHECK(kind == "eager" || kind == "autograd",
                    "set_python_kernel: kind is \"eager\" or \"autograd\", not ", kind);
        collops::SetPythonKernel(
            name,
            kind == "eager" ? collops::PythonKernel::kEager : collops::PythonKernel::kAutograd,
            std::move(fn));
      },
      pybind11::arg("name"), pybind11::arg("kind"), pybind11::arg("fn"),
      "Registers the Python kernel the C++ kernel of torch.ops.collops.<name> hands calls to: "
      "\"eager\" fn(*args) for tensors off a collops group's CPU backend, \"autograd\" "
      "fn(keyset, *args) for calls that record gradients.");
  // Without the GIL: freeing a communicator may wait for threads of it that need the GIL.
  m.def(
      "release_communicators",
      [](const std::optional<std::string>& commDomain) {
        return collops::DefaultContext().Communicators().Release(commDomain);
      },
      pybind11::arg("comm_domain"), pybind11::call_guard<pybind11::gil_scoped_release>(),
      "Drops the default context's communicators of comm_domain (None: all); returns how many.");
  m.def("install_operation_torch_methods", &collops::InstallOperationTorchMethods,
        "Lets OperationTorch objects' execute, execute_out and set_varaintpack_param skip torch's "
        "custom-class call (torch.ScriptObject gets descriptors that answer for OperationTorch "
        "objects alone).");
  m.def(
      "version", [] { return std::string(collops::Version()); },
      "collops::Version() of the libcollops.so loaded: collops.__version__.");
}
