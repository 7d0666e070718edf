// The C++ kernels of torch.ops.collops.* (python/collops/ops.py defines the ops, their fake
// kernels and their ordered effect).
//
// Eager (CompositeExplicitAutograd, every device): each call's arguments are checked here, with
// the ValueErrors the ops document. A call whose tensor is on the CPU and whose group serves the
// CPU with the "collops" backend then runs here, on the group's communicator: no Python and no
// Work on its path. Any other call (gloo, nccl, CUDA tensors, torch's debug wrapper around a
// collops group) goes on to the op's Python kernel in ops.py, which builds it from
// torch.distributed.
//
// all_reduce_ is all_reduce in place: x itself is reduced and returned, no output allocated.
// inference_all_reduce(_) are DeepSpeed's shapes of the two: "sum" on the default group, and no
// other argument; the same kernels run them.
//
// quant_all_reduce is AllReduceOperation with quantType: the operation's own checks (ATB's rules)
// run on every call, and on a collops group the operation itself runs, on the group's
// communicator. It has no gradient (x is int8), so no autograd kernel.
//
// Autograd: a call that records no gradient (grad mode off, or x not requiring grad) goes
// straight on to the eager kernel. One that does goes to the autograd kernel _gradients.py makes
// with torch.library's own machinery; registered through torch.library.register_autograd, that
// Python kernel would be on the path of every call, gradients or not.
#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "collops/operation_base.h"
#include "collops/registry.h"
#include "collops/status.h"
#include "collops_backend.h"
#include "dtype_map.h"
#include "functional_ops.h"
#include "op_group_target.h"
#include "ops/ops.h"
#include "python_kernels.h"
#include "reused_outputs.h"
#include "tensor_layout.h"
#include "variant_pack.h"

namespace collops {
namespace {

enum class Op {
  kAllReduce,
  kAllReduceInPlace,
  kAllGather,
  kAllGatherV,
  kReduceScatter,
  kReduceScatterV,
  kAllToAll,
  kAllToAllV,
  kBroadcast,
  kQuantAllReduce,
};

// The ops with kernels here, by their names in ops.py's SCHEMAS: those with gradients, and the
// one without.
const char* const kNames[] = {"all_reduce",   "inference_all_reduce", "all_gather",
                              "all_gather_v", "reduce_scatter",       "reduce_scatter_v",
                              "all_to_all",   "all_to_all_v",         "broadcast"};
constexpr char kQuantAllReduceName[] = "quant_all_reduce";
// all_reduce_: x reduced in place and returned (DeepSpeed's inference_all_reduce_ is this op); no
// gradient (an in-place collective on a tensor autograd tracks is refused), no output allocated.
// inference_all_reduce_ is DeepSpeed's shape of it (x alone: "sum" on the default group).
const char* const kInPlaceNames[] = {"all_reduce_", "inference_all_reduce_"};

// True when `name` is `lower` (lower-case ASCII letters) in any case. Letters are lowered
// without the locale's tolower: the names are ASCII, and every call names one.
bool NameIs(const std::string& name, const char* lower) {
  size_t i = 0;
  for (; i < name.size() && lower[i] != '\0'; ++i) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return i == name.size() && lower[i] == '\0';
}

// A reduce-op name as the ops take it (any case), as torch's ReduceOp; compared in place, as
// every call names one.
c10d::ReduceOp ReduceOpOf(const std::string& name) {
  // The default, as the schema spells it, compared inline first.
  if (name.size() == 3 && std::memcmp(name.data(), "sum", 3) == 0) return c10d::ReduceOp::SUM;
  if (NameIs(name, "sum")) return c10d::ReduceOp::SUM;
  if (NameIs(name, "avg")) return c10d::ReduceOp::AVG;
  if (NameIs(name, "prod") || NameIs(name, "product")) return c10d::ReduceOp::PRODUCT;
  if (NameIs(name, "max")) return c10d::ReduceOp::MAX;
  if (NameIs(name, "min")) return c10d::ReduceOp::MIN;
  TORCH_CHECK_VALUE(false, "collops: unknown reduce op '", name,
                    "'; use one of ['avg', 'max', 'min', 'prod', 'product', 'sum']");
}

// The reduce op of an all_reduce call: its op argument, or "sum" for DeepSpeed's shapes, which
// take x alone.
c10d::ReduceOp AllReduceOpOf(c10::ArrayRef<c10::IValue> args) {
  if (args.size() == 1) return c10d::ReduceOp::SUM;
  return ReduceOpOf(args[1].toStringRef());
}

// The group name of a call: its last argument, or "" (the default group) for DeepSpeed's shapes,
// which take x alone.
const std::string& GroupNameOf(c10::ArrayRef<c10::IValue> args) {
  static const std::string kDefaultGroup;
  return args.back().isString() ? args.back().toStringRef() : kDefaultGroup;
}

// A SymInt[] argument of an eager call (concrete there).
std::vector<int64_t> Sizes(const c10::IValue& v) {
  if (v.isIntList()) return v.toIntVector();
  std::vector<int64_t> out;
  for (const c10::IValue& e : v.toListRef()) {
    out.push_back(e.isSymInt() ? e.toSymInt().guard_int(__FILE__, __LINE__) : e.toInt());
  }
  return out;
}

std::string ListText(const std::vector<int64_t>& v) {
  std::string text = "[";
  for (size_t i = 0; i < v.size(); ++i) text += (i ? ", " : "") + std::to_string(v[i]);
  return text + "]";
}

void CheckSizes(const std::vector<int64_t>& sizes, int64_t world, const char* what) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(sizes.size()) == world, "collops.", what, ": ",
                    sizes.size(), " sizes for a group of ", world, " ranks");
  TORCH_CHECK_VALUE(std::all_of(sizes.begin(), sizes.end(), [](int64_t s) { return s >= 0; }),
                    "collops.", what, ": negative size in ", ListText(sizes));
}

int64_t Rows(const at::Tensor& x, const char* what) {
  TORCH_CHECK_VALUE(x.dim() > 0, "collops.", what,
                    ": needs a tensor of at least 1 dim (its rows are what moves), got a 0-dim "
                    "tensor");
  return x.size(0);
}

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), 0LL); }

// x's shape with `rows` rows.
std::vector<int64_t> WithRows(const at::Tensor& x, int64_t rows) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] = rows;
  return shape;
}

// A new uninitialised output of `sizes` like `x` (CPU, contiguous), of `dtype` (x's when
// Undefined: every op but quant_all_reduce), over the memory of an
// earlier output of this thread that nobody holds any more when there is one (reused_outputs.h):
// a loop that drops each result allocates nothing. Two kept: a layer's two collectives.
at::Tensor NewOutput(c10::IntArrayRef sizes, const at::Tensor& x,
                     c10::ScalarType dtype = c10::ScalarType::Undefined) {
  thread_local ReusedOutputs outputs(2);
  if (dtype == c10::ScalarType::Undefined) dtype = x.scalar_type();
  return outputs.Take(sizes, dtype, [&] { return at::empty(sizes, x.options().dtype(dtype)); });
}

// quant_all_reduce(x, scale, offset, quant_type, out_dtype, group_name): checked by the
// AllReduceOperation it is (its InferShape, on this rank: no data moves), then run as that
// operation on a collops group; nullopt for any other group.
std::optional<at::Tensor> QuantAllReduce(const c10d::ProcessGroup& group, CollopsBackend* collops,
                                         c10::ArrayRef<c10::IValue> args) {
  const std::vector<at::Tensor> ins{args[0].toTensor(), args[1].toTensor(), args[2].toTensor()};
  const int64_t quantType = args[3].toInt();
  const at::ScalarType outDtype = args[4].toScalarType();
  TORCH_CHECK_VALUE(quantType == AllReduceParam::QUANT_TYPE_PER_TENSOR ||
                        quantType == AllReduceParam::QUANT_TYPE_PER_CHANNEL,
                    "collops.quant_all_reduce: quant_type = ", quantType,
                    " is not 1 (per tensor) or 2 (per channel)");
  TORCH_CHECK_VALUE(outDtype == at::kHalf || outDtype == at::kBFloat16 || outDtype == at::kFloat,
                    "collops.quant_all_reduce: out_dtype = torch.",
                    c10::getDtypeNames(outDtype).first,
                    " is not one of torch.float16, torch.bfloat16, torch.float32");
  // A collops group keeps the operation (its Setup is reused call after call); another group's
  // is made for this call's checks only.
  OperationPtr made;
  Operation* op = nullptr;
  if (collops != nullptr) {
    op = &collops->QuantAllReduceOperation(static_cast<int>(quantType), CollopsDtypeOf(outDtype));
  } else {
    made = NewQuantAllReduce(static_cast<int>(group.getRank()), static_cast<int>(group.getSize()),
                             static_cast<int>(quantType), CollopsDtypeOf(outDtype), nullptr);
    op = made.get();
  }
  std::vector<TensorDesc> outDescs;
  const Status checked = Guarded([&] {
    const Status inferred = op->InferShape(InputDescs(ins), outDescs);
    if (inferred != NO_ERROR) throw Error(inferred, LastErrorMessage());
  });
  if (checked != NO_ERROR) {
    const std::string message = LastErrorMessage();
    // The peers of a collops group may be in this call's agreement check already: they fail at
    // once instead of waiting for this rank until the timeout.
    auto* base = dynamic_cast<OperationBase*>(op);
    if (collops != nullptr && base != nullptr) base->ShareFailure(checked, nullptr);
    TORCH_CHECK_VALUE(false, "collops.quant_all_reduce: ", message);
  }
  if (!collops) return std::nullopt;
  const std::vector<at::Tensor> dense = DenseInputs(ins);
  std::vector<at::Tensor> outs{NewOutput(ins[0].sizes(), ins[0], outDtype)};
  VariantPack pack;
  const Status packed = Guarded([&] { pack = BuildVariantPack(dense, outs, HostCountBinding()); });
  TORCH_CHECK(packed == NO_ERROR, "collops.quant_all_reduce: ", LastErrorMessage());
  collops->RunOperation(*op, pack);
  return outs[0];
}

// Every tensor argument of the call `op` is dense, whatever the group: the kernels here and in
// ops.py read a tensor's memory as one flat buffer. Refused on this rank before any data moves.
void CheckDense(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const std::vector<c10::Argument>& schema = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].isTensor()) continue;
    const at::Tensor& t = args[i].toTensor();
    if (!t.defined()) continue;
    const auto name = [&] {
      return op.schema().operator_name().name.substr(sizeof("collops::") - 1);
    };
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "collops.", name(), ": ", schema[i].name(),
                      NotDenseText(t));
    TORCH_CHECK_VALUE(!IsQuantizedOrNested(t), "collops.", name(), ": ", schema[i].name(),
                      NotPlainText(t));
  }
}

// One call's arguments, checked, and its output if this kernel runs it.
template <Op kOp>
std::optional<at::Tensor> Run(const c10d::ProcessGroup& group, CollopsBackend* collops,
                              c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& x = args[0].toTensor();
  const int64_t world = group.getSize();
  const int64_t rank = group.getRank();
  switch (kOp) {
    case Op::kAllReduce: {
      const c10d::ReduceOp op = AllReduceOpOf(args);
      if (!collops) return std::nullopt;
      at::Tensor out = NewOutput(x.sizes(), x);
      collops->AllReduceInto(x, out, op);
      return out;
    }
    case Op::kAllReduceInPlace: {
      const c10d::ReduceOp op = AllReduceOpOf(args);
      if (!collops) return std::nullopt;
      at::Tensor t = x;  // x itself (its TensorImpl), which the op returns
      collops->AllReduceInPlace(t, op);
      return t;
    }
    case Op::kAllGather: {
      const int64_t rows = Rows(x, "all_gather");
      if (!collops) return std::nullopt;
      at::Tensor out = NewOutput(WithRows(x, world * rows), x);
      at::Tensor in = x.contiguous();
      collops->_allgather_base(out, in, c10d::AllgatherOptions());
      return out;
    }
    case Op::kAllGatherV: {
      const std::vector<int64_t> sizes = Sizes(args[1]);
      CheckSizes(sizes, world, "all_gather_v");
      const int64_t rows = Rows(x, "all_gather_v");
      TORCH_CHECK_VALUE(sizes[rank] == rows, "collops.all_gather_v: sizes[", rank,
                        "] = ", sizes[rank], " but this rank's input has ", rows, " rows");
      if (!collops) return std::nullopt;
      at::Tensor out = NewOutput(WithRows(x, Sum(sizes)), x);
      std::vector<std::vector<at::Tensor>> outs{out.split_with_sizes(sizes)};
      std::vector<at::Tensor> ins{x.contiguous()};
      collops->allgather(outs, ins, c10d::AllgatherOptions());
      return out;
    }
    case Op::kReduceScatter: {
      const c10d::ReduceOp op = ReduceOpOf(args[1].toStringRef());
      const int64_t rows = Rows(x, "reduce_scatter");
      TORCH_CHECK_VALUE(rows % world == 0, "collops.reduce_scatter: ", rows,
                        " rows do not split over ", world, " ranks; use reduce_scatter_v");
      if (!collops) return std::nullopt;
      at::Tensor out = NewOutput(WithRows(x, rows / world), x);
      at::Tensor in = x.contiguous();
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = op;
      collops->_reduce_scatter_base(out, in, opts);
      return out;
    }
    case Op::kReduceScatterV: {
      const std::vector<int64_t> sizes = Sizes(args[1]);
      const c10d::ReduceOp op = ReduceOpOf(args[2].toStringRef());
      CheckSizes(sizes, world, "reduce_scatter_v");
      const int64_t rows = Rows(x, "reduce_scatter_v");
      TORCH_CHECK_VALUE(Sum(sizes) == rows, "collops.reduce_scatter_v: sizes sum to ", Sum(sizes),
                        " but the input has ", rows, " rows");
      if (!collops) return std::nullopt;
      std::vector<at::Tensor> outs{NewOutput(WithRows(x, sizes[rank]), x)};
      std::vector<std::vector<at::Tensor>> ins{x.split_with_sizes(sizes)};
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = op;
      collops->reduce_scatter(outs, ins, opts);
      return outs[0];
    }
    case Op::kAllToAll: {
      if (!collops) return std::nullopt;
      at::Tensor out = NewOutput(x.sizes(), x);
      at::Tensor in = x.contiguous();
      std::vector<int64_t> none;
      collops->alltoall_base(out, in, none, none, c10d::AllToAllOptions());
      return out;
    }
    case Op::kAllToAllV: {
      std::vector<int64_t> outSplits = Sizes(args[1]);
      std::vector<int64_t> inSplits = Sizes(args[2]);
      CheckSizes(outSplits, world, "all_to_all_v");
      CheckSizes(inSplits, world, "all_to_all_v");
      if (!collops) return std::nullopt;
      at::Tensor out = NewOutput(WithRows(x, Sum(outSplits)), x);
      at::Tensor in = x.contiguous();
      collops->alltoall_base(out, in, outSplits, inSplits, c10d::AllToAllOptions());
      return out;
    }
    case Op::kBroadcast: {
      if (!collops) return std::nullopt;
      std::vector<at::Tensor> ts{x.clone(at::MemoryFormat::Contiguous)};
      c10d::BroadcastOptions opts;
      opts.rootRank = args[1].toInt();
      collops->broadcast(ts, opts);
      return ts[0];
    }
    case Op::kQuantAllReduce:
      return QuantAllReduce(group, collops, args);
  }
  return std::nullopt;
}

template <Op kOp>
void Eager(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const auto args = torch::jit::last(*stack, n);
  const at::Tensor& x = args[0].toTensor();
  const Target target = TargetNamed(GroupNameOf(args));
  const c10d::ProcessGroup& group = *target.group;
  CollopsBackend* collops = x.device().is_cpu() ? target.collops : nullptr;
  std::optional<at::Tensor> out;
  if (collops != nullptr) {
    // On this group an argument refused on this rank alone is told to the peers, already in the
    // call: the layouts as a refused tensor, every other rule as a refused call.
    const char* name = op.schema().name().c_str();
    collops->Refusable(name, [&] { CheckDense(op, args); });
    collops->TellsRefusal(name, [&] { out = Run<kOp>(group, collops, args); });
  } else {
    CheckDense(op, args);
    out = Run<kOp>(group, collops, args);
  }
  if (!out) {
    CallPythonKernel(op, PythonKernel::kEager, std::nullopt, stack);
    return;
  }
  if constexpr (kOp == Op::kAllReduceInPlace) {  // the result is x, first on the stack already
    torch::jit::drop(*stack, n - 1);
    return;
  }
  torch::jit::drop(*stack, n);
  stack->push_back(std::move(*out));
}

void Autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const at::Tensor& x = torch::jit::peek(*stack, 0, n).toTensor();
  if (c10::GradMode::is_enabled() && x.requires_grad()) {
    CallPythonKernel(op, PythonKernel::kAutograd, keys, stack);
    return;
  }
  at::AutoDispatchBelowAutograd below;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// all_reduce_ (and inference_all_reduce_) records no gradient: a call on a tensor that would need
// one is refused before any data moves. Others run below autograd, and x's version counter moves as
// any in-place op's does, so a saved copy of x that autograd would later read is caught as
// modified.
void AutogradInPlace(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const at::Tensor x = torch::jit::peek(*stack, 0, n).toTensor();
  if (c10::GradMode::is_enabled() && x.requires_grad()) {
    // "all_reduce_" -> "all_reduce": the out-of-place op of the same shape.
    const std::string name = op.schema().name().substr(sizeof("collops::") - 1);
    TORCH_CHECK(false, "collops.", name, ": ", op.schema().arguments()[0].name(),
                " requires grad, and an in-place collective records no gradient; use "
                "torch.ops.collops.",
                name.substr(0, name.size() - 1),
                " (out of place), or call it under torch.no_grad()");
  }
  {
    at::AutoDispatchBelowAutograd below;
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
  }
  if (!x.is_inference()) x.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

std::vector<std::string> FunctionalOpNames() {
  std::vector<std::string> names(std::begin(kNames), std::end(kNames));
  names.emplace_back(kQuantAllReduceName);
  names.insert(names.end(), std::begin(kInPlaceNames), std::end(kInPlaceNames));
  return names;
}

}  // namespace collops

namespace collops {
namespace {

void ImplEager(torch::Library& m) {
  using torch::CppFunction;
  for (const char* name : {"all_reduce", "inference_all_reduce"}) {
    m.impl(name, CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kAllReduce>>());
  }
  for (const char* name : collops::kInPlaceNames) {
    m.impl(name, CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kAllReduceInPlace>>());
  }
  m.impl("all_gather", CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kAllGather>>());
  m.impl("all_gather_v", CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kAllGatherV>>());
  m.impl("reduce_scatter",
         CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kReduceScatter>>());
  m.impl("reduce_scatter_v",
         CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kReduceScatterV>>());
  m.impl("all_to_all", CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kAllToAll>>());
  m.impl("all_to_all_v", CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kAllToAllV>>());
  m.impl("broadcast", CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kBroadcast>>());
  m.impl(collops::kQuantAllReduceName,
         CppFunction::makeFromBoxedFunction<&collops::Eager<Op::kQuantAllReduce>>());
}

}  // namespace
}  // namespace collops

TORCH_LIBRARY_IMPL(collops, CompositeExplicitAutograd, m) { collops::ImplEager(m); }
// Nested tensors, which CompositeExplicitAutograd does not serve: refused by name (CheckDense).
TORCH_LIBRARY_IMPL(collops, NestedTensorCPU, m) { collops::ImplEager(m); }

TORCH_LIBRARY_IMPL(collops, Autograd, m) {
  for (const char* name : collops::kNames) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&collops::Autograd>());
  }
  for (const char* name : collops::kInPlaceNames) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&collops::AutogradInPlace>());
  }
}
