#include "collops/status.h"

#include <cstdio>

namespace collops {
namespace {
thread_local std::string lastErrorMessage;
}  // namespace

const char* StatusName(int32_t status) {
  switch (status) {
    case NO_ERROR:
      return "NO_ERROR";
    case ERROR_INVALID_PARAM:
      return "ERROR_INVALID_PARAM";
    case ERROR_INTERNAL_ERROR:
      return "ERROR_INTERNAL_ERROR";
    case ERROR_INVALID_IN_TENSOR_NUM:
      return "ERROR_INVALID_IN_TENSOR_NUM";
    case ERROR_INVALID_TENSOR_DTYPE:
      return "ERROR_INVALID_TENSOR_DTYPE";
    case ERROR_INVALID_TENSOR_FORMAT:
      return "ERROR_INVALID_TENSOR_FORMAT";
    case ERROR_INVALID_TENSOR_DIM:
      return "ERROR_INVALID_TENSOR_DIM";
    case ERROR_INVALID_TENSOR_SIZE:
      return "ERROR_INVALID_TENSOR_SIZE";
    case ERROR_INVALID_TENSOR_INI_MATCH:
      return "ERROR_INVALID_TENSOR_INI_MATCH";
    case ERROR_INVALID_TENSOR_ADDR:
      return "ERROR_INVALID_TENSOR_ADDR";
    case ERROR_INVALID_TENSOR_NUM:
      return "ERROR_INVALID_TENSOR_NUM";
    case ERROR_INVALID_TENSOR_DIM_NUM:
      return "ERROR_INVALID_TENSOR_DIM_NUM";
    case ERROR_INVALID_CONTEXT_ADDR:
      return "ERROR_INVALID_CONTEXT_ADDR";
    case ERROR_INVALID_WORKSPACE_SIZE:
      return "ERROR_INVALID_WORKSPACE_SIZE";
    case ERROR_INVALID_WORKSPACE_ADDR:
      return "ERROR_INVALID_WORKSPACE_ADDR";
    case ERROR_COMM_FAIL:
      return "ERROR_COMM_FAIL";
    case ERROR_OUT_OF_HOST_MEMORY:
      return "ERROR_OUT_OF_HOST_MEMORY";
    case ERROR_COMM_EMPTY:
      return "ERROR_COMM_EMPTY";
    case ERROR_TIMEOUT:
      return "ERROR_TIMEOUT";
    case ERROR_PEER_LOST:
      return "ERROR_PEER_LOST";
    case ERROR_RANK_MISMATCH:
      return "ERROR_RANK_MISMATCH";
    case ERROR_BACKEND_UNAVAILABLE:
      return "ERROR_BACKEND_UNAVAILABLE";
    default:
      return "UNKNOWN_STATUS";
  }
}

namespace {

/// Bytes of the well-formed UTF-8 sequence starting at text[i] (RFC 3629, Table 3-7 of Unicode),
/// 0 when none starts there.
size_t Utf8SequenceBytes(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  const auto continuation = [&](size_t k, unsigned char low, unsigned char high) {
    return k < text.size() && byte(k) >= low && byte(k) <= high;
  };
  if (b0 >= 0xc2 && b0 <= 0xdf) return continuation(i + 1, 0x80, 0xbf) ? 2 : 0;
  if (b0 >= 0xe0 && b0 <= 0xef) {
    const unsigned char low = b0 == 0xe0 ? 0xa0 : 0x80;   // no overlong forms
    const unsigned char high = b0 == 0xed ? 0x9f : 0xbf;  // no surrogates
    return continuation(i + 1, low, high) && continuation(i + 2, 0x80, 0xbf) ? 3 : 0;
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    const unsigned char low = b0 == 0xf0 ? 0x90 : 0x80;   // no overlong forms
    const unsigned char high = b0 == 0xf4 ? 0x8f : 0xbf;  // nothing past U+10FFFF
    return continuation(i + 1, low, high) && continuation(i + 2, 0x80, 0xbf) &&
                   continuation(i + 3, 0x80, 0xbf)
               ? 4
               : 0;
  }
  return 0;
}

}  // namespace

std::string ValidUtf8(std::string text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = Utf8SequenceBytes(text, i);
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return text;  // the common case: nothing to escape, nothing copied
  std::string valid = text.substr(0, i);
  while (i < text.size()) {
    const size_t n = Utf8SequenceBytes(text, i);
    if (n != 0) {
      valid.append(text, i, n);
      i += n;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", static_cast<unsigned char>(text[i]));
      valid += escaped;
      ++i;
    }
  }
  return valid;
}

std::string PeerText(const char* data, size_t capacity) {
  std::string text;
  for (size_t i = 0; i < capacity && data[i] != '\0'; ++i) {
    const auto byte = static_cast<unsigned char>(data[i]);
    if (byte >= 0x20 && byte < 0x7f) {
      text.push_back(static_cast<char>(byte));
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", byte);
      text += escaped;
    }
  }
  return text;
}

const std::string& LastErrorMessage() { return lastErrorMessage; }

void SetLastErrorMessage(std::string message) { lastErrorMessage = ValidUtf8(std::move(message)); }

void ClearLastErrorMessage() { lastErrorMessage.clear(); }

}  // namespace collops
