#include "ft/base/error.h"

namespace ft {

// The key function: anchors Error's vtable and destructor in ft_core.
Error::~Error() = default;

}  // namespace ft
