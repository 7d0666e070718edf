// Kernels of torch's c10d ops for CPU tensors that are not strided: sparse COO (SparseCPU), sparse
// compressed (SparseCsrCPU: CSR, CSC, BSR, BSC) and mkldnn (MkldnnCPU).
//
// torch.distributed hands every collective to its group's backend through an op of the c10d
// library (c10d::broadcast_, c10d::allgather_, c10d::send, ...), whose kernels torch registers for
// CPU, CUDA and PrivateUse1 tensors only, plus SparseCPU/SparseCUDA for allreduce_. A call with a
// tensor of another layout therefore stops in the dispatcher with NotImplementedError on that rank
// alone, before any backend sees it, and its peers, whose strided tensors did reach the backend,
// wait there for the group's timeout. The kernels here run the op's CPU kernel instead, which
// calls the group's CPU backend exactly as it does for a strided tensor: a "collops" group then
// refuses the tensor and tells its peers (CollopsBackend::CheckEntry, the backend's send/recv
// refusal), and every other backend gets the call and applies its own checks (gloo refuses such
// tensors by name). A strided tensor never dispatches to these keys, so no backend's behaviour
// for one changes, and where torch has a kernel for one of these keys (allreduce_ on SparseCPU)
// it stays: only the missing (op, key) pairs are filled, for every c10d op that takes a process
// group, so an op torch adds is covered too.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

namespace collops {
namespace {

// The op's CPU kernel, whatever key dispatched here.
void RunCpuKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// Whether the op hands a call to a process group's backend: it takes one.
bool TakesProcessGroup(const c10::OperatorHandle& op) {
  for (const c10::Argument& arg : op.schema().arguments()) {
    if (arg.type()->str().find("c10d.ProcessGroup") != std::string::npos) return true;
  }
  return false;
}

std::vector<std::unique_ptr<torch::Library>> RegisterKernels() {
  const c10::DispatchKey keys[] = {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparseCsrCPU,
                                   c10::DispatchKey::MkldnnCPU};
  std::vector<std::unique_ptr<torch::Library>> libraries;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (c10::DispatchKey key : keys) {
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "c10d", key, __FILE__,
                                                    static_cast<uint32_t>(__LINE__));
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("c10d::", 0) != 0) continue;
      const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
      if (!op || !op->hasSchema() || !TakesProcessGroup(*op)) continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::CPU) || op->hasKernelForDispatchKey(key))
        continue;
      const std::string qualified =
          name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
      library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&RunCpuKernel>());
    }
    libraries.push_back(std::move(library));
  }
  return libraries;
}

// Registered when the library is loaded (import collops), after torch's own registrations, which
// libtorch's loading ran; kept for the life of the process.
const std::vector<std::unique_ptr<torch::Library>> kRegistered = RegisterKernels();

}  // namespace
}  // namespace collops
