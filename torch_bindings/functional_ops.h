// torch.ops.collops.*: which ops have C++ kernels (functional_ops.cpp). python/collops/ops.py
// asks, so that it registers Python kernels only where none is here.
#pragma once

#include <string>
#include <vector>

namespace collops {

/// The names (as ops.py's SCHEMAS has them) of the ops whose eager and autograd kernels are C++.
std::vector<std::string> FunctionalOpNames();

}  // namespace collops
