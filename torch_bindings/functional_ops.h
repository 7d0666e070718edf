// torch.ops.collops.*: which ops have C++ kernels (functional_ops.cpp). python/collops/ops.py
// asks, so that it registers Python kernels only where none is here.
#pragma once

#include <string>
#include <vector>

namespace collops {

/// The names (as ops.py's SCHEMAS has them) of the ops whose eager and autograd kernels are C++:
/// the ops with gradients, quant_all_reduce and all_reduce_.
std::vector<std::string> FunctionalOpNames();

}  // namespace collops
