// The "collops" backend's collectives that move data without reducing it: allgather in its list,
// flat and coalesced forms, gather, scatter and all-to-all (collops_backend.h).
#include <ATen/ATen.h>

#include "collops_backend.h"
#include "collops_backend_tensors.h"

namespace collops {
namespace {

std::vector<at::Tensor> Flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> all;
  for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
  return all;
}

}  // namespace

// List form, sizes may differ per rank: one AllGatherV into a byte buffer, then unpack.
c10::intrusive_ptr<c10d::Work> CollopsBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  CheckEntry("allgather", inputs, "tensor", outputs, "tensor_list");
  return Run(c10d::OpType::ALLGATHER, Flatten(outputs), [&] {
    // Every input's rules before the first moves (collops_backend.h).
    CheckSameCount(outputs.size(), inputs.size(), "allgather", "output list per input");
    for (size_t k = 0; k < inputs.size(); ++k) CheckAllGatherList(outputs[k], inputs[k]);
    for (size_t k = 0; k < inputs.size(); ++k) AllGatherList(outputs[k], inputs[k]);
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::_allgather_base(at::Tensor& output,
                                                               at::Tensor& input,
                                                               const c10d::AllgatherOptions&) {
  CheckEntry("all_gather_into_tensor", input, "input_tensor", output, "output_tensor");
  return Run(c10d::OpType::_ALLGATHER_BASE, {output}, [&] {
    CheckAllGatherFlat(output, input);
    AllGatherFlat(output, input);
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  CheckEntry("all_gather_into_tensor", inputs, "input_tensor", outputs, "output_tensor");
  return Run(c10d::OpType::COALESCED, outputs, [&] {
    CheckSameCount(outputs.size(), inputs.size(), "all_gather_into_tensor", "output per input");
    for (size_t k = 0; k < inputs.size(); ++k) CheckAllGatherFlat(outputs[k], inputs[k]);
    for (size_t k = 0; k < inputs.size(); ++k) AllGatherFlat(outputs[k], inputs[k]);
  });
}

// Gather is an AllGatherV into scratch whose result only the root keeps (inputs are equal).
c10::intrusive_ptr<c10d::Work> CollopsBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::GatherOptions& opts) {
  CheckEntry("gather", inputs, "tensor", outputs, "gather_list");
  return Run(c10d::OpType::GATHER, Flatten(outputs), [&] {
    const at::Tensor& in = inputs.at(0);
    at::Tensor all = at::empty({getSize() * in.numel()}, in.options());
    AllGatherFlat(all, in);  // `all` fits: CheckAllGatherFlat's rules hold
    if (getRank() != opts.rootRank) return;
    auto& outs = outputs.at(0);
    TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "collops backend: gather needs ",
                getSize(), " outputs on the root");
    for (int i = 0; i < getSize(); ++i) {
      outs[i].copy_(all.narrow(0, i * in.numel(), in.numel()).view(outs[i].sizes()));
    }
  });
}

// Scatter is an AllToAllV in which only the root sends.
c10::intrusive_ptr<c10d::Work> CollopsBackend::scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ScatterOptions& opts) {
  CheckEntry("scatter", outputs, "tensor", inputs, "scatter_list");
  return Run(c10d::OpType::SCATTER, outputs, [&] {
    at::Tensor& out = outputs.at(0);
    const int root = static_cast<int>(opts.rootRank);
    std::vector<int64_t> send, sdispls;
    at::Tensor buf = at::empty({0}, at::kByte);
    if (getRank() == root) {
      TORCH_CHECK(static_cast<int>(inputs.at(0).size()) == getSize(),
                  "collops backend: scatter needs ", getSize(),
                  " tensors in scatter_list on the root, got ", inputs.at(0).size());
      buf = Pack(inputs.at(0), &send, &sdispls);
    } else {
      send.assign(getSize(), 0);
      sdispls.assign(getSize(), 0);
    }
    std::vector<int64_t> recv(getSize(), 0), rdispls(getSize(), 0);
    recv[root] = NumBytes(out);
    InPlace(out, "scatter", [&](at::Tensor& c) {
      Comm().AllToAllV(buf.data_ptr(), send.data(), sdispls.data(), c.data_ptr(), recv.data(),
                       rdispls.data(), ACL_INT8);
    });
  });
}

// Splits are in rows of dim 0; empty split lists mean equal splits (torch's convention).
c10::intrusive_ptr<c10d::Work> CollopsBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& outputSplits,
                                                             std::vector<int64_t>& inputSplits,
                                                             const c10d::AllToAllOptions&) {
  CheckEntry("all_to_all_single", input, "input", output, "output");
  return Run(c10d::OpType::ALLTOALL_BASE, {output}, [&] {
    TORCH_CHECK(input.scalar_type() == output.scalar_type(),
                "collops backend: all_to_all_single input is ", input.scalar_type(),
                " but output is ", output.scalar_type());
    at::Tensor in = input.contiguous();
    // In elements of the dtype, so ranks whose tensors differ in dtype fail the check.
    const auto [dtype, es] = MovedAs(in);
    std::vector<int64_t> sc, sd, rc, rd;
    RowSplits(in, inputSplits, "input", es, &sc, &sd);
    RowSplits(output, outputSplits, "output", es, &rc, &rd);
    InPlace(output, "alltoall_base", [&](at::Tensor& c) {
      Comm().AllToAllV(in.data_ptr(), sc.data(), sd.data(), c.data_ptr(), rc.data(), rd.data(),
                       dtype);
    });
  });
}

c10::intrusive_ptr<c10d::Work> CollopsBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions&) {
  CheckEntry("all_to_all", inputs, "input_tensor_list", outputs, "output_tensor_list");
  return Run(c10d::OpType::ALLTOALL, outputs, [&] {
    TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() &&
                    static_cast<int>(outputs.size()) == getSize(),
                "collops backend: alltoall needs ", getSize(), " inputs and outputs");
    std::vector<int64_t> sc, sd, rc, rd;
    at::Tensor in = Pack(inputs, &sc, &sd);
    at::Tensor out = Pack(outputs, &rc, &rd);
    Comm().AllToAllV(in.data_ptr(), sc.data(), sd.data(), out.data_ptr(), rc.data(), rd.data(),
                     ACL_INT8);
    Unpack(out, outputs, rd);
  });
}

void CollopsBackend::CheckAllGatherList(const std::vector<at::Tensor>& outs,
                                        const at::Tensor& input) const {
  TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "collops backend: allgather needs ",
              getSize(), " outputs, got ", outs.size());
  const int64_t es = MovedAs(input).second;
  for (const auto& o : outs) {
    TORCH_CHECK(static_cast<int64_t>(NumBytes(o)) % es == 0, "collops backend: allgather ",
                "output of ", NumBytes(o), " bytes does not hold whole ", input.scalar_type(),
                " elements");
  }
  const at::Tensor& own = outs[getRank()];
  TORCH_CHECK(NumBytes(own) == NumBytes(input), "collops backend: allgather output ", getRank(),
              " has ", NumBytes(own), " bytes but this rank's input has ", NumBytes(input));
}

void CollopsBackend::AllGatherList(std::vector<at::Tensor>& outs, const at::Tensor& input) {
  at::Tensor in = input.contiguous();
  const auto [dtype, es] = MovedAs(in);
  std::vector<int64_t> counts, displs;  // in elements of dtype
  int64_t total = 0;
  for (const auto& o : outs) {
    counts.push_back(static_cast<int64_t>(NumBytes(o)) / es);
    displs.push_back(total);
    total += counts.back();
  }
  at::Tensor buf = at::empty({total * es}, at::kByte);
  Comm().AllGatherV(in.data_ptr(), static_cast<int64_t>(NumBytes(in)) / es, buf.data_ptr(),
                    counts.data(), displs.data(), dtype);
  for (auto& d : displs) d *= es;
  Unpack(buf, outs, displs);
}

void CollopsBackend::CheckAllGatherFlat(const at::Tensor& output, const at::Tensor& input) const {
  // The bytes move as they are: another output dtype would reinterpret them.
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "collops backend: all_gather_into_tensor output has dtype ", output.scalar_type(),
              " but the input has ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "collops backend: all_gather_into_tensor output has ", output.numel(),
              " elements, expected ", input.numel() * getSize());
}

void CollopsBackend::AllGatherFlat(at::Tensor& output, const at::Tensor& input) {
  at::Tensor in = input.contiguous();
  const auto [dtype, es] = MovedAs(in);
  const int64_t n = static_cast<int64_t>(NumBytes(in)) / es;
  const EvenBlocks blocks(getSize(), n);
  InPlace(output, "all_gather_into_tensor", [&](at::Tensor& c) {
    Comm().AllGatherV(in.data_ptr(), n, c.data_ptr(), blocks.counts.data(), blocks.displs.data(),
                      dtype);
  });
}

void CollopsBackend::RowSplits(const at::Tensor& t, const std::vector<int64_t>& splits,
                               const char* which, int64_t unitBytes, std::vector<int64_t>* counts,
                               std::vector<int64_t>* displs) const {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowUnits = rows == 0 ? 0 : static_cast<int64_t>(NumBytes(t)) / rows / unitBytes;
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    TORCH_CHECK(rows % getSize() == 0, "collops backend: all_to_all_single ", which, " has ", rows,
                " rows, not divisible by ", getSize(), " ranks; pass split sizes");
    s.assign(getSize(), rows / getSize());
  }
  TORCH_CHECK(static_cast<int>(s.size()) == getSize(), "collops backend: all_to_all_single ", which,
              " split sizes have ", s.size(), " entries for ", getSize(), " ranks");
  int64_t at = 0;
  for (int64_t n : s) {
    TORCH_CHECK(n >= 0, "collops backend: negative ", which, " split size ", n);
    displs->push_back(at * rowUnits);
    counts->push_back(n * rowUnits);
    at += n;
  }
  TORCH_CHECK(at == rows, "collops backend: all_to_all_single ", which, " split sizes sum to ", at,
              " but the tensor has ", rows, " rows");
}

}  // namespace collops
