// Kernels of torch's c10d and _c10d_functional ops for the CPU tensors that are not plain: sparse
// COO (SparseCPU), sparse compressed (SparseCsrCPU: CSR, CSC, BSR, BSC), mkldnn (MkldnnCPU),
// quantized (QuantizedCPU) and nested (NestedTensorCPU, and AutogradNestedTensor, where a nested
// tensor's call may stop first).
//
// torch.distributed hands every collective to its group's backend through an op of the c10d
// library (c10d::broadcast_, c10d::allgather_, c10d::send, ...), whose kernels torch registers for
// CPU, CUDA and PrivateUse1 tensors only, plus SparseCPU/SparseCUDA for allreduce_. A call with a
// tensor of another kind therefore stops in the dispatcher with NotImplementedError on that rank
// alone, before any backend sees it, and its peers, whose strided tensors did reach the backend,
// wait there for the group's timeout.
//
// c10d ops, sparse and mkldnn tensors: the kernels here run the op's CPU kernel instead, which
// calls the group's CPU backend exactly as it does for a strided tensor: a "collops" group then
// refuses the tensor and tells its peers (CollopsBackend::CheckEntry, the backend's send/recv
// refusal), and every other backend gets the call and applies its own checks (gloo refuses such
// tensors by name).
//
// c10d ops, quantized and nested tensors: these are strided, so a backend's layout checks would
// pass them on to code that reads one plain buffer (gloo would move a quantized tensor's integers
// without its scale). Their kernels run the CPU kernel only when the call goes to collops's
// backend, which refuses them and tells its peers; on any other group they raise the
// NotImplementedError the dispatcher raised there before, its message as torch wrote it.
//
// _c10d_functional ops (the functional collectives), sparse, mkldnn and nested tensors: their one
// kernel (CompositeExplicitAutograd) stops such a tensor on this rank, or they have none. On
// collops the kernels here refuse it and tell the peers (RefuseOnCollops); on any other group
// they do what torch did. A quantized tensor reaches a c10d op, refused there.
//
// What torch does at each key is read while the library loads (python/collops/_library.py imports
// torch's functional collectives first, for their Python registrations). A strided tensor of
// plain values never dispatches to these keys, so no backend's behaviour for one changes, and
// where torch has a kernel of its own for one of these keys (allreduce_ on SparseCPU) it stays:
// only the (op, key) pairs without one are filled, for every op of the two libraries that takes
// a group, so an op torch adds is covered too.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collops_backend.h"
#include "collops_backend_tensors.h"
#include "tensor_layout.h"

namespace collops {
namespace {

// Where the op's group is among its arguments (a ProcessGroup, or for _c10d_functional its
// group_name: a name or a ProcessGroup), or -1.
int GroupArgument(const c10::OperatorHandle& op) {
  const std::vector<c10::Argument>& args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() == "group_name" ||
        args[i].type()->str().find("c10d.ProcessGroup") != std::string::npos)
      return static_cast<int>(i);
  }
  return -1;
}

// The collops backend the call's tensors go to: its group's CPU backend when that is collops's
// and every tensor of the call is on the CPU (a nested tensor on a GPU dispatches to
// AutogradNestedTensor too, and goes to the group's GPU backend); else null.
CollopsBackend* CollopsServing(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& arg : args) {
    if (arg.isTensor() && !arg.toTensor().device().is_cpu()) return nullptr;
    if (arg.isTensorList()) {
      for (const at::Tensor& t : arg.toTensorList()) {
        if (!t.device().is_cpu()) return nullptr;
      }
    }
  }
  const c10::IValue& group = args[GroupArgument(op)];
  try {
    if (group.isString()) return CollopsOf(*c10d::resolve_process_group(group.toStringRef()));
    if (group.isCustomClass()) return CollopsOf(*group.toCustomClass<c10d::ProcessGroup>());
  } catch (const c10::Error&) {
    // No such group: torch's own kernel says so.
  }
  return nullptr;
}

// The op's CPU kernel, whatever key dispatched here: for a c10d op torch's kernel that calls the
// group's CPU backend, for a _c10d_functional op its CompositeExplicitAutograd kernel, the one
// that also serves the keys registered over it here.
void RunCpuKernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// The dispatcher's error for each (op, key) that had no kernel before one below, as it raised it:
// read once, while the library loads, and only read after.
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

// What torch does at `keys` without the kernel collops registered there: its
// CompositeExplicitAutograd kernel where that served the key; at AutogradNestedTensor the autograd
// kernel registered for every autograd key (torch.distributed._functional_collectives registers
// one for some _c10d_functional ops when imported, after collops may have loaded); else the
// dispatcher's error it raised.
void TorchsOwn(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::DispatchKey key = keys.highestPriorityTypeId();
  if (key == c10::DispatchKey::AutogradNestedTensor &&
      op.hasKernelForDispatchKey(c10::DispatchKey::Autograd)) {
    op.redispatchBoxed(keys.remove(key).add(c10::DispatchKey::AutogradCPU), stack);
    return;
  }
  const auto found = TorchRefusals().find({c10::toString(op.operator_name()), key});
  if (found == TorchRefusals().end()) {
    RunCpuKernel(op, keys, stack);
    return;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, found->second);
}

// c10d ops, quantized and nested tensors: the CPU kernel when the call goes to collops's backend,
// which refuses such a tensor and tells the peers; on any other group torch's own error.
void RunCpuKernelOnCollops(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                           torch::jit::Stack* stack) {
  if (CollopsServing(op, torch::jit::last(*stack, op.schema().arguments().size())) != nullptr) {
    RunCpuKernel(op, keys, stack);
    return;
  }
  TorchsOwn(op, keys, stack);
}

// Whether every tensor among `args` is strided and plain (not quantized, not nested).
bool AllPlain(c10::ArrayRef<c10::IValue> args) {
  const auto plain = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !IsQuantizedOrNested(t);
  };
  for (const c10::IValue& arg : args) {
    if (arg.isTensor() && !plain(arg.toTensor())) return false;
    if (arg.isTensorList()) {
      for (const at::Tensor& t : arg.toTensorList()) {
        if (!plain(t)) return false;
      }
    }
  }
  return true;
}

// The point-to-point _c10d_functional ops (isend, irecv, batch_p2p_ops) on collops: each tensor
// handed to the backend's send or recv, which queue a refusal for one that is not plain (it tells
// the peer when run) and the rest as they are; all run on the first wait, which raises this
// rank's refusal. torch's kernel would stop a sparse or mkldnn tensor first, on this rank alone.
void SendAndReceiveOnCollops(CollopsBackend& collops, const std::string& name,
                             c10::ArrayRef<c10::IValue> args) {
  std::vector<std::string> kinds;
  std::vector<int64_t> peers, tags;
  std::vector<at::Tensor> tensors;
  if (name == "_c10d_functional::batch_p2p_ops") {
    for (const c10::IValue& kind : args[0].toListRef()) kinds.push_back(kind.toStringRef());
    peers = args[1].toIntVector();
    tags = args[2].toIntVector();
    tensors = args[3].toTensorVector();
  } else {
    kinds = {name == "_c10d_functional::isend" ? "isend" : "irecv"};
    peers = {args[1].toInt()};
    tags = {args[2].toInt()};
    tensors = {args[0].toTensor()};
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<at::Tensor> one{tensors[i]};
    const int peer = static_cast<int>(peers.at(i));
    const int tag = static_cast<int>(tags.at(i));
    works.push_back(kinds.at(i) == "isend" ? collops.send(one, peer, tag)
                                           : collops.recv(one, peer, tag));
  }
  for (const auto& work : works) work->wait();
}

// _c10d_functional ops with a tensor that is not plain (sparse, mkldnn, nested): torch's kernel
// stops it on this rank ("unsupported memory format option Contiguous", "Cannot access storage")
// or has none, and the peers wait. When the call goes to collops's backend, the backend's checks
// refuse it by name here and tell the peers (CollopsBackend::Refusable), which are in the group's
// collective for this call, or the peer of a send or receive; on any other group, torch's own
// kernel or error.
void RefuseOnCollops(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& schema = op.schema().arguments();
  const auto args = torch::jit::last(*stack, schema.size());
  CollopsBackend* collops = CollopsServing(op, args);
  if (collops == nullptr || AllPlain(args)) {
    TorchsOwn(op, keys, stack);
    return;
  }
  const std::string& name = op.schema().name();
  if (name == "_c10d_functional::isend" || name == "_c10d_functional::irecv" ||
      name == "_c10d_functional::batch_p2p_ops") {
    SendAndReceiveOnCollops(*collops, name, args);
  } else {
    const std::string what = "_c10d_functional." + name.substr(sizeof("_c10d_functional::") - 1);
    collops->Refusable(what.c_str(), [&] {
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].isTensor())
          CheckCpu(args[i].toTensor(), what.c_str(), schema[i].name().c_str());
        if (args[i].isTensorList())
          CheckCpu(args[i].toTensorList().vec(), what.c_str(), schema[i].name().c_str());
      }
    });
  }
  TORCH_INTERNAL_ASSERT(false, "collops backend: ", name,
                        " did not refuse a tensor that is not plain");
}

// The ops of `library` ("c10d::" or "_c10d_functional::") that take a group and for which
// `wanted(op)` holds.
template <class Wanted>
std::vector<c10::OperatorHandle> OpsOf(const std::string& library, Wanted wanted) {
  std::vector<c10::OperatorHandle> ops;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind(library, 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (op && op->hasSchema() && GroupArgument(*op) >= 0 && wanted(*op)) ops.push_back(*op);
  }
  return ops;
}

template <c10::BoxedKernel::BoxedKernelFunction_withDispatchKeys* kKernel>
torch::CppFunction Kernel() {
  return torch::CppFunction::makeFromBoxedFunction<kKernel>();
}

// One key's kernel for `ops` of one library.
struct Fill {
  const char* library;
  c10::DispatchKey key;
  torch::CppFunction (*kernel)();
  std::vector<c10::OperatorHandle> ops;
};

std::vector<std::unique_ptr<torch::Library>> RegisterAll() {
  using c10::DispatchKey;
  std::vector<Fill> fills;
  // c10d ops: torch's CPU kernel hands any tensor to the group's CPU backend.
  for (DispatchKey key : {DispatchKey::SparseCPU, DispatchKey::SparseCsrCPU, DispatchKey::MkldnnCPU,
                          DispatchKey::QuantizedCPU, DispatchKey::NestedTensorCPU,
                          DispatchKey::AutogradNestedTensor}) {
    const bool layout = key == DispatchKey::SparseCPU || key == DispatchKey::SparseCsrCPU ||
                        key == DispatchKey::MkldnnCPU;
    fills.push_back({"c10d", key, layout ? &Kernel<&RunCpuKernel> : &Kernel<&RunCpuKernelOnCollops>,
                     OpsOf("c10d::", [key](const c10::OperatorHandle& op) {
                       return op.hasKernelForDispatchKey(DispatchKey::CPU) &&
                              !op.hasComputedKernelForDispatchKey(key);
                     })});
  }
  // _c10d_functional ops: the layouts their CompositeExplicitAutograd kernel serves (and stops),
  // and the nested keys where they have no kernel (an op torch's functional collectives gave an
  // autograd kernel passes AutogradNestedTensor and stops at NestedTensorCPU).
  for (DispatchKey key : {DispatchKey::SparseCPU, DispatchKey::SparseCsrCPU, DispatchKey::MkldnnCPU,
                          DispatchKey::NestedTensorCPU, DispatchKey::AutogradNestedTensor}) {
    const bool nested =
        key == DispatchKey::NestedTensorCPU || key == DispatchKey::AutogradNestedTensor;
    fills.push_back({"_c10d_functional", key, &Kernel<&RefuseOnCollops>,
                     OpsOf("_c10d_functional::", [key, nested](const c10::OperatorHandle& op) {
                       return op.hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutograd) &&
                              !op.hasKernelForDispatchKey(DispatchKey::CPU) &&
                              !op.hasKernelForDispatchKey(key) &&
                              op.hasComputedKernelForDispatchKey(key) != nested;
                     })});
  }
  // torch's errors before any kernel here is registered: its message lists the registered ones.
  for (const Fill& fill : fills) {
    for (const c10::OperatorHandle& op : fill.ops) {
      if (!op.hasComputedKernelForDispatchKey(fill.key))
        TorchRefusals()[{c10::toString(op.operator_name()), fill.key}] =
            DispatcherError(op, fill.key);
    }
  }
  std::vector<std::unique_ptr<torch::Library>> libraries;
  for (const Fill& fill : fills) {
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, fill.library, fill.key,
                                                    __FILE__, static_cast<uint32_t>(__LINE__));
    for (const c10::OperatorHandle& op : fill.ops)
      library->impl(c10::toString(op.operator_name()).c_str(), fill.kernel());
    libraries.push_back(std::move(library));
  }
  return libraries;
}

// Registered when the library is loaded (import collops), after torch's own registrations, which
// libtorch's loading ran; kept for the life of the process.
const std::vector<std::unique_ptr<torch::Library>> kRegistered = RegisterAll();

}  // namespace
}  // namespace collops
