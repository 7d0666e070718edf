// Kernels of torch's c10d ops for the CPU dispatch keys torch registers none for: sparse COO
// (SparseCPU), sparse compressed (SparseCsrCPU: CSR, CSC, BSR, BSC), mkldnn (MkldnnCPU), quantized
// (QuantizedCPU) and nested (NestedTensorCPU, and AutogradNestedTensor, where a nested tensor's
// call stops first).
//
// torch.distributed hands every collective to its group's backend through an op of the c10d
// library (c10d::broadcast_, c10d::allgather_, c10d::send, ...), whose kernels torch registers for
// CPU, CUDA and PrivateUse1 tensors only, plus SparseCPU/SparseCUDA for allreduce_. A call with a
// tensor of another kind therefore stops in the dispatcher with NotImplementedError on that rank
// alone, before any backend sees it, and its peers, whose strided tensors did reach the backend,
// wait there for the group's timeout.
//
// Sparse and mkldnn tensors: the kernels here run the op's CPU kernel instead, which calls the
// group's CPU backend exactly as it does for a strided tensor: a "collops" group then refuses the
// tensor and tells its peers (CollopsBackend::CheckEntry, the backend's send/recv refusal), and
// every other backend gets the call and applies its own checks (gloo refuses such tensors by
// name).
//
// Quantized and nested tensors are strided, so a backend's layout checks would pass them on to
// code that reads one plain buffer (gloo would move a quantized tensor's integers without its
// scale). Their kernels run the CPU kernel only when the group's CPU backend is collops's, which
// refuses them and tells its peers; on any other group they raise the NotImplementedError the
// dispatcher raised there before, its message as torch wrote it.
//
// A strided tensor of plain values never dispatches to these keys, so no backend's behaviour for
// one changes, and where torch has a kernel for one of these keys (allreduce_ on SparseCPU) it
// stays: only the missing (op, key) pairs are filled, for every c10d op that takes a process
// group, so an op torch adds is covered too.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collops_backend.h"

namespace collops {
namespace {

// Where the op's ProcessGroup is among its arguments, or -1.
int ProcessGroupArgument(const c10::OperatorHandle& op) {
  const std::vector<c10::Argument>& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].type()->str().find("c10d.ProcessGroup") != std::string::npos)
      return static_cast<int>(i);
  }
  return -1;
}

// The op's CPU kernel, whatever key dispatched here.
void RunCpuKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// The dispatcher's error for each (op, key) whose kernel below replaced none, as it raised it
// before: read once, while the library loads, and only read after.
using Refusals = std::map<std::pair<std::string, c10::DispatchKey>, std::string>;
Refusals& TorchRefusals() {
  static Refusals refusals;
  return refusals;
}

// The text of the dispatcher's error for `op` at `key`, which has no kernel: looking the kernel
// up raises it before the (empty) stack is read.
std::string DispatcherError(const c10::OperatorHandle& op, c10::DispatchKey key) {
  torch::jit::Stack empty;
  try {
    op.redispatchBoxed(c10::DispatchKeySet(key), &empty);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// The op's CPU kernel when its group's CPU tensors go to the collops backend, which refuses a
// quantized or nested tensor and tells the peers; on any other group torch's own error.
void RunCpuKernelOnCollops(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                           torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const int at = ProcessGroupArgument(op);
  const c10::IValue& group = (*stack)[stack->size() - n + at];
  if (CollopsOf(*group.toCustomClass<c10d::ProcessGroup>()) != nullptr) {
    RunCpuKernel(op, keys, stack);
    return;
  }
  const c10::DispatchKey key = keys.highestPriorityTypeId();
  const auto found = TorchRefusals().find({c10::toString(op.operator_name()), key});
  if (found != TorchRefusals().end() && !found->second.empty())
    TORCH_CHECK_NOT_IMPLEMENTED(false, found->second);
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.operator_name(),
                              "' with arguments from the '", key, "' backend");
}

// The c10d ops that take a process group and have a CPU kernel but none for `key`.
std::vector<c10::OperatorHandle> OpsMissing(c10::DispatchKey key) {
  std::vector<c10::OperatorHandle> ops;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("c10d::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !op->hasSchema() || ProcessGroupArgument(*op) < 0) continue;
    if (op->hasKernelForDispatchKey(c10::DispatchKey::CPU) && !op->hasKernelForDispatchKey(key))
      ops.push_back(*op);
  }
  return ops;
}

template <c10::BoxedKernel::BoxedKernelFunction_withDispatchKeys* kKernel>
std::unique_ptr<torch::Library> RegisterKernels(c10::DispatchKey key,
                                                const std::vector<c10::OperatorHandle>& ops) {
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "c10d", key, __FILE__,
                                                  static_cast<uint32_t>(__LINE__));
  for (const c10::OperatorHandle& op : ops) {
    library->impl(c10::toString(op.operator_name()).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<kKernel>());
  }
  return library;
}

std::vector<std::unique_ptr<torch::Library>> RegisterAll() {
  const c10::DispatchKey forwarded[] = {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparseCsrCPU,
                                        c10::DispatchKey::MkldnnCPU};
  const c10::DispatchKey collopsOnly[] = {c10::DispatchKey::QuantizedCPU,
                                          c10::DispatchKey::NestedTensorCPU,
                                          c10::DispatchKey::AutogradNestedTensor};
  std::vector<std::pair<c10::DispatchKey, std::vector<c10::OperatorHandle>>> missing;
  for (c10::DispatchKey key : collopsOnly) missing.emplace_back(key, OpsMissing(key));
  // torch's errors before any kernel here is registered: its message lists the registered ones.
  for (const auto& [key, ops] : missing) {
    for (const c10::OperatorHandle& op : ops)
      TorchRefusals()[{c10::toString(op.operator_name()), key}] = DispatcherError(op, key);
  }
  std::vector<std::unique_ptr<torch::Library>> libraries;
  for (c10::DispatchKey key : forwarded)
    libraries.push_back(RegisterKernels<&RunCpuKernel>(key, OpsMissing(key)));
  for (const auto& [key, ops] : missing)
    libraries.push_back(RegisterKernels<&RunCpuKernelOnCollops>(key, ops));
  return libraries;
}

// Registered when the library is loaded (import collops), after torch's own registrations, which
// libtorch's loading ran; kept for the life of the process.
const std::vector<std::unique_ptr<torch::Library>> kRegistered = RegisterAll();

}  // namespace
}  // namespace collops
