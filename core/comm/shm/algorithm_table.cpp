#include "core/comm/shm/algorithm_table.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "collops/algorithms.h"
#include "collops/environment.h"
#include "collops/status.h"

namespace collops {
namespace shm {
namespace {

struct ProcessAlgorithm {
  Collective collective;
  Algo algo;
  AlgorithmInfo info;
};

// One row per algorithm; the selectors that pick them are in shm_policy.cpp, the algorithms in
// the file of their collective (allreduce.cpp, gather.cpp, reduce_scatter.cpp, alltoallv.cpp,
// p2p.cpp, quant_allreduce.cpp).
const ProcessAlgorithm kProcessAlgorithms[] = {
    {Collective::kAllReduce,
     kAlgoOneShot,
     {"AllReduce", "AllReduce", "oneshot",
      "each rank stages its input in its slot, one round, then every rank reduces all R inputs in "
      "rank order straight into its output; a call over 896 KiB goes in rounds of half an `rsag` "
      "chunk, an output of 8 MiB or more not in place summed with non-temporal stores; in a "
      "one-round call of 64 KiB or more, an input whose rank's input and output lie "
      "in its heap is read in place instead, and one more round keeps it there",
      "any call",
      "up to 64 KiB (8 KiB when the ranks outnumber the CPUs; never past half a slot), and at "
      "R = 2 with a CPU each at every size"}},
    {Collective::kAllReduce,
     kAlgoReduceScatterAllGather,
     {"AllReduce", "AllReduce", "rsag",
      "per chunk (one core's L2 cache within 1-2 MiB with a CPU per rank, else 2 MiB; at most "
      "half a slot): each rank stages the slices the others reduce, reduces its own "
      "slice over all ranks into its slot and copies every reduced slice out; the round that "
      "publishes a chunk's staged slices also publishes the previous chunk's reduced ones, so K "
      "chunks take K + 1 rounds; inputs in heaps are read in place",
      "any call", "where neither `oneshot` nor `cma` is picked"}},
    {Collective::kAllReduce,
     kAlgoCrossMemory,
     {"AllReduce", "AllReduce", "cma",
      "each rank reads the peers' parts of its slice with process_vm_readv, reduces them in rank "
      "order and writes the result into every peer's output with process_vm_writev: two rounds "
      "whatever the size",
      "the creation probe allowed process_vm_readv/writev between all ranks",
      "slices of 16 KiB or more (32 KiB, and at most two ranks per CPU, when the ranks outnumber "
      "the CPUs), R × size ≤ 32 MiB, and a kernel copy measured at creation at most 2.2 times a "
      "user copy"}},
    {Collective::kAllReduce,
     kAlgoHeap,
     {"AllReduce", "AllReduce", "heap",
      "each rank reduces its slice straight from the peers' inputs into its output, then copies "
      "the peers' reduced slices from their outputs: three rounds, no staging, no system call",
      "every rank's input and output lie in its heap (AllocateShared)",
      "after the first round of `rsag`, `cma`, a one-round `oneshot` of 64 KiB or more or a "
      "`oneshot` of several rounds, when every rank's input and output lie in its heap"}},
    {Collective::kAllGather,
     kAlgoStaged,
     {"AllGather", "AllGatherBytes, AllGatherV", "staged",
      "each rank copies its input into its slot and every rank copies everyone's out, one round "
      "per half-slot",
      "any call", "for every input neither `heap` nor `cma` takes"}},
    {Collective::kAllGather,
     kAlgoHeap,
     {"AllGather", "AllGatherBytes, AllGatherV", "heap",
      "an input of 8 KiB or more that lies in its rank's heap is read in place by the peers after "
      "the first round, and a second round keeps it there; smaller inputs are staged",
      "every input of 8 KiB or more lies in its rank's heap",
      "for each input in its rank's heap of 8 KiB or more"}},
    {Collective::kAllGather,
     kAlgoCrossMemory,
     {"AllGather", "AllGatherBytes, AllGatherV", "cma",
      "an input of `COLLOPS_SHM_CMA_BYTES` (16 KiB) or more is read by every peer from its rank's "
      "process with process_vm_readv after the first round, and a second round keeps it there; "
      "smaller inputs are staged",
      "the creation probe allowed process_vm_readv/writev between all ranks",
      "for each other input of 16 KiB or more (one core's L2 cache or more where the probe put a "
      "kernel copy above 3.5 user copies), when every rank has a CPU of its own and R × output ≤ "
      "32 MiB"}},
    {Collective::kBroadcast,
     kAlgoStaged,
     {"Broadcast", "Broadcast", "staged",
      "the root copies its buffer into its slot and every other rank copies it out, one round per "
      "half-slot",
      "any call", "where neither `heap` nor `cma` is picked"}},
    {Collective::kBroadcast,
     kAlgoHeap,
     {"Broadcast", "Broadcast", "heap",
      "a root buffer of 8 KiB or more in the root's heap is read in place by the other ranks after "
      "the first round, and a second round keeps it there; a smaller one is staged",
      "the root's buffer, when 8 KiB or more, lies in its heap",
      "the root's buffer lies in its heap and is 8 KiB or more"}},
    {Collective::kBroadcast,
     kAlgoCrossMemory,
     {"Broadcast", "Broadcast", "cma",
      "a root buffer of `COLLOPS_SHM_CMA_BYTES` (16 KiB) or more is read by every other rank from "
      "the root's process with process_vm_readv after the first round; a smaller one is staged",
      "the creation probe allowed process_vm_readv/writev between all ranks",
      "a buffer not in the heap of 16 KiB or more (one core's L2 cache or more where the probe put "
      "a kernel copy above 3.5 user copies), when every rank has a CPU of its own and R × size ≤ "
      "32 MiB"}},
    {Collective::kReduceScatter,
     kAlgoStaged,
     {"ReduceScatter", "ReduceScatterV", "staged",
      "each half-slot is cut into R − 1 regions, one per other rank; every rank reduces its region "
      "of every rank with its own piece read in place, one round per region-full",
      "any call", "for every piece `heap` does not take"}},
    {Collective::kReduceScatter,
     kAlgoHeap,
     {"ReduceScatter", "ReduceScatterV", "heap",
      "a rank whose input lies in its heap stages none of its pieces of 8 KiB or more: their "
      "receivers reduce them in place, and a last round keeps the inputs there",
      "every rank's input lies in its heap",
      "for the pieces of each rank whose input lies in its heap"}},
    {Collective::kAllToAll,
     kAlgoStaged,
     {"AllToAll", "AllToAllV", "staged",
      "R − 1 regions per half-slot as ReduceScatter, the own piece copied locally; the largest "
      "staged piece anywhere sets the number of rounds",
      "any call", "for every piece neither `heap` nor `cma` takes"}},
    {Collective::kAllToAll,
     kAlgoHeap,
     {"AllToAll", "AllToAllV", "heap",
      "a piece goes straight into its receiver's output where that lies in the receiver's heap, "
      "or is read from its sender's input where that lies in the sender's heap (whole from 8 KiB, "
      "else after its first region); a second round keeps the buffers in place",
      "for every pair of ranks, the sender's input or the receiver's output lies in a heap",
      "for each piece whose sender's input or receiver's output lies in a heap"}},
    {Collective::kAllToAll,
     kAlgoCrossMemory,
     {"AllToAll", "AllToAllV", "cma",
      "a piece of `COLLOPS_SHM_CMA_BYTES` (16 KiB) or more is read by its receiver from the "
      "sender's process with process_vm_readv after the first round, and a second round keeps "
      "the input in place; smaller pieces are staged",
      "the creation probe allowed process_vm_readv/writev between all ranks",
      "for each piece of 16 KiB or more (one core's L2 cache or more where the probe put a kernel "
      "copy above 3.5 user copies) whose sender's input is not in its heap"}},
    {Collective::kSendRecv,
     kAlgoStaged,
     {"SendRecv", "Send, Recv, Exchange", "staged",
      "through the sender's slot in two chunk buffers, so that copying in and out overlap; a "
      "send returns once its receiver has the data",
      "any call", "for every message `cma` does not take"}},
    {Collective::kSendRecv,
     kAlgoCrossMemory,
     {"SendRecv", "Send, Recv, Exchange", "cma",
      "the receiver reads a message of `COLLOPS_SHM_CMA_BYTES` (16 KiB) or more straight from the "
      "sender's buffer with process_vm_readv, one copy; smaller messages are staged",
      "the creation probe allowed process_vm_readv/writev between all ranks",
      "16 KiB or more, and up to 32 MiB unless the ranks outnumber the CPUs or the sender's group "
      "also receives"}},
    {Collective::kBarrier,
     kAlgoRound,
     {"Barrier", "Barrier", "round", "one round", "any call", "always"}},
    {Collective::kQuantAllReduce,
     kAlgoOneShot,
     {"QuantAllReduce", "AllReduceQuantised", "oneshot",
      "each rank stages its int8 input in its slot, one round, then every rank sums all R inputs "
      "and dequantises the whole output; one round per chunk of output (AllReduce `rsag`'s chunk, "
      "at most a half-slot of int8), an output of 8 MiB or more in several rounds written with "
      "non-temporal stores",
      "any call",
      "at R = 2 with a CPU each, and wherever the output is 64 KiB or less (8 KiB when the ranks "
      "outnumber the CPUs)"}},
    {Collective::kQuantAllReduce,
     kAlgoReduceScatterAllGather,
     {"QuantAllReduce", "AllReduceQuantised", "rsag",
      "per chunk of output as AllReduce `rsag`'s: each rank stages the int8 slices the others sum, "
      "dequantises its own slice over all ranks into its slot and copies every dequantised slice "
      "out; the round that publishes a chunk's staged slices also publishes the previous chunk's "
      "dequantised ones, so K chunks take K + 1 rounds",
      "any call", "where `oneshot` is not picked"}},
};

const AlgorithmInfo kThreadAlgorithms[] = {
    {"AllReduce", "AllReduce", "oneshot",
     "every rank reduces all R inputs straight from the peers' buffers into its output: two "
     "Syncs",
     "no rank runs in place", "up to 32 KiB, when no rank runs in place"},
    {"AllReduce", "AllReduce", "slices",
     "each rank reduces its slice from the peers' inputs into its output, then copies the peers' "
     "reduced slices from their outputs: three Syncs",
     "any call", "otherwise"},
    {"QuantAllReduce", "AllReduceQuantised", "oneshot",
     "every rank sums all R int8 inputs straight from the peers' buffers and dequantises the "
     "whole output: two Syncs",
     "any call", "at R = 2, and up to 32 KiB of output"},
    {"QuantAllReduce", "AllReduceQuantised", "slices",
     "each rank sums and dequantises its slice from the peers' int8 inputs into its output, then "
     "copies the peers' slices from their outputs: three Syncs",
     "any call", "otherwise"},
};

std::vector<AlgorithmInfo> ProcessRows() {
  std::vector<AlgorithmInfo> rows;
  for (const ProcessAlgorithm& a : kProcessAlgorithms) rows.push_back(a.info);
  return rows;
}

[[maybe_unused]] const bool kProcessRegistered =
    RegisterAlgorithms({"lccl, multi-process (`commMode` 0)", 0, "COLLOPS_ALGO_", ProcessRows()});
[[maybe_unused]] const bool kThreadRegistered = RegisterAlgorithms(
    {"lccl, multi-thread (`commMode` 1)", 1, "",
     std::vector<AlgorithmInfo>(std::begin(kThreadAlgorithms), std::end(kThreadAlgorithms))});

}  // namespace

const char* CollectiveName(Collective collective) {
  static const char* const kNames[kCollectives] = {"AllReduce",     "AllGather",     "Broadcast",
                                                   "ReduceScatter", "AllToAll",      "SendRecv",
                                                   "Barrier",       "QuantAllReduce"};
  return kNames[static_cast<int>(collective)];
}

const char* AlgoName(Algo algo) {
  if (algo == kAlgoAuto) return "auto";
  for (const ProcessAlgorithm& a : kProcessAlgorithms) {
    if (a.algo == algo) return a.info.name;
  }
  return "unknown";
}

std::string KnobOf(Collective collective) {
  return AlgorithmKnob("COLLOPS_ALGO_", CollectiveName(collective));
}

Algo ForcedFromEnv(Collective collective) {
  // The knob takes "auto" and the names of this collective's rows (collops/environment.h).
  const std::string name = KnobWord(KnobOf(collective), "auto");
  for (const ProcessAlgorithm& a : kProcessAlgorithms) {
    if (a.collective == collective && name == a.info.name) return a.algo;
  }
  return kAlgoAuto;
}

void FailForced(const std::string& where, Collective collective, Algo algo,
                const std::string& why) {
  Fail(ERROR_INVALID_PARAM, where, KnobOf(collective), "=", AlgoName(algo),
       " (rank 0's environment) cannot run this call: ", why);
}

}  // namespace shm
}  // namespace collops
