#include "ft/base/torch_features.h"

#include "compat.h"

namespace ft {

bool sdpa_available() { return compat::kHaveSdpa; }

}  // namespace ft
