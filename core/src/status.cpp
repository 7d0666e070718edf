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

void SetLastErrorMessage(std::string message) { lastErrorMessage = std::move(message); }

}  // namespace collops
