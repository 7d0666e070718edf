// The "collops" backend's reducing collectives: allreduce (also bitwise), reduce and
// reduce_scatter in their list, flat and coalesced forms, with torch's ReduceOp mapped to the
// communicator's (collops_backend.h).
#include <ATen/ATen.h>

#include <optional>

#include "collops/reduce.h"
#include "collops_backend.h"
#include "collops_backend_tensors.h"

namespace collops {
namespace {

// ReduceOp's Python name, for messages.
const char* OpName(const c10d::ReduceOp& op) {
  static const char* const kNames[] = {"SUM",  "AVG", "PRODUCT", "MIN",        "MAX",
                                       "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  const auto i = static_cast<size_t>(op.op_);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

bool IsBitwise(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
         op.op_ == c10d::ReduceOp::BXOR;
}

// AVG is SUM followed by a division on every rank (as gloo does for floats).
ReduceOp ToCollopsOp(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG:
      return ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    default:
      TORCH_CHECK(
          false, "collops backend: ", what,
          " supports SUM, AVG, PRODUCT, MIN and MAX (allreduce and reduce also BAND, BOR and "
          "BXOR), not ReduceOp.",
          OpName(op));
  }
}

// The rules of a reduction of `t` with `op` (not BAND, BOR or BXOR), checked on every tensor of
// a call before any of them moves; nothing is allocated.
void CheckReduction(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  // As gloo: complex reduces as (real, imag) pairs, on which only SUM and AVG mean what they do.
  TORCH_CHECK(!t.is_complex() || op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG,
              "collops backend: ", what, " of complex tensors takes SUM or AVG, not ReduceOp.",
              OpName(op));
  const at::ScalarType reduced = c10::toRealValueType(t.scalar_type());
  TORCH_CHECK(op.op_ != c10d::ReduceOp::AVG || at::isFloatingType(reduced),
              "collops backend: ReduceOp.AVG needs a floating-point tensor, got ", t.scalar_type());
  TORCH_CHECK(BackendDtype(reduced).has_value(), "collops backend: reductions support bool and ",
              ReducibleDtypesText(), ", not ", reduced);
  ToCollopsOp(op, what);
}

// allreduce's rules (CheckReduction, or for BAND, BOR and BXOR an integer or bool tensor).
void CheckAllReduce(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  if (!IsBitwise(op)) {
    CheckReduction(t, op, what);
    return;
  }
  TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !t.is_complex(), "collops backend: ", what,
              " with ReduceOp.", OpName(op), " needs an integer or bool tensor, got ",
              t.scalar_type());
}

// What the communicator reduces for a torch reduction of `t` that passed CheckReduction.
struct Reduction {
  at::Tensor data;  ///< `t`, or for complex its (real, imag) view
  int64_t lanes;    ///< elements of `data` per element of `t`
  DataType dtype;
  ReduceOp op;
};

Reduction ReductionOf(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  at::Tensor data = t.is_complex() ? at::view_as_real(t) : t;
  Reduction r{data, t.is_complex() ? 2 : 1, *BackendDtype(data.scalar_type()),
              ToCollopsOp(op, what)};
  // bool as gloo and NCCL reduce it: SUM is logical or, PRODUCT logical and (on 0/1 bytes, max
  // and min), so every result byte stays a valid bool.
  if (t.scalar_type() == at::kBool) {
    if (r.op == ReduceOp::kSum) r.op = ReduceOp::kMax;
    if (r.op == ReduceOp::kProd) r.op = ReduceOp::kMin;
  }
  return r;
}

void FinishAvg(const c10d::ReduceOp& op, at::Tensor& t, int size) {
  if (op.op_ == c10d::ReduceOp::AVG) t.div_(size);
}

// AVG of float16/bfloat16 (and their complex pairs) is summed in float32 and divided there,
// rounding once at the end: a sum rounded to the narrow type first can overflow (two float16
// 60000s would average to inf) or round twice.
bool AvgInFloat32(const c10d::ReduceOp& op, const Reduction& r) {
  return op.op_ == c10d::ReduceOp::AVG && (r.dtype == ACL_FLOAT16 || r.dtype == ACL_BF16);
}

}  // namespace

// A call given several tensors (allreduce and reduce with a list, the coalesced forms) checks
// every tensor's rules before the first moves: a rule broken by a later one, raised once the
// earlier ones moved, would reach this rank alone while its peers wait in the next transfer.
// Run tells the peers of a rule raised before anything moved.
c10::intrusive_ptr<c10d::Work> CollopsBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  CheckEntry("allreduce", tensors, "tensor");
  return Run(c10d::OpType::ALLREDUCE, tensors, [&] {
    for (const auto& t : tensors) CheckAllReduce(t, opts.reduceOp, "allreduce");
    for (auto& t : tensors) AllReduceOne(t, opts.reduceOp);
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  CheckEntry("allreduce", tensors, "tensor");
  return Run(c10d::OpType::ALLREDUCE_COALESCED, tensors, [&] {
    for (const auto& t : tensors) CheckAllReduce(t, opts.reduceOp, "allreduce");
    for (auto& t : tensors) AllReduceOne(t, opts.reduceOp);
  });
}

// Every rank reduces (one AllReduce into scratch); only the root keeps the result.
c10::intrusive_ptr<c10d::Work> CollopsBackend::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  CheckEntry("reduce", tensors, "tensor");
  return Run(c10d::OpType::REDUCE, tensors, [&] {
    for (const auto& t : tensors) CheckAllReduce(t, opts.reduceOp, "reduce");
    for (auto& t : tensors) {
      at::Tensor scratch = t.contiguous().clone();
      AllReduceOne(scratch, opts.reduceOp, "reduce");
      if (getRank() == opts.rootRank) t.copy_(scratch);
    }
  });
}

// List form, sizes may differ per destination: inputs packed by destination, one
// ReduceScatterV whose per-rank counts are the inputs' sizes.
c10::intrusive_ptr<c10d::Work> CollopsBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CheckEntry("reduce_scatter", outputs, "output", inputs, "input_list");
  return Run(c10d::OpType::REDUCE_SCATTER, outputs, [&] {
    CheckSameCount(outputs.size(), inputs.size(), "reduce_scatter", "input list per output");
    for (size_t k = 0; k < outputs.size(); ++k) {
      CheckReduceScatterList(outputs[k], inputs[k], opts.reduceOp);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      std::vector<int64_t> counts, displs;
      at::Tensor packed = Pack(inputs[k], &counts, &displs);
      const int64_t es = outputs[k].element_size();
      for (auto& c : counts) c /= es;
      for (auto& d : displs) d /= es;
      ReduceScatterOne(outputs[k], packed, counts, displs, opts.reduceOp);
    }
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckEntry("reduce_scatter_tensor", input, "input", output, "output");
  return Run(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [&] {
    CheckReduceScatterFlat(output, input, opts.reduceOp);
    ReduceScatterFlat(output, input, opts.reduceOp);
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CheckEntry("reduce_scatter_tensor", inputs, "input", outputs, "output");
  return Run(c10d::OpType::COALESCED, outputs, [&] {
    CheckSameCount(outputs.size(), inputs.size(), "reduce_scatter_tensor", "output per input");
    for (size_t k = 0; k < inputs.size(); ++k) {
      CheckReduceScatterFlat(outputs[k], inputs[k], opts.reduceOp);
    }
    for (size_t k = 0; k < inputs.size(); ++k) {
      ReduceScatterFlat(outputs[k], inputs[k], opts.reduceOp);
    }
  });
}

void CollopsBackend::AllReduceOne(at::Tensor& tensor, const c10d::ReduceOp& op, const char* what) {
  if (IsBitwise(op)) {
    AllReduceBitwise(tensor, op);
    return;
  }
  Reduction r = ReductionOf(tensor, op, what);
  InPlace(r.data, "allreduce", [&](at::Tensor& c) {
    if (AvgInFloat32(op, r)) {
      at::Tensor wide = c.to(at::kFloat).contiguous();
      Comm().AllReduce(wide.data_ptr(), wide.data_ptr(), wide.numel(), ACL_FLOAT, r.op);
      FinishAvg(op, wide, getSize());
      c.copy_(wide);  // the one rounding
      return;
    }
    Comm().AllReduce(c.data_ptr(), c.data_ptr(), c.numel(), r.dtype, r.op);
    FinishAvg(op, c, getSize());
  });
}

void CollopsBackend::AllReduceInto(const at::Tensor& in, at::Tensor& out,
                                   const c10d::ReduceOp& op) {
  TORCH_CHECK(
      out.is_contiguous() && out.sizes() == in.sizes() && out.scalar_type() == in.scalar_type(),
      "collops backend: all_reduce into a tensor of another shape, dtype or layout");
  RunCollective([&] {
    CheckAllReduce(in, op, "all_reduce");
    // Straight from `in` to `out` where the reduction needs no widening or reinterpretation;
    // every other case is the in-place reduction of a copy.
    if (!IsBitwise(op) && !in.is_complex() && in.scalar_type() != at::kBool && in.is_contiguous()) {
      const Reduction r = ReductionOf(in, op, "all_reduce");
      if (!AvgInFloat32(op, r)) {
        Comm().AllReduce(in.data_ptr(), out.data_ptr(), in.numel(), r.dtype, r.op);
        FinishAvg(op, out, getSize());
        return;
      }
    }
    out.copy_(in);
    AllReduceOne(out, op, "all_reduce");
  });
}

void CollopsBackend::AllReduceInPlace(at::Tensor& t, const c10d::ReduceOp& op) {
  RunCollective([&] {
    CheckAllReduce(t, op, "all_reduce_");
    AllReduceOne(t, op, "all_reduce_");
  });
}

// BAND/BOR/BXOR of integer and bool tensors, which gloo computes (a bool BOR is a cheap "any
// rank"): every rank gathers every rank's tensor and folds them in rank order. R times the
// memory of a reduction, but these carry flags and masks, not activations.
void CollopsBackend::AllReduceBitwise(at::Tensor& tensor, const c10d::ReduceOp& op) {
  const at::Tensor in = tensor.contiguous();
  const auto [dtype, es] = MovedAs(in);
  const int64_t n = static_cast<int64_t>(NumBytes(in)) / es;
  const EvenBlocks blocks(getSize(), n);
  at::Tensor all = at::empty({getSize(), in.numel()}, in.options());
  // Agreed on as what it is, with the torch dtype: ranks passing BOR and BAND, a bool and a
  // uint8 tensor, or calling all_gather_into_tensor of the same size must not pair.
  Comm().AllGatherVAs(Concat("AllReduce ", OpName(op), " of ", in.scalar_type()), in.data_ptr(), n,
                      all.data_ptr(), blocks.counts.data(), blocks.displs.data(), dtype);
  at::Tensor folded = all[0].clone();
  for (int i = 1; i < getSize(); ++i) {
    switch (op.op_) {
      case c10d::ReduceOp::BAND:
        folded.bitwise_and_(all[i]);
        break;
      case c10d::ReduceOp::BOR:
        folded.bitwise_or_(all[i]);
        break;
      default:
        folded.bitwise_xor_(all[i]);
        break;
    }
  }
  tensor.copy_(folded.view(tensor.sizes()));
}

void CollopsBackend::ReduceScatterOne(at::Tensor& output, const at::Tensor& in,
                                      std::vector<int64_t> counts, std::vector<int64_t> displs,
                                      const c10d::ReduceOp& op) {
  Reduction r = ReductionOf(output, op, "reduce_scatter");
  for (auto& c : counts) c *= r.lanes;
  for (auto& d : displs) d *= r.lanes;
  InPlace(r.data, "reduce_scatter", [&](at::Tensor& c) {
    if (AvgInFloat32(op, r)) {
      const int64_t n = static_cast<int64_t>(NumBytes(in) / DataTypeSize(r.dtype));
      at::Tensor wideIn =
          n == 0 ? at::empty({0}, at::kFloat)
                 : at::from_blob(in.data_ptr(), {n}, r.data.scalar_type()).to(at::kFloat);
      at::Tensor wide = at::empty({c.numel()}, at::kFloat);
      Comm().ReduceScatterV(wideIn.data_ptr(), counts.data(), displs.data(), wide.data_ptr(),
                            wide.numel(), ACL_FLOAT, r.op);
      FinishAvg(op, wide, getSize());
      c.copy_(wide.view(c.sizes()));  // the one rounding
      return;
    }
    Comm().ReduceScatterV(in.data_ptr(), counts.data(), displs.data(), c.data_ptr(), c.numel(),
                          r.dtype, r.op);
    FinishAvg(op, c, getSize());
  });
}

void CollopsBackend::CheckReduceScatterList(const at::Tensor& output,
                                            const std::vector<at::Tensor>& inputs,
                                            const c10d::ReduceOp& op) const {
  TORCH_CHECK(static_cast<int>(inputs.size()) == getSize(),
              "collops backend: reduce_scatter needs ", getSize(), " inputs, got ", inputs.size());
  for (const auto& t : inputs) {
    TORCH_CHECK(t.scalar_type() == output.scalar_type(),
                "collops backend: reduce_scatter input list has dtype ", t.scalar_type(),
                " but its output has ", output.scalar_type());
  }
  const int64_t slice = inputs[getRank()].numel();
  TORCH_CHECK(slice == output.numel(), "collops backend: reduce_scatter output has ",
              output.numel(), " elements but this rank's slice has ", slice);
  CheckReduction(output, op, "reduce_scatter");
}

void CollopsBackend::CheckReduceScatterFlat(const at::Tensor& output, const at::Tensor& input,
                                            const c10d::ReduceOp& op) const {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "collops backend: reduce_scatter_tensor output has dtype ", output.scalar_type(),
              " but the input has ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "collops backend: reduce_scatter_tensor input has ", input.numel(),
              " elements, expected ", output.numel() * getSize());
  CheckReduction(output, op, "reduce_scatter");
}

void CollopsBackend::ReduceScatterFlat(at::Tensor& output, const at::Tensor& input,
                                       const c10d::ReduceOp& op) {
  const EvenBlocks blocks(getSize(), output.numel());
  ReduceScatterOne(output, input.contiguous(), blocks.counts, blocks.displs, op);
}

}  // namespace collops
