#include "collops/signature.h"

#include <cstddef>
#include <cstring>

#include "collops/status.h"

namespace collops {
namespace {

/// Fixed-size header shared by every rank; followed by 2 * R int64 (sendCounts, recvCounts).
struct WireHeader {
  char opName[48];  // truncated name, for the message; opHash decides
  uint64_t opHash;
  int32_t dtype;
  int32_t root;
  int64_t count;
  uint64_t valuesDigest;
  char valuesField[24];  // names what valuesDigest covers, for the message (engines that keep
                         // only some fields of the caller's signature still have it here)
  int64_t hasCounts;
  int32_t failedStatus;
  int32_t unused;
};

uint64_t HashName(const std::string& name) {  // FNV-1a: stable across processes and builds
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string ReducingOpName(const char* op, ReduceOp reduction) {
  const char* name = ReduceOpName(reduction);
  std::string out;
  out.reserve(std::strlen(op) + 1 + std::strlen(name));
  return out.append(op).append(1, '/').append(name);
}

size_t AgreementRecordBytes(int rankSize) {
  return sizeof(WireHeader) + 2 * static_cast<size_t>(rankSize) * sizeof(int64_t);
}

void EncodeAgreement(const CallSignature& mine, int rankSize, uint8_t* record) {
  const size_t countsBytes = static_cast<size_t>(rankSize) * sizeof(int64_t);
  const bool hasCounts = !mine.sendCounts.empty();
  if (hasCounts && (mine.sendCounts.size() != static_cast<size_t>(rankSize) ||
                    mine.recvCounts.size() != static_cast<size_t>(rankSize))) {
    Fail(ERROR_INTERNAL_ERROR, mine.opName, ": signature count vectors must have ", rankSize,
         " entries");
  }
  WireHeader header{};
  std::strncpy(header.opName, mine.opName.c_str(), sizeof header.opName - 1);
  // The hash of the name this thread encoded last, kept: a loop repeats its call's name.
  thread_local std::string hashedName;
  thread_local uint64_t hash = HashName(hashedName);
  if (mine.opName != hashedName) {
    hashedName = mine.opName;
    hash = HashName(hashedName);
  }
  header.opHash = hash;
  header.dtype = static_cast<int32_t>(mine.dtype);
  header.root = mine.root;
  header.count = mine.count;
  header.valuesDigest = mine.valuesDigest;
  std::strncpy(header.valuesField, mine.valuesField.c_str(), sizeof header.valuesField - 1);
  header.hasCounts = hasCounts ? 1 : 0;
  header.failedStatus = mine.failedStatus;
  std::memcpy(record, &header, sizeof header);
  if (hasCounts) {
    std::memcpy(record + sizeof header, mine.sendCounts.data(), countsBytes);
    std::memcpy(record + sizeof header + countsBytes, mine.recvCounts.data(), countsBytes);
  } else {
    std::memset(record + sizeof header, 0, 2 * countsBytes);
  }
}

int64_t RecordedCount(const uint8_t* record, int rankSize, bool recv, int j) {
  int64_t v;
  std::memcpy(&v, record + sizeof(WireHeader) + ((recv ? rankSize : 0) + j) * sizeof v, sizeof v);
  return v;
}

namespace {

// Rank i's sendCounts[j] against rank j's recvCounts[i], for every pair.
void CheckCounts(const uint8_t* records, size_t stride, int size, const CallSignature& mine) {
  for (int i = 0; i < size; ++i) {
    for (int j = 0; j < size; ++j) {
      const int64_t sent = RecordedCount(records + i * stride, size, false, j);
      const int64_t expected = RecordedCount(records + j * stride, size, true, i);
      if (sent != expected) {
        Fail(ERROR_RANK_MISMATCH, mine.opName, ": ranks disagree on counts: rank ", i, " sends ",
             sent, " elements to rank ", j, " (", mine.sendField, ") but rank ", j, " expects ",
             expected, " from rank ", i, " (", mine.recvField, ")");
      }
    }
  }
}

}  // namespace

void CheckAgreementRecords(const uint8_t* records, size_t stride, int size,
                           const CallSignature& mine) {
  // Read in place (records need not be aligned): no allocation on the path of every call.
  const auto header = [&](int r) {
    WireHeader h;
    std::memcpy(&h, records + r * stride, sizeof h);
    return h;
  };
  // What every call checks first: that no rank failed and every rank's agreed fields (opHash to
  // valuesDigest, laid out without padding, and hasCounts) are rank 0's bytes, read in place. Only
  // when one is not do the checks below look for which, to name it.
  constexpr size_t kAgreedFrom = offsetof(WireHeader, opHash);
  constexpr size_t kAgreedBytes = offsetof(WireHeader, valuesField) - kAgreedFrom;
  static_assert(kAgreedBytes == sizeof(uint64_t) + 2 * sizeof(int32_t) + 2 * sizeof(int64_t),
                "WireHeader's agreed fields must be contiguous");
  const auto field = [&](int r, size_t offset, auto value) {
    std::memcpy(&value, records + r * stride + offset, sizeof value);
    return value;
  };
  bool agreed = true;
  for (int r = 0; r < size && agreed; ++r) {
    agreed = field(r, offsetof(WireHeader, failedStatus), int32_t{0}) == 0 &&
             (r == 0 || (std::memcmp(records + kAgreedFrom, records + r * stride + kAgreedFrom,
                                     kAgreedBytes) == 0 &&
                         field(r, offsetof(WireHeader, hasCounts), int64_t{0}) ==
                             field(0, offsetof(WireHeader, hasCounts), int64_t{0})));
  }
  if (agreed) {
    if (field(0, offsetof(WireHeader, hasCounts), int64_t{0}) != 0)
      CheckCounts(records, stride, size, mine);
    return;
  }
  // Every rank scans the same records in the same order, so all report the same first
  // disagreement.
  for (int r = 0; r < size; ++r) {
    const int32_t failed = header(r).failedStatus;
    if (failed != 0) {
      Fail(ERROR_RANK_MISMATCH, mine.opName, ": rank ", r, " failed its own checks for this call (",
           StatusName(failed), "); its error message says why");
    }
  }
  const WireHeader a = header(0);
  for (int r = 1; r < size; ++r) {
    const WireHeader b = header(r);
    if (a.opHash != b.opHash || a.hasCounts != b.hasCounts) {
      // The names are the ranks' own bytes: a record written over may have no terminator.
      Fail(ERROR_RANK_MISMATCH, mine.opName, ": ranks disagree on the operation: rank 0 runs ",
           PeerText(a.opName, sizeof a.opName), " but rank ", r, " runs ",
           PeerText(b.opName, sizeof b.opName));
    }
    if (a.dtype != b.dtype) {
      Fail(ERROR_RANK_MISMATCH, mine.opName, ": ranks disagree on dtype: rank 0 has ",
           DataTypeName(static_cast<DataType>(a.dtype)), " but rank ", r, " has ",
           DataTypeName(static_cast<DataType>(b.dtype)));
    }
    if (a.root != b.root) {
      Fail(ERROR_RANK_MISMATCH, mine.opName, ": ranks disagree on the root: rank 0 has rankRoot ",
           a.root, " but rank ", r, " has ", b.root);
    }
    if (a.count != b.count) {
      Fail(ERROR_RANK_MISMATCH, mine.opName, ": ranks disagree on the element count: rank 0 has ",
           a.count, " but rank ", r, " has ", b.count);
    }
    if (a.valuesDigest != b.valuesDigest) {
      Fail(ERROR_RANK_MISMATCH, mine.opName, ": ranks disagree on ",
           a.valuesField[0] == '\0' ? "the values they must share" : a.valuesField,
           ": rank 0's differ from rank ", r, "'s");
    }
  }
  if (a.hasCounts != 0) CheckCounts(records, stride, size, mine);
}

std::vector<uint8_t> ExchangeAgreement(
    int rankSize, const CallSignature& mine,
    const std::function<void(const void* in, void* out, size_t bytes)>& gather) {
  const size_t recordBytes = AgreementRecordBytes(rankSize);
  std::vector<uint8_t> record(recordBytes);
  EncodeAgreement(mine, rankSize, record.data());
  std::vector<uint8_t> all(recordBytes * rankSize);
  gather(record.data(), all.data(), recordBytes);
  CheckAgreementRecords(all.data(), recordBytes, rankSize, mine);
  return all;
}

std::vector<uint8_t> ExchangeAgreement(Communicator& comm, const CallSignature& mine) {
  return ExchangeAgreement(comm.Size(), mine, [&](const void* in, void* out, size_t bytes) {
    comm.AllGatherBytes(in, out, bytes);
  });
}

void VerifyAgreement(Communicator& comm, const CallSignature& mine) {
  ExchangeAgreement(comm, mine);
}

void ShareLocalFailure(Communicator& comm, const std::string& opName, Status status) {
  CallSignature failed;
  failed.opName = opName;
  failed.failedStatus = status == NO_ERROR ? ERROR_INTERNAL_ERROR : status;
  try {
    comm.Agree(failed);
  } catch (const Error&) {
    // Expected (our own record fails the check) or the peers are gone: either way the caller's
    // own error is the one to report.
  }
}

}  // namespace collops
